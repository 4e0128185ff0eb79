"""The first paper's two tradeoffs as bench rows, for every drafter whose effort is K denoising steps, around the
configuration tuned for it on validation (`spec_<kind>`: B, K, cache):

- effort rows `spec_<kind> K=k` (`settings.tradeoff_steps`): at every K the B and cache fastest on validation
  for that K (the tuning grid's, `tuner.choose`), lossless, measured beside every other row (Figure 3b, Eq. 6-7);
- leniency rows `spec_<kind> <rule> <value>[ K=k]` (`settings.leniency`: Linear(lam), Typical(eps), ...) at each
  K of `settings.leniency_steps` (default K = 1, where q is the drafter's exact marginal; at K > 1, q is the
  marginal of the step that unmasked each token, an approximation), each at the B and cache of the lossless row
  at that K (the tuned row, or the effort row `spec_<kind> K=k`) and beside it; what each emits is measured by
  `agreement`, one untimed run per row on the same prompts and seed:
  - emitted_tv: the mean over emitted tokens of TV(p_i, E_i), E_i the law the rule emits at that position given
    the tokens before it (`theory.emitted_distribution`; 0 for a bonus token, drawn from p);
  - greedy_agreement: the share of emitted tokens that are the verifier's most likely token given the tokens
    before them (one teacher-forced forward over prompt + output).
`summaries` gives the report's `k_tradeoff`, `leniency` and `speedup_adaptive_vs_fixed` keys.
"""
from __future__ import annotations

from dataclasses import replace

from specdiff.bench import rows as named
from specdiff.bench.tuner import choose


def tradeoff_rows(kinds: list[str], chosen: dict, grid: list[dict], settings) -> tuple[dict, dict]:
    """({row: RunConfig} of the effort and leniency rows, {row: RunConfig} of the rows whose agreement is
    measured: the leniency rows and the lossless row at each of their K)."""
    from specdiff.runs import RunConfig

    extra, lenient = {}, {}
    for kind in kinds:
        fixed = named.spec(kind).name
        tuned = RunConfig(**chosen[fixed]["config"])
        for k in settings.tradeoff_steps:
            if k == tuned.steps:
                continue
            mine = [row for row in grid if row["row"] == fixed and row["config"].get("steps") == k]
            config = RunConfig(**choose(mine)["config"]) if mine else (
                replace(tuned, steps=k) if k <= tuned.block_size else None)
            if config is not None:
                name = named.spec(kind, tuned.drafter, steps=k).name
                extra[name] = replace(config, name=name)
        if not settings.leniency:
            continue
        for k in settings.leniency_steps:
            base = fixed if k == tuned.steps else named.spec(kind, tuned.drafter, steps=k).name
            if base not in extra and base != fixed:
                if k > tuned.block_size:
                    continue
                extra[base] = replace(tuned, name=base, steps=k)
            lossless = tuned if base == fixed else extra[base]
            lenient[base] = replace(lossless, name=base)  # its agreement: the timed lossless row itself
            for entry in settings.leniency:
                rule, _, value = str(entry).partition(":")
                name = named.spec(kind, tuned.drafter, steps=k, rule=f"{rule} {float(value):g}").name
                extra[name] = replace(lossless, name=name, proposal="marginal", threshold=None, rule=rule,
                                      leniency=float(value))
                lenient[name] = replace(extra[name])
    return extra, lenient


def agreement(config, cache, prompts, max_new_tokens: int, seed: int) -> dict:
    """emitted_tv and greedy_agreement (module docstring) of one configuration, untimed, with the seed the timed
    rows use (so the same tokens)."""
    import torch

    from specdiff import theory
    from specdiff.runs import build_generator

    generator = build_generator(config, cache)
    rule, model = generator.rule, generator.verifier.model
    distances = []

    def observe(draft, target_logits, result):  # one row per prompt here: batch 1
        accepted, width = int(result.num_accepted[0]), draft.tokens.shape[1]
        for i in range(min(accepted + 1, width)):  # drafted positions whose token was emitted (y or residual)
            p = torch.softmax(target_logits[0, i].double(), dim=-1)
            q = p if draft.probs is None else draft.probs[0, i].double()
            distances.append(float(theory.total_variation(p, theory.emitted_distribution(rule, p, q))))
        if accepted == width:
            distances.append(0.0)  # the bonus token, drawn from p

    matches, emitted = 0, 0
    for prompt in prompts:
        draws = torch.Generator(device=generator.verifier.device).manual_seed(seed)
        before = len(distances)
        out = generator.generate([prompt.ids], max_new_tokens=max_new_tokens, generator=draws, on_verify=observe)
        ids = out.token_ids[0]
        del distances[before + len(ids):]  # positions past EOS or the token budget were never emitted
        if ids:
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([prompt.ids + ids], device=model.device),
                               logits_to_keep=len(ids) + 1).logits[0, :-1]  # [n, V]: predicts each emitted token
            matches += int((logits.argmax(-1).cpu() == torch.tensor(ids)).sum())
            emitted += len(ids)
    return {"emitted_tv": sum(distances) / max(len(distances), 1), "greedy_agreement": matches / max(emitted, 1),
            "emitted_tokens": emitted}


def summaries(rows: dict, kinds: list[str], chosen: dict) -> dict:
    """The report's `k_tradeoff`, `leniency` and `speedup_adaptive_vs_fixed` keys, from the measured rows."""
    out = {"k_tradeoff": {}, "leniency": {}, "speedup_adaptive_vs_fixed": {}}
    ar = rows[named.PLAIN]["tokens_per_s"]
    for kind in kinds:
        fixed = named.spec(kind).name
        tuned = chosen[fixed]["config"]
        mine = [name for name, row in rows.items() if name != fixed and named.is_fixed_of(row, tuned["drafter"])]
        efforts = {tuned["steps"]: fixed}  # the tuned row, then the lossless effort rows at other K
        efforts.update({rows[name]["config"]["steps"]: name for name in mine
                        if not rows[name].get("rule") and rows[name]["config"].get("rule", "lossless") == "lossless"})
        out["k_tradeoff"][kind] = [
            {"K": k, "row": name, "block_size": rows[name]["config"]["block_size"],
             "prefix_cache": rows[name]["config"]["prefix_cache"],
             "tokens_per_s": rows[name]["tokens_per_s"], "speedup_vs_ar": rows[name]["tokens_per_s"] / ar,
             "mean_accepted": rows[name]["mean_accepted"], "tokens_per_round": rows[name]["tokens_per_round"],
             "drafter_cost_vs_verifier_step": rows[name].get("drafter_cost_vs_verifier_step")}
            for k, name in sorted(efforts.items())]
        lenient = [name for name in mine if rows[name].get("rule")]
        out["leniency"][kind] = []
        for k in sorted({rows[name]["config"]["steps"] for name in lenient}):
            lossless = efforts.get(k)
            if lossless is None:
                continue
            base = rows[lossless]
            out["leniency"][kind] += [
                {"K": k, "row": name, "rule": rows[name].get("rule", "lossless"),
                 "tokens_per_call": rows[name]["tokens_per_round"],
                 "tokens_per_call_vs_lossless": rows[name]["tokens_per_round"] / base["tokens_per_round"],
                 "throughput_vs_lossless": rows[name]["tokens_per_s"] / base["tokens_per_s"],
                 "emitted_tv": rows[name].get("emitted_tv"), "greedy_agreement": rows[name].get("greedy_agreement")}
                for name in [lossless] + [n for n in lenient if rows[n]["config"]["steps"] == k]]
        if not out["leniency"][kind]:
            del out["leniency"][kind]
        adaptive = named.spec(kind, adaptive=True).name
        if adaptive in rows:
            out["speedup_adaptive_vs_fixed"][kind] = rows[adaptive]["tokens_per_s"] / rows[fixed]["tokens_per_s"]
    return out
