"""`specdiff zoo eval`: standalone quality and speed of the shipped models on `arith` test problems.

Per model: exact-match accuracy on the first n test problems at its default sampling settings
(verifier and ar-drafter: autoregressive sampling with KV cache; masked-drafter: standalone, the
whole canvas masked, K = canvas length steps, entropy order), parameter count, mean answer length
in tokens, and ms per step. A step is what one speculative round costs the model on this task:
- verifier: one cached forward over B+1 = 17 new tokens after a typical prefix (a verifier round);
- ar-drafter: one cached forward over 1 new token (one drafted token);
- masked-drafter: one uncached bidirectional forward over prompt + prefix + block at the typical
  length (mean prompt + mean answer + 1 tokens), projecting the B = 16 block positions to the
  vocabulary, i.e. one denoising step.
Timing: batch 1, torch threads as set (default 2), warm-up, median of repeats. The masked-step /
verifier-round ratio (`speed`) is measured with the two calls alternating (`speed_ratio`).

The block, uniform and DFlash drafters (the first paper's Table 1 in miniature), when their weights are
in the zoo folder (`available`): block and uniform get their standalone accuracy at each effort of
`STANDALONE_EFFORTS` (block after block of B = 8, every drafted token kept:
`specdiff.drafters.standalone`); every one of them gets `lossless`: its tokens per round and drafting
ms per round with the verifier (lossless rule, B = 8, `LOSSLESS_EFFORT`, exact: point mass where the
block drafter's q is not its marginal) on the first `LOSSLESS_PROBLEMS` problems. DFlash has no
standalone score (it reads the verifier's hidden states).
"""
from __future__ import annotations

import statistics
import time

import torch

from specdiff.eval import tasks
from specdiff.eval.timing import interleaved_median_ms, median_ms
from specdiff.lm.masks import left_pad
from specdiff.zoo import configs

VERIFY_TOKENS = 17  # B + 1 with block B = 16
NEW_DRAFTERS = ("block-drafter", "uniform-drafter", "dflash-drafter")  # evaluated by `drafter_row`
# standalone efforts (K = B: one token per denoising step, as the masked drafter's K = canvas length)
STANDALONE_EFFORTS = {"block-drafter": [dict(steps=8), dict(threshold=0.9)], "uniform-drafter": [dict(steps=8)]}
LOSSLESS_EFFORT = {"block-drafter": dict(steps=4), "uniform-drafter": dict(steps=4), "dflash-drafter": {}}
LOSSLESS_PROBLEMS = 100
STEP_COST_PROBLEMS = 30  # batch 1, timed round by round (`step_cost_row`)


def available(names=configs.TRAINABLE) -> list[str]:
    """The zoo models whose weights are in the zoo folder (the shipped ones, or SPECDIFF_ZOO_DIR's)."""
    from specdiff.zoo import model_dir

    return [name for name in names if (model_dir(name) / "model.safetensors").is_file()]


def _cut_at_eos(ids: list[int], tokenizer) -> list[int]:
    out = []
    for t in ids:
        if t in (tokenizer.eos_token_id, tokenizer.pad_token_id):
            break
        out.append(t)
    return out


@torch.no_grad()
def generate_answers(model, tokenizer, name: str, prompts: list[str], greedy: bool = False, seed: int = 0,
                     batch_size: int = 100, max_new_tokens: int = configs.CANVAS_TOKENS,
                     return_ids: bool = False):
    """Answers of zoo model `name` to `prompts`, at its default sampling settings (or greedy)."""
    sampling = configs.SAMPLING[name]
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    texts, id_rows = [], []
    for start in range(0, len(prompts), batch_size):
        rows = [tokenizer(p).input_ids for p in prompts[start:start + batch_size]]
        ids, mask = left_pad(rows, tokenizer.pad_token_id)
        if configs.TRAINING[name]["objective"] == "mdlm":
            from specdiff.drafters.masked import MaskedDiffusionDrafter

            drafter = MaskedDiffusionDrafter(model, tokenizer=tokenizer,
                                             temperature=0.0 if greedy else sampling["temperature"],
                                             top_p=sampling["top_p"], top_k=sampling["top_k"], order=sampling["order"])
            new = drafter.generate(ids, mask.bool(), max_new_tokens, steps=max_new_tokens, generator=generator)
        else:
            kwargs = dict(do_sample=False) if greedy else dict(do_sample=True, **{k: sampling[k] for k in ("temperature", "top_p", "top_k")})
            out = model.generate(input_ids=ids, attention_mask=mask.long(), max_new_tokens=max_new_tokens,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **kwargs)
            new = out[:, ids.shape[1]:]
        for row in new.tolist():
            answer_ids = _cut_at_eos(row, tokenizer)
            id_rows.append(answer_ids)
            texts.append(tokenizer.decode(answer_ids, skip_special_tokens=True))
    return (texts, id_rows) if return_ids else texts


def step_fn(model, name: str, typical_length: int):
    """A no-argument function that runs one step of zoo model `name` at batch 1 on random tokens of the
    typical length (see module docstring); the masked drafter's step projects only the B = 16 block
    columns to the vocabulary, as `denoise` does when drafting."""
    from transformers import DynamicCache

    from specdiff.lm.cache import cache_kwargs

    ids = torch.randint(5, model.config.vocab_size, (1, typical_length))
    if configs.TRAINING[name]["objective"] == "mdlm":
        from specdiff.drafters.masked import masked_logits

        key_mask = torch.ones_like(ids, dtype=torch.bool)
        block = torch.arange(typical_length - (VERIFY_TOKENS - 1), typical_length)
        return lambda: masked_logits(model, ids, key_mask, block)
    new = VERIFY_TOKENS if name == "verifier" else 1
    prefix_length = typical_length - new
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :prefix_length], **cache_kwargs(model, cache))

    def one_round():
        model(input_ids=ids[:, prefix_length:], **cache_kwargs(model, cache))
        cache.crop(-new)  # roll back the new tokens, as after a rejected draft

    return one_round


@torch.no_grad()
def step_ms(model, name: str, typical_length: int, repeats: int = 30) -> float:
    """Milliseconds of one step of zoo model `name` at batch 1 (median of `repeats` after 5 warm-ups)."""
    return median_ms(step_fn(model, name, typical_length), repeats, warmup=5)


@torch.no_grad()
def speed_ratio(verifier, drafter, typical_length: int, repeats: int = 60, warmup: int = 5) -> dict:
    """One masked-drafter step against one verifier round, timed side by side: the two calls alternate,
    so both see the same machine load. Returns the median ms of each and their ratio."""
    calls = {"masked_step_ms": step_fn(drafter, "masked-drafter", typical_length),
             "verifier_round_ms": step_fn(verifier, "verifier", typical_length)}
    out = {key: round(ms, 3) for key, ms in interleaved_median_ms(calls, repeats, warmup).items()}
    out["masked_step_over_verifier_round"] = round(out["masked_step_ms"] / out["verifier_round_ms"], 3)
    return out


def effort_label(effort: dict) -> str:
    return f"tau={effort['threshold']}" if "threshold" in effort else f"K={effort.get('steps', 1)}"


def drafter_row(name: str, prompts: list[str], targets: list[str], seed: int, batch_size: int,
                quality: bool = True) -> dict:
    """A block, uniform or DFlash drafter's row: params; with quality, standalone accuracy per effort
    (not DFlash) and `lossless` (tokens per round with the verifier); see the module docstring."""
    from specdiff import models
    from specdiff.drafters.standalone import standalone_texts
    from specdiff.zoo import load, tokenizer as load_tokenizer

    row = {"params": sum(p.numel() for p in load(name).parameters()), "sampling": configs.SAMPLING[name]}
    if not quality:
        return row
    tokenizer, n = load_tokenizer(), len(prompts)
    if name in STANDALONE_EFFORTS:
        standalone = {}
        for effort in STANDALONE_EFFORTS[name]:
            drafter = models.load(name, role="drafter", **effort)
            texts = standalone_texts(drafter, tokenizer, prompts, configs.BLOCK_TOKENS, configs.CANVAS_TOKENS, seed,
                                     batch_size)
            accuracy = sum(tasks.is_correct(t, y) for t, y in zip(texts, targets)) / n
            standalone[effort_label(effort)] = {"accuracy": round(accuracy, 4),
                                                "stderr": round((accuracy * (1 - accuracy) / n) ** 0.5, 4)}
        row.update(accuracy=next(iter(standalone.values()))["accuracy"],
                   stderr=next(iter(standalone.values()))["stderr"], standalone=standalone,
                   block=configs.BLOCK_TOKENS)
    row["lossless"] = lossless_row(name, prompts[:LOSSLESS_PROBLEMS], targets[:LOSSLESS_PROBLEMS], seed, batch_size)
    row["step_cost"] = step_cost_row(name, prompts[:STEP_COST_PROBLEMS], targets[:STEP_COST_PROBLEMS], seed)
    return row


def _engine_run(name: str, label: str, effort: dict, prompts: list[str], targets: list[str], seed: int,
                batch_size: int, proposal: str = "marginal") -> tuple:
    """Zoo drafter `name` with the verifier, lossless, B = BLOCK_TOKENS: (its RunConfig, run_config's figures)."""
    from specdiff.models import ModelCache
    from specdiff.runs import RunConfig, run_config

    config = RunConfig(f"{name} {label}", drafter=name, block_size=configs.BLOCK_TOKENS, batch_size=batch_size,
                       proposal=proposal, **effort)
    return config, run_config(config, prompts, targets, ModelCache(), configs.CANVAS_TOKENS, seed=seed,
                              is_correct=tasks.is_correct)


def lossless_row(name: str, prompts: list[str], targets: list[str], seed: int, batch_size: int) -> dict:
    """Zoo drafter `name` with the verifier: lossless, exact, B = 8, at `LOSSLESS_EFFORT[name]`."""
    effort = LOSSLESS_EFFORT[name]
    point_mass = name == "block-drafter" and (effort.get("steps", 1) > 1 or "threshold" in effort)
    config, result = _engine_run(name, "lossless", effort, prompts, targets, seed, batch_size,
                                 "point_mass" if point_mass else "marginal")
    return {"effort": effort_label(effort) if effort else "one step", "block": configs.BLOCK_TOKENS,
            "proposal": config.proposal, "problems": len(prompts), "batch_size": batch_size, "exact": result["exact"],
            "tokens_per_round": round(result["tokens_per_round"], 3),
            "acceptance_rate": round(result["acceptance_rate"], 4),
            "draft_ms_per_round": round(result["draft_ms"], 3), "accuracy": round(result["accuracy"], 4)}


def step_cost_row(name: str, prompts: list[str], targets: list[str], seed: int) -> dict:
    """One drafting step against one verifier round, side by side in one run: drafter `name` at one
    denoising step per round (K = 1; DFlash always drafts in one step), B = 8, batch 1, lossless, timed by
    the engine round by round. draft_step_ms: the drafter's time per round (its one step plus encoding the
    tokens committed since the last round); verifier_round_ms: the verifier's forward plus the acceptance
    rule. The issue's bound: draft_step_over_verifier_round <= 0.5."""
    effort = {} if name == "dflash-drafter" else dict(steps=1)
    _, result = _engine_run(name, "step cost", effort, prompts, targets, seed, batch_size=1)
    verifier_round = result["verify_ms"] + result["accept_ms"]
    return {"problems": len(prompts), "rounds": result.get("rounds"), "draft_step_ms": round(result["draft_ms"], 3),
            "verifier_round_ms": round(verifier_round, 3),
            "draft_step_over_verifier_round": round(result["draft_ms"] / verifier_round, 3)}


def evaluate(names=None, n: int = 500, seed: int = 0, threads: int = 2, batch_size: int = 100,
             progress: bool = True, quality: bool = True, repeats: int = 30) -> dict:
    """Quality and speed of the zoo models on the first `n` arith test problems (`quality=False`: only
    params and ms per step). names: default every model whose weights are in the zoo folder."""
    from specdiff.zoo import load, tokenizer as load_tokenizer

    torch.set_num_threads(threads)
    tokenizer = load_tokenizer()
    problems = tasks.arith_problems("test", n)
    prompts, targets = [p.prompt for p in problems], [p.target for p in problems]
    prompt_tokens = statistics.mean(len(tokenizer(p).input_ids) for p in prompts)
    reference_tokens = statistics.mean(len(tokenizer(p.answer, add_special_tokens=False).input_ids) for p in problems)
    typical_length = round(prompt_tokens + reference_tokens + 1)
    results = {"task": "arith", "split": "test", "n": n, "seed": seed, "threads": threads,
               "mean_prompt_tokens": round(prompt_tokens, 2), "mean_reference_answer_tokens": round(reference_tokens, 2),
               "typical_length": typical_length, "models": {}}
    for name in available() if names is None else names:
        if name in NEW_DRAFTERS:
            start = time.time()
            row = drafter_row(name, prompts, targets, seed, batch_size, quality)
            results["models"][name] = {**row, "eval_seconds": round(time.time() - start, 1)}
            if progress:
                print(f"{name}: {results['models'][name]}", flush=True)
            continue
        model = load(name)
        start = time.time()
        row = {"params": sum(p.numel() for p in model.parameters())}
        if quality:
            texts, id_rows = generate_answers(model, tokenizer, name, prompts, seed=seed, batch_size=batch_size,
                                              return_ids=True)
            accuracy = sum(tasks.is_correct(t, y) for t, y in zip(texts, targets)) / n
            row.update(accuracy=round(accuracy, 4), stderr=round((accuracy * (1 - accuracy) / n) ** 0.5, 4),
                       mean_answer_tokens=round(statistics.mean(len(r) for r in id_rows), 2))
        row.update(ms_per_step=round(step_ms(model, name, typical_length, repeats), 3),
                   sampling=configs.SAMPLING[name], eval_seconds=round(time.time() - start, 1))
        results["models"][name] = row
        if name == "masked-drafter":  # also at the standalone length: prompt + the whole 80-token canvas
            canvas_length = round(prompt_tokens) + configs.CANVAS_TOKENS
            results["models"][name]["ms_per_step_full_canvas"] = round(step_ms(model, name, canvas_length, repeats), 3)
        if progress:
            print(f"{name}: {results['models'][name]}", flush=True)
    if "verifier" in results["models"] and "masked-drafter" in results["models"]:
        results["speed"] = speed_ratio(load("verifier"), load("masked-drafter"), typical_length, 2 * repeats)
        results["speed"]["repeats"] = 2 * repeats
    return results
