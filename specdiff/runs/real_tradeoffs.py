"""The first paper's two tradeoffs on a real verifier, as rows of `specdiff bench speedup --verifier REAL`
(issue 32), for every drafter whose effort is K denoising steps (`runs.kinds.EFFORT`: masked, block,
uniform), around the configuration the bench tuned for it on validation (`spec_<kind>`: B, K, cache):

- effort rows `spec_<kind> K=k` (`Settings.tradeoff_steps`): at every K, the B and cache fastest on
  validation for that K (the tuning grid's), lossless, measured on the test prompts beside every other row.
  The K tradeoff (Figure 3b, Eq. 6-7): acceptance and tokens per round against the drafter's cost per round.
- an adaptive row `spec_<kind>_adaptive`: the run-time controller (`engine.controllers`,
  `Settings.controllers`, at the tuned K and the tuned or the largest B as longest draft) fastest on the
  validation prompts; `speedup_adaptive_vs_fixed` is its tokens/s over `spec_<kind>`'s on the test prompts.
- leniency rows `spec_<kind> <rule>` (`Settings.leniency`: Linear(lam), Typical(eps)) at the tuned B and
  cache with K = 1, where q is the drafter's exact marginal (so what a rule emits is known in closed form),
  beside the lossless `spec_<kind> K=1` row: tokens per call (one verifier forward per round) against
  Lossless's, and the verifier agreement of what each emits (Figure 3a's axis), from one untimed run per row
  on the same prompts and seed (`agreement`):
  - emitted_tv: the mean over emitted tokens of TV(p_i, E_i), E_i the law the rule emits at that position
    given the tokens before it (`theory.emitted_distribution`; Linear: (1 - lam) p + lam q, Theorem 1;
    0 for a bonus token, drawn from p);
  - greedy_agreement: the share of emitted tokens that are the verifier's most likely token given the
    tokens before them (one teacher-forced forward over prompt + output).
"""
from __future__ import annotations

import torch

REAL_CONTROLLERS = ("confidence:floor=0,finish=0.9", "confidence:floor=0.3", "acceptance:margin=2",
                    "confidence:floor=0,finish=0.9+acceptance:margin=4")
LENIENCY = (("linear", 0.3), ("linear", 0.6), ("typical", 0.09), ("typical", 0.2))


def effort_kinds(references: dict) -> list[str]:
    """The kinds among the bench's drafters whose effort is K."""
    from specdiff.runs.kinds import EFFORT

    return [kind for kind in references if "steps" in EFFORT.get(kind, ())]


def effort_configs(kind: str, tuned: dict, steps: list[int], grid: list[dict]) -> dict:
    """{row name: RunConfig}: at every K but the tuned one (`spec_<kind>` is it), the configuration (B, cache)
    fastest on validation among the tuning grid's rows with that K (`choose`); a K the grid lacks runs at the
    tuned B and cache when K <= B."""
    from specdiff.runs import RunConfig
    from specdiff.runs.real_bench import choose

    out = {}
    for k in steps:
        if k == tuned["steps"]:
            continue
        mine = [row for row in grid if row["row"] == f"spec_{kind}" and row["config"].get("steps") == k]
        config = choose(mine)["config"] if mine else ({**tuned, "steps": k} if k <= tuned["block_size"] else None)
        if config is not None:
            out[f"spec_{kind} K={k}"] = RunConfig(**{**config, "name": f"spec_{kind} K={k}"})
    return out


def leniency_configs(kind: str, tuned: dict, rules) -> dict:
    """{row name: RunConfig}: each (rule, leniency) at the tuned B and cache with K = 1, marginal proposals."""
    from specdiff.runs import RunConfig

    base = {**tuned, "steps": 1, "proposal": "marginal", "threshold": None}
    return {f"spec_{kind} {rule} {value:g}": RunConfig(**{**base, "name": f"spec_{kind} {rule} {value:g}",
                                                           "rule": rule, "leniency": value})
            for rule, value in rules}


def adaptive_candidates(kind: str, tuned: dict, controllers, blocks: list[int]) -> list:
    """RunConfigs: the tuned configuration with each controller, longest draft the tuned B and max(blocks)."""
    from specdiff.runs import RunConfig

    longest = sorted({tuned["block_size"], max(blocks)})
    return [RunConfig(**{**tuned, "name": f"{kind} adaptive B<={b} K<={tuned['steps']} {c}", "controller": c,
                         "block_size": b, "proposal": "point_mass"})
            for c in controllers for b in longest]


def agreement(config, cache, prompts, max_new_tokens: int, seed: int) -> dict:
    """emitted_tv and greedy_agreement (module docstring) of one configuration, untimed, on the prompts with
    the same seed the timed rows use (so the same tokens)."""
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
    ar = rows["ar"]["tokens_per_s"]
    for kind in kinds:
        tuned = chosen[f"spec_{kind}"]["config"]
        efforts = {tuned["steps"]: f"spec_{kind}"}
        efforts.update({int(name.rsplit("=", 1)[1]): name for name in rows if name.startswith(f"spec_{kind} K=")})
        out["k_tradeoff"][kind] = [
            {"K": k, "row": name, "block_size": rows[name]["config"]["block_size"],
             "prefix_cache": rows[name]["config"]["prefix_cache"],
             "tokens_per_s": rows[name]["tokens_per_s"], "speedup_vs_ar": rows[name]["tokens_per_s"] / ar,
             "mean_accepted": rows[name]["mean_accepted"], "tokens_per_round": rows[name]["tokens_per_round"],
             "drafter_cost_vs_verifier_step": rows[name].get("drafter_cost_vs_verifier_step")}
            for k, name in sorted(efforts.items())]
        lossless = efforts.get(1)
        lenient = [name for name in rows if name.startswith(f"spec_{kind} ") and rows[name].get("rule")]
        if lossless is not None:
            base = rows[lossless]
            out["leniency"][kind] = [
                {"row": name, "rule": rows[name].get("rule", "lossless"), "tokens_per_call": rows[name]["tokens_per_round"],
                 "tokens_per_call_vs_lossless": rows[name]["tokens_per_round"] / base["tokens_per_round"],
                 "throughput_vs_lossless": rows[name]["tokens_per_s"] / base["tokens_per_s"],
                 "emitted_tv": rows[name].get("emitted_tv"), "greedy_agreement": rows[name].get("greedy_agreement")}
                for name in [lossless] + lenient]
        adaptive = f"spec_{kind}_adaptive"
        if adaptive in rows:
            out["speedup_adaptive_vs_fixed"][kind] = rows[adaptive]["tokens_per_s"] / rows[f"spec_{kind}"]["tokens_per_s"]
    return out
