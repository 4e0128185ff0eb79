"""`specdiff zoo train NAME`: the testbed models' recipes (`zoo.configs.TRAINING`) through the one loop.

Objectives by recipe (`training.objectives`, batches from `training.data`; every batch a pure function of
(seed, step): fresh problems of the train split, the generator reseeded per step):
- ar (verifier, ar-drafter): `next_token` on answer + eos given `bos + prompt`;
- mdlm (masked-drafter, as Dream / LLaDA SFT): `masked_diffusion` on the answer canvas, t from MDLM's
  low-discrepancy sampler, 1/t weights, bidirectional, with the stage's masking modes (grouped by number value,
  results, clean prefix); block (block-drafter, SDAR): `masked_diffusion` on a block after a random cut,
  block-causal; uniform_block (uniform-drafter): `uniform_diffusion` on such a block; each + `ar_weight` *
  `next_token` (causal mask, same weights);
- dflash (dflash-drafter): `dflash` over `anchors` blocks per problem, the shipped verifier frozen (its hidden
  states, embeddings and full LM head), unweighted (gamma = inf).

Schedule (a recipe setting, `training.schedule`): linear warmup, cosine to 10% of the peak, per stage; AdamW
betas (0.9, 0.98), no weight decay on norms. Resumes from `run_dir/checkpoint.pt`.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specdiff.training import build, data
from specdiff.training.checkpoint import read
from specdiff.training.loop import fit
from specdiff.training.objectives import OBJECTIVES
from specdiff.training.schedule import stage_of
from specdiff.zoo import configs

SCHEDULE = dict(lr_floor=0.1, decay_from="warmup", betas=(0.9, 0.98), decay_1d=False, clip=1.0)


def train(name: str, run_dir: str | Path | None = None, out_dir: str | Path | None = None,
          steps: int | None = None, threads: int | None = None, checkpoint_every: int = 200,
          probe_every: int = 400, resume: bool = True, progress: bool = True) -> Path:
    """Trains zoo model `name` from its config and seed; resumes from `run_dir/checkpoint.pt`. Writes the final
    model with `save_pretrained` to `out_dir` (default: `run_dir/model`, never the shipped weights: pass
    `out_dir=zoo.model_dir(name)` to replace those). steps >= 1 overrides the recipe's number of steps."""
    from specdiff.zoo import load, tokenizer as load_tokenizer

    if steps is not None and (isinstance(steps, bool) or int(steps) != steps or steps < 1):
        raise ValueError(f"steps must be an integer >= 1 (or None for the recipe's), got {steps!r}")
    if threads:
        torch.set_num_threads(threads)
    recipe = {**SCHEDULE, **configs.TRAINING[name]}
    recipe["steps"] = recipe["steps"] if steps is None else int(steps)
    run_dir = Path(run_dir or Path("runs") / "zoo" / name)
    out_dir = Path(out_dir or run_dir / "model")
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer()
    torch.manual_seed(recipe["seed"])
    model = build.zoo_model(name, tokenizer)
    objective = ZOO_OBJECTIVES[recipe["objective"]]
    target = load(recipe["target"]).requires_grad_(False) if objective.on_verifier else None
    if recipe["init_from"]:  # Dream-style: start from an AR model's weights (extra layers are dropped)
        print(f"initialised from {recipe['init_from']} "
              f"({model.load_state_dict(load(recipe['init_from']).state_dict(), strict=False)})")
    print(f"training {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, {recipe['steps']} "
          f"steps of {recipe['batch_size']}", flush=True)
    began = time.time()
    saved = read(run_dir / "checkpoint.pt") if resume else None
    if saved is not None:
        print(f"resumed {name} at step {saved['step']}")

    def probe(done: int, state: dict) -> None:
        if done % probe_every == 0 or done == recipe["steps"]:
            acc = quick_accuracy(model, tokenizer, name) if objective.probe is not None else None
            state["log"].append({"step": done, "loss": round(sum(state["losses"][-50:]) / len(state["losses"][-50:]), 4),
                                 "val_acc64": acc, "seconds": round(time.time() - began, 1)})
            print(json.dumps(state["log"][-1]), flush=True)

    run = fit(model, _step_loss(recipe, objective, model, target, tokenizer), recipe, run_dir / "checkpoint.pt",
              seed=recipe["seed"], resume=resume, every_steps=checkpoint_every, on_step=probe, progress=progress,
              desc=name)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    if objective.writes_sampling:
        set_default_sampling(model, name)
    model.save_pretrained(out_dir)
    (run_dir / "log.json").write_text(json.dumps(run["log"], indent=1))
    print(f"saved {name} to {out_dir} ({time.time() - began:.0f} s this session)")
    return out_dir


def _step_loss(recipe: dict, objective: "ZooObjective", model, target, tokenizer):
    """step_loss(step, generator): the stage's objective on the step's problems (+ `ar_weight` * causal
    `next_token`, same weights)."""
    context = dict(model=model, target=target, tokenizer=tokenizer, recipe=recipe)
    if objective.on_verifier:
        layers = list(model.config.target_layer_ids)
        vocab = target.get_input_embeddings().weight.shape[0]
        context.update(layers=layers, tables=dict(
            embeddings=target.get_input_embeddings().weight, head=target.get_output_embeddings().weight,
            to_draft=torch.arange(vocab), block=configs.BLOCK_TOKENS + 1, anchors=recipe["anchors"], gamma=math.inf))

    def step_loss(step: int, generator: torch.Generator) -> torch.Tensor:
        generator.manual_seed(recipe["seed"] * 1_000_003 + step)
        problems = data.train_problems(recipe["seed"], step, recipe["batch_size"])
        stage = stage_of(recipe, step)[0]
        loss = objective.loss(context, problems, stage, generator)
        if objective.adds_ar and stage.get("ar_weight", 0.0) > 0:
            causal = {**data.ar_batch(problems, tokenizer), "causal_mask": True}
            loss = loss + stage["ar_weight"] * OBJECTIVES["next_token"](model, causal, generator)
        return loss

    return step_loss


def _ar(context, problems, stage, generator):
    return OBJECTIVES["next_token"](context["model"], data.ar_batch(problems, context["tokenizer"]), generator)


def _dflash(context, problems, stage, generator):
    conversations = data.problem_conversations(problems, context["tokenizer"])
    states = data.conversation_states(context["target"], context["layers"], conversations)
    return OBJECTIVES["dflash"](context["model"], dict(conversations=conversations, context=states,
                                                       **context["tables"]), generator)


def _mdlm(context, problems, stage, generator):
    batch = data.mdlm_batch(problems, context["tokenizer"])
    options = ("group_prob", "result_prob", "prefix_prob", "prefix_masking")
    return OBJECTIVES["masked_diffusion"](context["model"], {**batch, **{k: stage[k] for k in options if k in stage}},
                                          generator)


def _block(context, problems, stage, generator):
    batch = data.block_batch(problems, context["tokenizer"], generator, stage["block_tokens"])
    return OBJECTIVES["masked_diffusion"](context["model"], batch, generator)


def _uniform_block(context, problems, stage, generator):
    """Uniform noise on the block drafter's attention pattern."""
    batch = data.block_batch(problems, context["tokenizer"], generator, configs.BLOCK_TOKENS, uniform=True)
    options = ("t_min", "t_max", "suffix_prob", "noised_weight")
    return OBJECTIVES["uniform_diffusion"](context["model"], {**batch, **{k: stage[k] for k in options if k in stage}},
                                           generator)


@dataclass(frozen=True)
class ZooObjective:
    """What a testbed recipe's objective decides. loss: (context, problems, stage, generator) -> loss; adds_ar: the
    stage's `ar_weight` adds the causal next-token loss; on_verifier: trained on the frozen verifier's states;
    writes_sampling: the saved model carries its default sampling (`configs.SAMPLING`); probe: how the training
    probe answers ("greedy": greedy decoding, "standalone": block after block; None: no probe)."""

    loss: Callable
    adds_ar: bool = True
    on_verifier: bool = False
    writes_sampling: bool = False
    probe: str | None = "greedy"


ZOO_OBJECTIVES = {
    "ar": ZooObjective(_ar, adds_ar=False, writes_sampling=True),
    "mdlm": ZooObjective(_mdlm, writes_sampling=True),
    "block": ZooObjective(_block, writes_sampling=True, probe="standalone"),
    "uniform_block": ZooObjective(_uniform_block, probe="standalone"),
    "dflash": ZooObjective(_dflash, adds_ar=False, on_verifier=True, probe=None),
}


def set_default_sampling(model, name: str) -> None:
    """Writes the model's default sampling settings (configs.SAMPLING) into its generation config."""
    sampling = configs.SAMPLING[name]
    generation = model.generation_config
    generation.do_sample = True
    generation.temperature, generation.top_p = sampling["temperature"], sampling["top_p"]
    generation.top_k = sampling["top_k"] or None
    generation.eos_token_id, generation.pad_token_id = model.config.eos_token_id, model.config.pad_token_id
    generation.bos_token_id = model.config.bos_token_id


@torch.no_grad()
def quick_accuracy(model, tokenizer, name: str, n: int = 64) -> float:
    """Exact match on the first `n` validation problems (a training-time probe): greedy for the AR and masked
    models, standalone (block after block, K = BLOCK_TOKENS steps, the default sampling) for the block and
    uniform drafters."""
    from specdiff.eval import tasks
    from specdiff.zoo_tools.evaluate import generate_answers

    problems = tasks.arith_problems("validation", n)
    was_training = model.training
    model.eval()
    if ZOO_OBJECTIVES[configs.TRAINING[name]["objective"]].probe == "standalone":
        from specdiff import models
        from specdiff.drafters.standalone import standalone_texts

        drafter = models.wrap(model, model.config.to_dict(), dict(configs.SAMPLING[name]), tokenizer, role="drafter",
                              steps=configs.BLOCK_TOKENS)
        texts = standalone_texts(drafter, tokenizer, [p.prompt for p in problems], configs.BLOCK_TOKENS, 96)
    else:
        texts = generate_answers(model, tokenizer, name, [p.prompt for p in problems], greedy=True, seed=0)
    model.train(was_training)
    return tasks.accuracy(texts, [p.target for p in problems])
