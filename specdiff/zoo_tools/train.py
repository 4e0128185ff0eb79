"""Training of the testbed models (`specdiff zoo train NAME`).

- Autoregressive objective (verifier, ar-drafter): next-token cross-entropy on the answer and its
  eos, given `bos + prompt`.
- MDLM objective (masked-drafter), as Dream / LLaDA SFT: the answer canvas (answer, then eos up to
  CANVAS_TOKENS) is masked at ratio t ~ U(eps, 1) per sequence (MDLM's low-discrepancy sampler:
  evenly spaced t across the batch), the prompt never; `mdlm_mask` also masks by number value
  (grouped), masks results from a rank on, or keeps a clean prefix, each for a share of the batch;
  bidirectional attention; the logit at position i predicts token i+1 (Dream's shift); loss is the
  weighted cross-entropy on masked canvas tokens (1/t for ratio-t masks), averaged over canvas tokens.

Every batch is a pure function of (seed, step) — fresh problems from the train split — so a run
resumes exactly from its last checkpoint (`runs/zoo/NAME/checkpoint.pt`).
"""
from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specdiff.eval import tasks
from specdiff.lm.masks import bidirectional_mask, causal_mask  # noqa: F401  (tests import causal_mask here)
from specdiff.zoo import configs

MASK_EPS = 1e-3  # smallest masking ratio t
SPACE = "\u2581"  # the tokenizer's word-start marker


def model_config(name: str, tokenizer):
    """The `Qwen3Config` of a zoo model (vocab and special token ids from the tokenizer)."""
    from transformers import Qwen3Config

    config = Qwen3Config(
        vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **configs.COMMON_ARCHITECTURE, **configs.ARCHITECTURES[name])
    if configs.TRAINING[name]["objective"] in ("mdlm", "block", "uniform_block"):
        config.is_causal = False  # documentation for loaders; the drafter also passes a full 4D mask
        config.mask_token_id = tokenizer.mask_token_id
        config.logits_shift = 1  # Dream: logit at position i predicts token i + 1
    if configs.TRAINING[name]["objective"] == "block":
        config.block_size = configs.TRAINING[name]["block_tokens"]  # SDAR's field: the trained block length
    config.specdiff_role = name
    return config


def train_problems(seed: int, step: int, n: int) -> list[tasks.Problem]:
    """The `n` training problems of one step: deterministic in (seed, step), train split only."""
    rng = random.Random(seed * 1_000_003 + step * 7919 + 17)
    out = []
    while len(out) < n:
        problem = tasks.make_problem(rng)
        if tasks.split_of(problem.question) == "train":
            out.append(problem)
    return out


def ar_batch(problems, tokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `bos prompt answer eos`; labels are -100 except on answer + eos.
    Returns input_ids [b, L], attention_mask [b, L], labels [b, L]."""
    rows, label_rows = [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids  # with bos
        answer = tokenizer(p.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        label_rows.append([-100] * len(prompt) + answer)
    length = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (length - len(r)) for r in rows])
    labels = torch.tensor([r + [-100] * (length - len(r)) for r in label_rows])
    attention_mask = (torch.arange(length)[None, :] < torch.tensor([len(r) for r in rows])[:, None]).long()
    return input_ids, attention_mask, labels


def number_groups(ids: list[int], tokenizer) -> list[int]:
    """Which number each token belongs to, by value: 0 for a non-digit token, else k >= 1, the same k
    for every occurrence of the same value in `ids`. A number is a run of one-digit tokens; a
    `▁`-prefixed digit starts a new number. `▁5 ▁* ▁1 2 ▁= ▁6 0 . ▁so ▁6 0` -> 1 0 2 2 0 3 3 0 0 3 3."""
    pieces = tokenizer.convert_ids_to_tokens(ids)
    digits = [p.lstrip(SPACE) if len(p.lstrip(SPACE)) == 1 and p.lstrip(SPACE).isdigit() else None for p in pieces]
    groups, values, i = [0] * len(ids), {}, 0
    while i < len(ids):
        if digits[i] is None:
            i += 1
            continue
        end = i + 1
        while end < len(ids) and digits[end] is not None and not pieces[end].startswith(SPACE):
            end += 1
        value = "".join(digits[i:end]).lstrip("0") or "0"
        groups[i:end] = [values.setdefault(value, len(values) + 1)] * (end - i)
        i = end
    return groups


def mdlm_batch(problems, tokenizer, canvas: int = configs.CANVAS_TOKENS):
    """Right-padded `bos prompt canvas`, canvas = answer + eos * (canvas - len(answer)).
    Returns x0 [b, L], key_mask [b, L] (True on real tokens), canvas_mask [b, L] (True on canvas),
    groups [b, L] (on the canvas, the number group of each digit token by value, see `number_groups`;
    0 elsewhere) and result_rank [b, L]: on canvas digit tokens whose value does not occur in the
    prompt (a computed result), 1 + the rank of the value's first occurrence among results; else 0."""
    rows, starts, group_rows, rank_rows = [], [], [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids
        answer = tokenizer(p.answer, add_special_tokens=False).input_ids[: canvas - 1]
        answer = answer + [tokenizer.eos_token_id] * (canvas - len(answer))
        rows.append(prompt + answer)
        starts.append(len(prompt))
        groups = number_groups(prompt + answer, tokenizer)  # ids in order of first occurrence
        in_prompt = set(groups[: len(prompt)])
        results = sorted({g for g in groups[len(prompt):] if g and g not in in_prompt})
        rank = {g: i + 1 for i, g in enumerate(results)}
        group_rows.append([0] * len(prompt) + groups[len(prompt):])
        rank_rows.append([0] * len(prompt) + [rank.get(g, 0) for g in groups[len(prompt):]])
    length = max(map(len, rows))
    x0 = torch.tensor([r + [tokenizer.pad_token_id] * (length - len(r)) for r in rows])
    groups = torch.tensor([g + [0] * (length - len(g)) for g in group_rows])
    result_rank = torch.tensor([g + [0] * (length - len(g)) for g in rank_rows])
    position = torch.arange(length)[None, :]
    lengths = torch.tensor([len(r) for r in rows])[:, None]
    key_mask = position < lengths
    canvas_mask = (position >= torch.tensor(starts)[:, None]) & key_mask
    return x0, key_mask, canvas_mask, groups, result_rank


def ar_loss(model, batch, causal: bool = False) -> torch.Tensor:
    """Next-token cross-entropy on answer + eos. `causal=True` passes an explicit causal mask (the
    masked drafter's auxiliary AR loss: same weights, same shifted logits, causal attention)."""
    input_ids, attention_mask, labels = batch
    mask = causal_mask(attention_mask.bool()) if causal else attention_mask
    logits = model(input_ids=input_ids, attention_mask=mask).logits  # [b, L, V]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)


def mdlm_mask(batch, t: torch.Tensor, generator: torch.Generator | None = None, prefix_prob: float = 0.0,
              group_prob: float = 0.0, result_prob: float = 0.0,
              prefix_masking: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """Which canvas tokens an MDLM training sequence masks, at ratio t [b, 1] per sequence, and the loss
    weight of each masked token. Returns masked [b, L] bool and weight [b, L] (0 where not masked).

    - plain (MDLM): each canvas token independently with probability t, weight 1/t;
    - grouped (a `group_prob` share of the sequences): each number *value* is masked with probability
      t as one unit — all its digit tokens at every place it occurs in the canvas — other tokens
      independently. A chain of thought writes each result 2-3 times (`= 60.`, `so 60 - 33`,
      `#### 60`); under plain masking one copy is nearly always visible, so the model learns to copy
      results instead of computing them from their operands (docs/testbed.md);
    - results (a `result_prob` share, on top): every result value (one that does not occur in the
      prompt) from a random rank k on is masked too, everywhere, with weight 1: the state in which
      entropy-order decoding computes result k (the text around it is written, later results not yet);
    - clean prefix (a `prefix_prob` share): a random prefix of the canvas stays clean, and after the
      cut `prefix_masking="all"` masks every token (weight 1) — the drafting situation (prompt +
      accepted prefix + masked block), where nothing to the right can be copied — while "ratio" keeps
      the masks drawn above after the cut (session 2's recipe; the shipped one uses "all")."""
    if prefix_masking not in ("all", "ratio"):
        raise ValueError(f"prefix_masking must be 'all' or 'ratio', not {prefix_masking!r}")
    x0, key_mask, canvas_mask, groups, result_rank = batch
    b, length = x0.shape
    draw = torch.rand(b, length, generator=generator)  # [b, L]
    if group_prob > 0:
        group_draw = torch.rand(b, int(groups.max()) + 1, generator=generator).gather(1, groups)  # [b, L]
        grouped = (torch.rand(b, 1, generator=generator) < group_prob) & (groups > 0)  # [b, L]
        draw = torch.where(grouped, group_draw, draw)
    masked = canvas_mask & (draw < t)  # [b, L]
    weight = masked / t
    if result_prob > 0:
        n_results = result_rank.max(dim=1, keepdim=True).values  # [b, 1]
        first = 1 + (torch.rand(b, 1, generator=generator) * n_results).long()  # [b, 1], uniform in 1..n
        use_results = torch.rand(b, 1, generator=generator) < result_prob  # [b, 1]
        forced = use_results & (result_rank >= first) & (result_rank > 0) & ~masked  # [b, L]
        masked = masked | forced
        weight = torch.where(forced, torch.ones_like(weight), weight)
    if prefix_prob > 0:
        canvas_start = canvas_mask.float().argmax(dim=1, keepdim=True)  # [b, 1]
        canvas_length = canvas_mask.sum(dim=1, keepdim=True)  # [b, 1]
        cut = canvas_start + (torch.rand(b, 1, generator=generator) * canvas_length).long()  # [b, 1]
        use_prefix = torch.rand(b, 1, generator=generator) < prefix_prob  # [b, 1]
        after_cut = canvas_mask & (torch.arange(length)[None, :] >= cut)  # [b, L]
        if prefix_masking == "all":
            masked = torch.where(use_prefix, after_cut, masked)
            weight = torch.where(use_prefix, after_cut.float(), weight)
        else:
            masked = masked & (after_cut | ~use_prefix)
            weight = weight * masked
    return masked, weight


def mdlm_loss(model, batch, mask_token_id: int, generator: torch.Generator | None = None,
              prefix_prob: float = 0.0, group_prob: float = 0.0, result_prob: float = 0.0,
              prefix_masking: str = "all") -> torch.Tensor:
    """MDLM loss (weighted masked cross-entropy, weight 1/t for ratio-t masks) with Dream's shifted
    logits; masking by `mdlm_mask` (plain, grouped by number value, results, clean prefix)."""
    x0, key_mask, canvas_mask = batch[:3]
    b, length = x0.shape
    # low-discrepancy sampler of MDLM (Sahoo et al. 2024): one uniform offset, b evenly spaced ratios
    u = (torch.rand(1, generator=generator) + torch.arange(b) / b) % 1.0  # [b]
    t = (MASK_EPS + (1 - MASK_EPS) * u)[:, None]  # [b, 1]
    masked, weight = mdlm_mask(batch, t, generator, prefix_prob=prefix_prob, group_prob=group_prob,
                               result_prob=result_prob, prefix_masking=prefix_masking)
    xt = torch.where(masked, torch.full_like(x0, mask_token_id), x0)
    position_ids = torch.arange(length)[None, :].expand(b, length)
    logits = model(input_ids=xt, attention_mask=bidirectional_mask(key_mask), position_ids=position_ids).logits
    logits = logits[:, :-1]  # [b, L-1, V]: logit i predicts token i+1
    ce = F.cross_entropy(logits.flatten(0, 1).float(), x0[:, 1:].flatten(), reduction="none").view(b, length - 1)
    return (ce * weight[:, 1:]).sum() / canvas_mask.sum()


def drafter_loss(model, target, recipe: dict, problems, tokenizer, generator) -> torch.Tensor:
    """One batch's loss for the block, uniform and DFlash recipes (`zoo_tools.drafter_objectives`)."""
    from specdiff.zoo_tools import drafter_objectives as objectives

    block, objective = configs.BLOCK_TOKENS, recipe["objective"]
    if objective == "dflash":
        return objectives.dflash_loss(model, target, problems, tokenizer, generator, block, recipe["anchors"])
    if objective == "uniform" and recipe.get("uniform_weight", 1.0) == 0:  # the causal warm-up stage
        return objectives.encoder_ar_loss(model, problems, tokenizer)
    if objective == "uniform_block":  # uniform noise on a Qwen3 backbone run block-causally
        loss = objectives.uniform_block_loss(model, problems, tokenizer, generator, block,
                                             t_min=recipe.get("t_min", MASK_EPS), t_max=recipe.get("t_max", 1.0),
                                             suffix_prob=recipe.get("suffix_prob", 0.0),
                                             noised_weight=recipe.get("noised_weight", 1.0))
        if recipe.get("ar_weight", 0.0) > 0:
            loss = loss + recipe["ar_weight"] * ar_loss(model, ar_batch(problems, tokenizer), causal=True)
        return loss
    if objective == "uniform":
        return objectives.uniform_loss(model, problems, tokenizer, generator, block,
                                       recipe["self_conditioning_prob"], recipe["ar_weight"],
                                       recipe.get("noised_weight", "one"))
    loss = objectives.block_loss(model, problems, tokenizer, generator, recipe["block_tokens"])
    if recipe.get("ar_weight", 0.0) > 0:  # the causal next-token loss, same weights (as the masked drafter)
        loss = loss + recipe["ar_weight"] * ar_loss(model, ar_batch(problems, tokenizer), causal=True)
    return loss


def set_default_sampling(model, name: str) -> None:
    """Writes the model's default sampling settings (configs.SAMPLING) into its generation config."""
    sampling = configs.SAMPLING[name]
    generation = model.generation_config
    generation.do_sample = True
    generation.temperature, generation.top_p = sampling["temperature"], sampling["top_p"]
    generation.top_k = sampling["top_k"] or None
    generation.eos_token_id, generation.pad_token_id = model.config.eos_token_id, model.config.pad_token_id
    generation.bos_token_id = model.config.bos_token_id


def stage_of(recipe: dict, step: int) -> tuple[dict, int, int]:
    """The training stage of a step: (stage settings merged over the recipe, stage start, stage end).
    A recipe without `stages` is one stage; each stage has its own warmup + cosine schedule."""
    start = 0
    for stage in recipe.get("stages", [dict(until=recipe["steps"])]):
        if step < stage["until"]:
            return {**recipe, **stage}, start, stage["until"]
        start = stage["until"]
    return recipe, 0, recipe["steps"]


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def quick_accuracy(model, tokenizer, name: str, n: int = 64) -> float:
    """Exact match on the first `n` validation problems (a training-time probe): greedy for the AR and
    masked models, standalone (block after block, K = BLOCK_TOKENS steps, the default sampling) for
    the block and uniform drafters. DFlash has none (it needs the verifier)."""
    from specdiff.zoo_tools.evaluate import generate_answers

    problems = tasks.arith_problems("validation", n)
    was_training = model.training
    model.eval()
    if configs.TRAINING[name]["objective"] in ("block", "uniform", "uniform_block"):
        from specdiff import models
        from specdiff.drafters.standalone import standalone_texts

        drafter = models.wrap(model, model.config.to_dict(), dict(configs.SAMPLING[name]), tokenizer, role="drafter",
                              steps=configs.BLOCK_TOKENS)
        texts = standalone_texts(drafter, tokenizer, [p.prompt for p in problems], configs.BLOCK_TOKENS, 96)
    else:
        texts = generate_answers(model, tokenizer, name, [p.prompt for p in problems], greedy=True, seed=0)
    model.train(was_training)
    return tasks.accuracy(texts, [p.target for p in problems])


def train(name: str, run_dir: str | Path | None = None, out_dir: str | Path | None = None,
          steps: int | None = None, threads: int | None = None, checkpoint_every: int = 200,
          probe_every: int = 400, resume: bool = True, progress: bool = True) -> Path:
    """Trains zoo model `name` from its config and seed; resumes from `run_dir/checkpoint.pt`.
    Writes the final model with `save_pretrained` to `out_dir` (default: `run_dir/model`, never the
    shipped weights: pass `out_dir=zoo.model_dir(name)` to replace those). steps >= 1 overrides the
    recipe's number of steps."""
    from transformers import Qwen3ForCausalLM

    from specdiff.progress import progress as progress_bar

    from specdiff.zoo import load, tokenizer as load_tokenizer

    if steps is not None and (isinstance(steps, bool) or int(steps) != steps or steps < 1):
        raise ValueError(f"steps must be an integer >= 1 (or None for the recipe's), got {steps!r}")
    if threads:
        torch.set_num_threads(threads)
    recipe = dict(configs.TRAINING[name])
    total = recipe["steps"] if steps is None else int(steps)
    run_dir = Path(run_dir or Path("runs") / "zoo" / name)
    out_dir = Path(out_dir or run_dir / "model")
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer()
    objective, target = recipe["objective"], None
    config = model_config(name, tokenizer) if objective in ("ar", "mdlm", "block", "uniform_block") else None

    torch.manual_seed(recipe["seed"])
    if objective in ("uniform", "dflash"):  # zoo_tools.drafter_objectives: their own transformers classes
        from specdiff.zoo_tools import drafter_objectives

        model = drafter_objectives.build_model(name, tokenizer)
        if objective == "dflash":  # the frozen verifier whose states, embeddings and LM head it uses
            target = load(recipe["target"]).requires_grad_(False)
    else:
        model = Qwen3ForCausalLM(config)
    if recipe["init_from"]:  # Dream-style: start from an AR model's weights (extra layers are dropped)
        source = load(recipe["init_from"])
        missing = model.load_state_dict(source.state_dict(), strict=False)
        print(f"initialised from {recipe['init_from']} ({missing})")
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": recipe["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=recipe["lr"], betas=(0.9, 0.98))
    start, log = 0, []
    checkpoint_path = run_dir / "checkpoint.pt"
    if resume and checkpoint_path.exists():
        state = torch.load(checkpoint_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, log = state["step"], state["log"]
        print(f"resumed {name} at step {start}")
    generator = torch.Generator().manual_seed(recipe["seed"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"training {name}: {n_params / 1e6:.2f}M params, {total} steps of {recipe['batch_size']}", flush=True)

    bar = progress_bar(range(start, total), initial=start, total=total, desc=name, enabled=progress, leave=True,
                       mininterval=5)
    began, ema = time.time(), None
    for step in bar:
        generator.manual_seed(recipe["seed"] * 1_000_003 + step)
        problems = train_problems(recipe["seed"], step, recipe["batch_size"])
        stage, stage_start, stage_end = stage_of(recipe, step)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step - stage_start, stage_end - stage_start, stage["lr"], stage["warmup"])
        if objective == "ar":
            loss = ar_loss(model, ar_batch(problems, tokenizer))
        elif objective in ("block", "uniform", "uniform_block", "dflash"):
            loss = drafter_loss(model, target, stage, problems, tokenizer, generator)
        else:
            loss = mdlm_loss(model, mdlm_batch(problems, tokenizer), tokenizer.mask_token_id, generator,
                             prefix_prob=stage.get("prefix_prob", 0.0), group_prob=stage.get("group_prob", 0.0),
                             result_prob=stage.get("result_prob", 0.0),
                             prefix_masking=stage.get("prefix_masking", "all"))
            if stage.get("ar_weight", 0.0) > 0:  # auxiliary next-token loss, causal attention, same weights
                loss = loss + stage["ar_weight"] * ar_loss(model, ar_batch(problems, tokenizer), causal=True)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        bar.set_postfix(loss=f"{ema:.4f}", refresh=False)  # redrawn at mininterval, not every step
        done = step + 1
        if done % probe_every == 0 or done == total:
            acc = (quick_accuracy(model, tokenizer, name)
                   if objective in ("ar", "mdlm", "block", "uniform", "uniform_block") else None)
            log.append({"step": done, "loss": round(ema, 4), "val_acc64": acc,
                        "seconds": round(time.time() - began, 1)})
            print(json.dumps(log[-1]), flush=True)
        if done % checkpoint_every == 0 or done == total:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done,
                        "log": log}, checkpoint_path)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    if objective in ("ar", "mdlm", "block"):
        set_default_sampling(model, name)
    model.save_pretrained(out_dir)
    (run_dir / "log.json").write_text(json.dumps(log, indent=1))
    print(f"saved {name} to {out_dir} ({time.time() - began:.0f} s this session)")
    return out_dir
