"""`specdiff distill --verifier V --kind dflash|ar|masked --out DIR`: drafters trained for a user's verifier on
its own regenerated conversations (`specdiff distill data`), the verifier frozen (issues 31, 32).

Terms:
- draft vocabulary: the `draft_size` most frequent tokens of the regenerated data (EOS always in), as
  `draft_to_target` [V_d] (d2t: the verifier id of draft row i, EAGLE-3's d2t, FR-Spec's frequency-ranked
  vocabulary). Ties and tokens never seen are ranked by id. The drafter's head is the verifier's head (or
  tables) restricted to those rows; q is 0 outside (`specdiff.drafters.base.Drafter.trim`).
- anchor a: the last committed token of a round; a block [token a, B - 1 masks] predicts a + 1..a + B - 1.

Kinds (models: `training.build`; losses: `training.objectives`): dflash (the `dflash` loss over `anchors` blocks
per conversation, position weights exp(-(k - 1) / gamma), the verifier's hidden states cached per data shard
under `<out>/hidden-<layers>/`); ar (`next_token` on `positions` random response positions per conversation, the
full vocabulary so Hugging Face assisted generation can use it); masked (`masked_diffusion` on one cut per
conversation, t = 1 on an `all_masked` share, unweighted, bidirectional, + `ar_weight` * `next_token` causal on
the same tokens).

Targets (a recipe setting, `target`, `training.objectives.soft`): "ce" (default) the cross-entropy above on the
data's tokens; "kl" KL(p || q) and "ce_tv" 0.1 CE + 0.9 TV(p, q) (DSpark's) at the same positions, with the same
weights, against p, the frozen verifier's own next-token distribution there, compared on the drafter's vocabulary:
its last hidden state and full-vocabulary log-sum-exp per token are cached per data shard under `<out>/teacher/`
(`data.teacher_states`), so a step costs one head product on the draft rows, not a verifier forward.

Schedule (a recipe setting, `training.schedule`): warmup 50 steps, cosine to 0 from step 0. Resumable through
`training.loop`: `<out>/checkpoint.pt` every `save_every_s` seconds with the run's settings; a rerun resumes there,
with those settings, and ends with the same weights as an uninterrupted run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from specdiff.drafters import registry
from specdiff.training import build, data
from specdiff.training.checkpoint import read
from specdiff.training.loop import fit, trainable_state
from specdiff.training.objectives import OBJECTIVES
from specdiff.training.objectives.soft import TARGETS

SCHEDULE = dict(warmup=50, lr_floor=0.0, decay_from="start", weight_decay=0.01, betas=(0.9, 0.95), clip=1.0)
DRAFT_SIZE = 8192


@dataclass(frozen=True)
class Recipe:
    """How one kind is distilled. defaults: its settings; draft_vocab: its head is the draft vocabulary (else the
    full one); names_class: its config names the model class (`architectures`), for loaders that go by it; loss:
    (model, target, conversations, settings, d2t, data_dir, out, show_progress) -> step_loss(step, generator)."""

    defaults: dict
    loss: Callable
    draft_vocab: bool = False
    names_class: bool = True


def train(kind: str, verifier: str, data_dir: str | Path, out: str | Path, steps: int | None = None,
          draft_size: int = DRAFT_SIZE, seed: int = 0, show_progress: bool = True, save_every_s: float = 120.0,
          until_step: int | None = None, shards: int | None = None, dtype: str | None = None, **options) -> dict:
    """Trains (or resumes) a `kind` drafter for `verifier` into `out`; writes the final weights there and returns a
    summary (steps, seconds, final loss, draft vocabulary size). until_step: stop there (saved, to be resumed:
    the schedule is still the one of `steps`). shards: train on the first `shards` data shards only (default
    all; a resumed run keeps its own). dtype: the frozen verifier's (None: `lm.precision`'s default; a resumed run
    keeps its own); the drafter trains in float32 on the verifier's states in that dtype, as it will see them."""
    from specdiff import models
    from specdiff.lm import precision

    recipe = recipe_of(kind)
    settings = {**recipe.defaults, **{k: v for k, v in options.items() if v is not None}}
    settings["steps"] = steps or settings["steps"]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = read(out / "checkpoint.pt")
    if state is not None:
        if state.get("kind") != kind or state.get("verifier") != verifier:
            raise ValueError(f"{out / 'checkpoint.pt'} is a {state.get('kind')} drafter for {state.get('verifier')}, "
                             f"not a {kind} drafter for {verifier}: use another --out")
        settings = {**state["settings"], "steps": steps or state["settings"]["steps"]}  # the run's own settings
    settings["shards"] = settings.get("shards", shards)
    settings["dtype"] = settings.get("dtype") or precision.resolve(dtype)
    settings["target"] = settings.get("target", "ce")  # a checkpoint from before soft targets: "ce"
    if settings["target"] not in TARGETS:
        raise ValueError(f"unknown distillation target {settings['target']!r}; choose from {', '.join(TARGETS)}")
    conversations = data.conversations(data_dir, verifier, settings["shards"])
    if not conversations:
        raise ValueError(f"{data_dir} holds no conversations: run `specdiff distill data --verifier {verifier}`")
    target = models.load(verifier, dtype=settings["dtype"]).model.eval().requires_grad_(False)
    vocab = int(target.config.vocab_size)
    eos = [int(e) for e in np.atleast_1d(target.generation_config.eos_token_id or [])]
    d2t = (np.asarray(state["d2t"]) if state is not None else
           draft_vocabulary(conversations, draft_size, vocab, always=eos) if recipe.draft_vocab
           else np.arange(vocab))
    mask_token_id = int(getattr(target.config, "specdiff_mask_token_id", None) or 4)  # a token the chat never uses
    with torch.random.fork_rng():  # the fresh parts' initialisation is a function of the seed
        torch.manual_seed(seed)
        model = build.drafter(kind, target, settings, d2t, mask_token_id)
    step_loss = recipe.loss(model, target, conversations, settings, d2t, data_dir, out, show_progress)
    run = fit(model, step_loss, {**SCHEDULE, **settings}, out / "checkpoint.pt", seed=seed, until=until_step,
              every_s=save_every_s, meta=dict(kind=kind, verifier=verifier, settings=settings, d2t=d2t.tolist()),
              progress=show_progress, desc=f"distill {kind}")
    summary = dict(kind=kind, verifier=verifier, steps=run["step"], train_seconds=round(run["seconds"], 1),
                   final_loss=round(float(np.mean(run["losses"][-50:])), 4), draft_vocab=len(d2t),
                   conversations=len(conversations), settings=dict(settings))
    if run["step"] == settings["steps"]:
        _save_drafter(model, kind, verifier, d2t, out, summary, target)
    return summary


def draft_vocabulary(conversations, size: int, verifier_vocab: int, always=()) -> np.ndarray:
    """draft_to_target [size] int64, sorted by id: the `size` most frequent response tokens (`always` forced in;
    ties broken by prompt counts, then by id)."""
    counts = np.zeros(verifier_vocab, dtype=np.float64)
    for prompt, response in conversations:
        np.add.at(counts, np.asarray(response, dtype=np.int64), 1.0)
        np.add.at(counts, np.asarray(prompt, dtype=np.int64), 1e-6)  # prompts only break ties
    counts[list(always)] = np.inf
    order = np.lexsort((np.arange(verifier_vocab), -counts))  # by count descending, then id
    return np.sort(order[: min(size, verifier_vocab)])  # sorted ids: d2t is monotone


def _pick(conversations, settings, generator) -> tuple[list[int], list]:
    """A batch of conversations drawn with the generator: (their indices, the conversations)."""
    picks = torch.randint(len(conversations), (settings["batch"],), generator=generator).tolist()
    return picks, [conversations[i] for i in picks]


def _soft(target, settings, d2t, data_dir, out, show_progress) -> Callable[[list[int]], dict]:
    """picks -> the batch keys of the soft targets (`objectives.soft`) for those conversations: none for "ce" (the
    batch as it was), else `target` and the verifier's `teacher` (p on the drafter's rows d2t), read from its
    last hidden states and log-sum-exps, cached per data shard under `<out>/teacher[-dtype]/`."""
    if settings.get("target", "ce") == "ce":
        return lambda picks: {}
    folder = out / _cache_folder("teacher", settings)
    states = data.teacher_states(target, data_dir, folder, show_progress, settings["shards"])
    head = target.get_output_embeddings().weight[torch.as_tensor(d2t)].float()  # [V_q, H]
    return lambda picks: dict(target=settings["target"], teacher=data.cached_teacher(states, picks, head))


def _cache_folder(name: str, settings) -> str:
    """A verifier cache's folder name under the run: `name`, or `name-<dtype>` below float32."""
    return name + ("" if settings["dtype"] == "float32" else "-" + settings["dtype"])


def _dflash_loss(model, target, conversations, settings, d2t, data_dir, out, show_progress):
    """`dflash` over `anchors` blocks per conversation, on the verifier's cached hidden states."""
    layers = list(model.config.target_layer_ids)
    folder = _cache_folder("hidden-" + "-".join(map(str, layers)), settings)
    if settings.get("target", "ce") != "ce":  # both caches from one verifier pass
        data.fill_caches(target, layers, data_dir, out / folder, out / _cache_folder("teacher", settings),
                         show_progress, settings["shards"])
    states = data.verifier_states(target, layers, data_dir, out / folder, show_progress, settings["shards"])
    to_draft = torch.full((len(target.get_input_embeddings().weight),), -100, dtype=torch.long)
    to_draft[torch.as_tensor(d2t)] = torch.arange(len(d2t))
    soft = _soft(target, settings, d2t, data_dir, out, show_progress)
    tables = dict(embeddings=target.get_input_embeddings().weight.float(),  # the drafter trains in float32
                  head=target.get_output_embeddings().weight[torch.as_tensor(d2t)].float(), to_draft=to_draft)

    widths = sorted(settings.get("widths") or [settings["block"]])  # one width per step, drawn with the generator

    def step_loss(step: int, generator: torch.Generator) -> torch.Tensor:
        picks, chosen = _pick(conversations, settings, generator)
        block = widths[int(torch.randint(len(widths), (1,), generator=generator))] if len(widths) > 1 else widths[0]
        batch = dict(conversations=chosen, context=data.padded_states([states[i] for i in picks]), **tables,
                     block=block, anchors=settings["anchors"], gamma=settings["gamma"], **soft(picks))
        return OBJECTIVES["dflash"](model, batch, generator)

    return step_loss


def _ar_loss(model, target, conversations, settings, d2t, data_dir, out, show_progress):
    """`next_token` on `positions` random response positions per conversation."""
    soft = _soft(target, settings, d2t, data_dir, out, show_progress)

    def step_loss(step: int, generator: torch.Generator) -> torch.Tensor:
        picks, chosen = _pick(conversations, settings, generator)
        batch = data.conversation_batch(chosen, settings.get("positions"))
        return OBJECTIVES["next_token"](model, {**batch, **soft(picks)}, generator)

    return step_loss


def _masked_loss(model, target, conversations, settings, d2t, data_dir, out, show_progress):
    """`masked_diffusion` on one cut per conversation + `ar_weight` * causal `next_token` on the same tokens."""
    soft = _soft(target, settings, d2t, data_dir, out, show_progress)

    def step_loss(step: int, generator: torch.Generator) -> torch.Tensor:
        picks, chosen = _pick(conversations, settings, generator)
        batch = data.cut_batch(chosen, settings["block"], generator)
        batch.update(soft(picks))  # one teacher for both losses
        loss = OBJECTIVES["masked_diffusion"](model, {**batch, "all_masked": settings["all_masked"],
                                                      "weighting": "none"}, generator)
        if not settings["ar_weight"]:
            return loss
        causal = {**batch, "causal_mask": True, "positions": settings["positions"]}
        return loss + settings["ar_weight"] * OBJECTIVES["next_token"](model, causal, generator)

    return step_loss


# A distilled kind's role (`KindSpec.distilled_role`, `build.distilled_role`) -> how it is distilled.
RECIPES = {
    "distilled-dflash": Recipe(dict(steps=4500, batch=4, anchors=16, lr=2e-3, block=16, gamma=4.0, layers=1,
                                    intermediate=1536, anchor_state=True, target="ce", read_anchor=False,
                                    markov_rank=0, widths=None, features="outputs"),
                               _dflash_loss, draft_vocab=True, names_class=False),
    "distilled-ar": Recipe(dict(steps=400, batch=8, lr=1e-3, ar_layers=(0,), positions=64, target="ce"), _ar_loss),
    "distilled-masked": Recipe(dict(steps=3000, batch=16, lr=2e-3, block=16, hidden=192, layers=2, heads=3,
                                    kv_heads=1, intermediate=640, ar_weight=1.0, positions=64, all_masked=0.25,
                                    target="ce"), _masked_loss, draft_vocab=True),
}
# each distilled kind's settings, by kind name ("dflash": {...})
DEFAULTS = {registry.by_distilled_role(role).name: recipe.defaults for role, recipe in RECIPES.items()}


def recipe_of(kind: str) -> Recipe:
    """How the kind named `kind` is distilled: the recipe of its `KindSpec.distilled_role`; an error listing the
    distilled kinds otherwise."""
    role = build.distilled_role(kind, RECIPES)
    if role is None:
        raise ValueError(f"unknown drafter kind {kind!r} to distill; choose from "
                         f"{', '.join(build.kind_names(RECIPES))}")
    return RECIPES[role]


def _save_drafter(model, kind: str, verifier: str, d2t: np.ndarray, out: Path, summary: dict, target) -> None:
    """config.json + model.safetensors (trainable weights only, float16) + draft_vocab.json + training.json."""
    from safetensors.torch import save_file

    from specdiff.zoo.distilled import fingerprint

    config = model.config.to_dict()
    recipe = recipe_of(kind)
    config.update(specdiff_role=registry.get(kind).distilled_role, specdiff_target=verifier, specdiff_target_fingerprint=fingerprint(target),
                  specdiff_shared_from_target=["embeddings", "lm_head"] if recipe.draft_vocab else ["embeddings"])
    if recipe.names_class:
        config["architectures"] = [type(model).__name__]
    weights = {n: v.to(torch.float16).contiguous() for n, v in trainable_state(model).items()}
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if recipe.draft_vocab:
        (out / "draft_vocab.json").write_text(json.dumps({"draft_to_target": [int(i) for i in d2t]},
                                                         separators=(",", ":")) + "\n")
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
