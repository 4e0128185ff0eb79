"""Teacher-forced acceptance of distilled drafters per block position, held out (and on training conversations).

Measured on held-out conversations, and with `--train-sample` on some of the drafter's training conversations (the
train/held-out gap).

Held-out conversations: the verifier's own greedy responses (`--dtype`, float32 by default; specdiff's cached
decoding loop, `engine.baselines.autoregressive_generate`, batched) to the bench's validation prompts
(`specdiff/eval/tasks/data/real_validation.jsonl` and `spec_validation.jsonl`; the test files only with
`--final-report`, for a drafter's final figures once its recipe is chosen, never to choose one), each prompt
through the chat template as `specdiff distill data` puts it (`engine.generate.chat_ids`: the assistant turn
opened). The verifier writes `--new-tokens` + HORIZON tokens per prompt (fewer when it ends with EOS), so that each
of the first `--new-tokens` anchors has the truth of its whole block. They are cached in
`~/.cache/specdiff/distill_eval/` under a key of (verifier, its fingerprint, dtype, tokens, the files' sha256), one
entry per prompt: comparing drafters, or rerunning with a larger `--limit`, regenerates nothing already there.
`--train-sample N`: N conversations drawn (seeded, `--seed`) from those each drafter was trained on (the first
`conversations` of its training.json among `data/distill/VERIFIER`'s, read with `training.data.conversations`),
scored the same way.

Terms (`specdiff.training.distill`): an anchor a is a committed token; a draft predicts a + 1, a + 2, ... Anchors are
the first `--new-tokens` response positions a = P - 1, P, ... (P: the prompt's length) whose next HORIZON positions
lie inside the conversation (so every drafter and every k is scored on the same anchors). The truth at position p
is the verifier's greedy token there given the conversation's tokens before p (teacher-forced: the argmax of one
verifier forward over the conversation at p - 1). On the held-out conversations that is their own next token (up to
the batched decoding's rounding, `greedy_agreement`); on the training data, sampled at the verifier's settings, it
is not always (the chain there is a teacher-forced proxy).

Per kind of drafter, teacher-forced on the true prefix, greedy:
- dflash: exactly the training forward (`training.objectives.dflash.dflash_logits`, one forward per conversation,
  every anchor a block [token a, masks] (one slot fewer for a drafter that reads the anchor's slot, DSpark's
  `sample_from_anchor`; its Markov head teacher-forced on the true previous tokens) that attends to the verifier's states of the tokens before a and to
  itself): the drafter's `target_layer_ids` (verifier `hidden_states[i + 1]`, rounded to float16 as the training
  cache stores them), its anchor state (`specdiff_anchor_state`), the verifier's frozen embeddings and the draft
  vocabulary's rows of its head, the drafter in float32. The argmax row of block position k = 1..B - 1 goes back
  through d2t to a verifier id. accuracy and chain at the trained block (the widest of `specdiff_trained_widths`,
  else config block_size B; anchor included: B - 1 positions, B when the anchor's slot reads);
- masked: one denoising step (K = 1, its exact marginal) of `MaskedDiffusionDrafter` from a fully masked block of B
  after the anchor, B = its training block (16);
- ar: the drafter's greedy next token at each anchor, teacher-forced: position-1 accuracy only (a k-step greedy
  rollout is not measured).

Reported per drafter, overall and per prompt kind (the "kind" key of each prompt line):
- accuracy[k]: the share of anchors whose position-k prediction equals the truth at a + k;
- chain[k]: the share of anchors whose first k predictions are all right (what greedy verification accepts);
- expected_accepted[B]: drafted tokens accepted per round for a draft of B tokens, sum_{k=1..B} chain_B[k], for
  B = 4, 8, 16 where the drafter allows (DFlash: B <= its trained block_size - 1, as the bench caps it) and its
  trained B. Drafted from a block of B + 1 inputs (DFlash: [anchor, B masks]) or B masks after the committed
  tokens (masked), bidirectional attention makes a position's prediction depend on the block's width, so chain_B
  comes from a forward of that width, not from the trained block's; tokens_per_round = 1 + expected_accepted (the
  correction or bonus token). Teacher forcing scores every anchor, whereas decoding only drafts from the anchors
  where rounds end.
- expected_accepted_trained_width[B] (DFlash): the same at the trained width, the first B positions of the trained
  block's forward (what the engine drafts since issue 51, item 1: [anchor, masks] filled to a trained width).

`--decode`: the DFlash drafters also decode the held-out prompts, greedy, lossless, at B = 2, 4, 8, from a block of
B + 1 (`at_trained_width=False`, the engine before issue 51) and at the trained width: mean accepted drafted tokens
per round (`decoded`), batched by `--batch` prompts, `--new-tokens` new tokens each.

    PYTHONPATH=. python tools/distill_eval.py --drafter smollm2-135m-instruct-dflash --train-sample 64 \\
        --out FILE
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "specdiff" / "eval" / "tasks" / "data"
VALIDATION_FILES = (DATA / "real_validation.jsonl", DATA / "spec_validation.jsonl")
CACHE_DIR = Path.home() / ".cache" / "specdiff" / "distill_eval"
HORIZON = 16  # the longest draft scored: every anchor has the truth of its next HORIZON positions
BLOCKS = (2, 4, 8, 16)  # expected_accepted's draft lengths B (and the drafter's trained one)
DECODE_BLOCKS = (2, 4, 8)  # --decode's B


# -- conversations --------------------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _prompt_ids(tokenizer, messages) -> list[int]:
    """`specdiff distill data`'s prompt: the chat template with the assistant turn opened; a tokenizer without one:
    the messages' contents, one per line, as plain text (`eval.tasks.prompts.build_prompt`)."""
    from specdiff.engine.generate import chat_ids

    if getattr(tokenizer, "chat_template", None):
        return chat_ids(tokenizer, messages)
    return list(tokenizer("\n".join(m["content"] for m in messages) + "\n").input_ids)


def held_out(model, tokenizer, verifier: str, files=VALIDATION_FILES, new_tokens: int = 96, dtype: str = "float32",
             limit: int | None = None, batch: int = 8, cache_dir: Path | None = None, show_progress: bool = True,
             horizon: int = HORIZON) -> tuple[list, list[str], dict]:
    """(conversations [(prompt ids, response ids)], their prompt kinds, a description): the verifier's greedy
    responses of new_tokens + horizon tokens to the first `limit` prompts of each file (all: None), read from the
    cache or generated (and added to it)."""
    from specdiff.engine.baselines import autoregressive_generate
    from specdiff.eval.tasks import prompts as prompt_files
    from specdiff.lm.sampling import eos_token_ids
    from specdiff.progress import progress
    from specdiff.zoo.distilled import fingerprint

    files = [Path(f) for f in files]
    hashes = [_sha256(f) for f in files]
    generated = new_tokens + horizon
    identity = dict(verifier=verifier, fingerprint=fingerprint(model), dtype=dtype, generated_tokens=generated,
                    files=hashes)
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    cache_file = Path(cache_dir or CACHE_DIR) / f"{Path(verifier).name}-{dtype}-{generated}-{key}.json"
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {**identity, "conversations": {}}
    wanted = []  # (cache key, kind, prompt ids)
    for number, path in enumerate(files):
        for line, problem in enumerate(prompt_files.read(path)[:limit]):
            messages = problem.meta.get("messages") or [{"role": "user", "content": problem.question}]
            wanted.append((f"{hashes[number][:12]}:{line}", str(problem.meta.get("kind", path.stem)),
                           _prompt_ids(tokenizer, messages)))
    missing = [w for w in wanted if cache["conversations"].get(w[0], {}).get("prompt") != w[2]]  # or re-tokenized
    began = time.perf_counter()
    eos, pad = eos_token_ids(model), int(getattr(model.config, "pad_token_id", None) or 0)
    if missing:
        order = sorted(missing, key=lambda w: len(w[2]))  # similar lengths together: less padding
        bar = progress(total=len(order), desc="held-out greedy responses", unit="prompt", enabled=show_progress)
        for start in range(0, len(order), batch):
            chunk = order[start:start + batch]
            with torch.inference_mode():
                responses, _ = autoregressive_generate(model, [w[2] for w in chunk], generated, eos, 0.0, 1.0, 0,
                                                       pad_token_id=pad)
            for (name, kind, prompt), response in zip(chunk, responses):
                cache["conversations"][name] = dict(kind=kind, prompt=prompt, response=[int(t) for t in response])
            bar.update(len(chunk))
        bar.close()
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        partial = cache_file.with_suffix(".partial")
        partial.write_text(json.dumps(cache, separators=(",", ":")) + "\n")
        os.replace(partial, cache_file)
    entries = [cache["conversations"][w[0]] for w in wanted]
    conversations = [(e["prompt"], e["response"]) for e in entries]
    kinds = [e["kind"] for e in entries]
    description = dict(files=[_relative(f) for f in files], sha256=hashes, prompts=len(conversations),
                       limit_per_file=limit, dtype=dtype, new_tokens=new_tokens, generated_tokens=generated,
                       decoding="greedy, batched (specdiff's cached loop)",
                       prompt_tokens=sum(len(p) for p, _ in conversations),
                       response_tokens=sum(len(r) for _, r in conversations),
                       ended_with_eos=sum(bool(r) and r[-1] in eos for _, r in conversations),
                       kinds={k: kinds.count(k) for k in sorted(set(kinds))}, cache=str(cache_file),
                       generated_now=len(missing), generation_seconds=round(time.perf_counter() - began, 1))
    return conversations, kinds, description


def train_sample(data_dir: Path, verifier: str, n: int, seed: int = 0, first: int | None = None) -> tuple[list, dict]:
    """n conversations drawn (seeded, without replacement) from the first `first` stored conversations of the
    distillation data (the ones a drafter was trained on: its training.json's count), read with
    `training.data.conversations`."""
    from specdiff.training import data

    every = data.conversations(data_dir, verifier)
    pool = every[:first] if first else every
    picks = sorted(np.random.default_rng(seed).choice(len(pool), size=min(n, len(pool)), replace=False).tolist())
    chosen = [pool[i] for i in picks]
    return chosen, dict(data=_relative(data_dir), drawn_from=len(pool), stored=len(every), conversations=len(chosen),
                        seed=seed, response_tokens=sum(len(r) for _, r in chosen))


def _relative(path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# -- drafters -------------------------------------------------------------------------------------------------------

class Loaded:
    """A drafter ready to score: kind ("dflash", "masked", "ar"), its model (and for masked the library drafter),
    d2t, the trained block's scored positions (`trained`) and the draft lengths B it is scored at (`blocks`)."""

    def __init__(self, name: str, kind: str, model, trained: int, blocks: list[int], folder: str | None = None,
                 d2t: torch.Tensor | None = None, drafter=None, tables: dict | None = None, layers: list | None = None,
                 training: dict | None = None):
        self.name, self.kind, self.model, self.trained, self.blocks = name, kind, model, trained, blocks
        self.folder, self.d2t, self.drafter = folder, d2t, drafter
        self.tables, self.layers, self.training = tables or {}, layers or [], training or {}


def load_drafter(reference: str, verifier, verifier_name: str | None = None) -> Loaded:
    """A distilled drafter (a shipped name, a kind of the verifier's, or a folder of `specdiff distill`) built on the
    verifier's model (`zoo.distilled.build`: refuses one trained for another verifier)."""
    from specdiff import models
    from specdiff.drafters import registry
    from specdiff.zoo import distilled

    target = getattr(verifier, "model", verifier)
    folder = distilled.folder(models.for_verifier(reference, verifier_name) if verifier_name else reference)
    if folder is None:
        raise ValueError(f"--drafter {reference}: not a distilled drafter (a shipped name: "
                         f"{', '.join(distilled.names()) or 'none'}, or a folder `specdiff distill` wrote)")
    model, config, d2t = distilled.build(folder, target, verifier_name)
    role = config["specdiff_role"]
    kind = registry.by_distilled_role(role).name
    summary = json.loads((folder / "training.json").read_text()) if (folder / "training.json").is_file() else {}
    settings = summary.get("settings", {})
    training = dict(target=settings.get("target", "ce") if settings else None, steps=summary.get("steps"),
                    conversations=summary.get("conversations"), final_loss=summary.get("final_loss"),
                    gamma=settings.get("gamma"), anchor_state=settings.get("anchor_state"))
    loaded = Loaded(name=str(reference), kind=kind, model=model, trained=1, blocks=[], folder=_relative(folder),
                    d2t=d2t, training={k: v for k, v in training.items() if v is not None})
    scorer = SCORERS.get(role)
    if scorer is None:
        scored = ", ".join(registry.by_distilled_role(r).name for r in SCORERS)
        raise ValueError(f"--drafter {reference}: a {kind} drafter; this tool scores {scored}")
    scorer.prepare(loaded, config, settings, target, verifier)
    if scorer.rolls_out:
        loaded.blocks = sorted({b for b in BLOCKS if b <= loaded.trained} | {loaded.trained})
    return loaded


def _prepare_dflash(loaded: Loaded, config: dict, settings: dict, target, verifier) -> None:
    loaded.model.float()  # the drafter trains in float32 (`training.distill`)
    reads_anchor = bool(config.get("sample_from_anchor", False))  # DSpark: the anchor's slot predicts too
    from specdiff.drafters.dflash import trained_widths

    widest = trained_widths(loaded.model.config)[-1]  # scored at the widest block it was trained at
    loaded.trained = widest - (0 if reads_anchor else 1)  # the block counts the anchor
    embeddings = target.get_input_embeddings().weight.detach()
    to_draft = torch.full((embeddings.shape[0],), -100, dtype=torch.long)
    to_draft[loaded.d2t] = torch.arange(len(loaded.d2t))
    loaded.tables = dict(embeddings=embeddings.float(), to_draft=to_draft,
                         head=target.get_output_embeddings().weight.detach()[loaded.d2t].float())
    loaded.layers = [int(i) + 1 for i in config["target_layer_ids"]]  # output_hidden_states' indices


def _prepare_masked(loaded: Loaded, config: dict, settings: dict, target, verifier) -> None:
    from specdiff import models
    from specdiff.training.distill import recipe_of

    loaded.trained = int(settings.get("block", recipe_of(loaded.kind).defaults["block"]))
    loaded.drafter = models.wrap_distilled((loaded.model, config, loaded.d2t), verifier)  # K = 1, greedy


# -- predictions, teacher-forced ------------------------------------------------------------------------------------

@torch.inference_mode()
def verifier_pass(model, conversation) -> tuple[torch.Tensor, tuple]:
    """(truth [L + 1] long, hidden_states): truth[p] is the verifier's greedy token at position p given the
    conversation's tokens before p (p = 1..L; truth[0] = -1), from one forward over the conversation."""
    prompt, response = conversation
    ids = torch.tensor([list(prompt) + list(response)])
    out = model(input_ids=ids, output_hidden_states=True)
    truth = torch.cat([torch.tensor([-1]), out.logits[0].argmax(-1).cpu()])
    return truth, out.hidden_states


@torch.inference_mode()
def dflash_predictions(loaded: Loaded, conversation, hidden_states, anchors: list[int], draft: int) -> torch.Tensor:
    """[A, draft] verifier ids: block positions 1..draft of each anchor, from the training forward with a block of
    draft + 1 (`dflash_logits`), argmax rows mapped through d2t."""
    from specdiff.training.objectives.dflash import dflash_logits

    context = torch.cat([hidden_states[i] for i in loaded.layers], dim=-1).half().float()  # as training caches them
    reads_anchor = bool(getattr(loaded.model.config, "sample_from_anchor", False))
    batch = dict(conversations=[conversation], context=context, block=draft + (0 if reads_anchor else 1),
                 anchors=len(anchors), anchors_at=torch.tensor([anchors]), **loaded.tables)
    logits, _ = dflash_logits(loaded.model, batch, torch.Generator().manual_seed(0))  # [1, A, draft, V_d]
    return loaded.d2t[logits[0, :, :draft].argmax(-1)]


@torch.inference_mode()
def masked_predictions(loaded: Loaded, conversation, anchors: list[int], draft: int, rows: int = 32) -> torch.Tensor:
    """[A, draft] verifier ids: one step of the masked drafter (K = 1, greedy) over `draft` masks after each
    anchor's prefix (tokens 0..a), as the engine proposes it."""
    from specdiff.lm.masks import left_pad

    tokens = list(conversation[0]) + list(conversation[1])
    drafter = loaded.drafter
    out = []
    for start in range(0, len(anchors), rows):
        prefixes = [tokens[:a + 1] for a in anchors[start:start + rows]]
        ids, key_mask = left_pad(prefixes, int(drafter.pad_token_id))
        out.append(drafter.draft(ids, key_mask, draft).tokens.cpu())
    return torch.cat(out)


@torch.inference_mode()
def ar_predictions(loaded: Loaded, conversation, anchors: list[int]) -> torch.Tensor:
    """[A, 1] verifier ids: the drafter's greedy next token after each anchor, one causal forward."""
    ids = torch.tensor([list(conversation[0]) + list(conversation[1])])
    logits = loaded.model(input_ids=ids).logits[0]  # [L, V]
    return logits[torch.tensor(anchors)].argmax(-1, keepdim=True).cpu()


def predictions(loaded: Loaded, conversation, hidden_states, anchors: list[int], draft: int) -> torch.Tensor:
    """[A, draft] verifier ids of a drafter's teacher-forced draft of `draft` tokens after each anchor."""
    return scorer_of(loaded).predict(loaded, conversation, hidden_states, anchors, draft)


class Scorer:
    """How this tool scores one distilled kind: `prepare` fills a `Loaded` from its checkpoint, `predict` drafts
    teacher-forced after each anchor; `rolls_out`: it drafts k tokens per anchor (else position 1 only); `decodes`: `--decode` runs it at both width
    rules (`decoded`)."""

    def __init__(self, prepare, predict, rolls_out: bool, decodes: bool = False):
        self.prepare, self.predict, self.rolls_out, self.decodes = prepare, predict, rolls_out, decodes


# the tool's table of the distilled kinds it scores (the kinds `specdiff distill` trains), by their distilled role
# (`KindSpec.distilled_role`, the `specdiff_role` of their config.json)
SCORERS = {
    "distilled-dflash": Scorer(_prepare_dflash, dflash_predictions, rolls_out=True, decodes=True),
    "distilled-masked": Scorer(_prepare_masked, lambda loaded, conversation, hidden, anchors, draft:
                               masked_predictions(loaded, conversation, anchors, draft), rolls_out=True),
    "distilled-ar": Scorer(lambda *args: None, lambda loaded, conversation, hidden, anchors, draft:
                           ar_predictions(loaded, conversation, anchors), rolls_out=False),
}


def scorer_of(loaded: Loaded) -> Scorer:
    """The scorer of a loaded drafter's kind (by its distilled role)."""
    from specdiff.drafters import registry

    return SCORERS[registry.get(loaded.kind).distilled_role]


def anchors_of(conversation, new_tokens: int, horizon: int = HORIZON) -> list[int]:
    """The scored anchors: a = P - 1 .. P + new_tokens - 2 whose positions a + 1 .. a + horizon are inside the
    conversation (truth at p needs the tokens before p, and nothing after the conversation is scored)."""
    prompt, response = conversation
    length = len(prompt) + len(response)
    return [a for a in range(len(prompt) - 1, len(prompt) - 1 + new_tokens) if a + horizon <= length - 1]


# -- scoring --------------------------------------------------------------------------------------------------------

class Tally:
    """Counts per group (overall, each kind) and draft length: anchors, right at k, chain through k."""

    def __init__(self):
        self.counts = {}

    def add(self, group: str, draft: int, right: torch.Tensor) -> None:
        """right [A, draft] bool."""
        entry = self.counts.setdefault(group, {}).setdefault(draft, dict(anchors=0, right=np.zeros(draft),
                                                                         chain=np.zeros(draft)))
        entry["anchors"] += int(right.shape[0])
        entry["right"] += right.sum(0).numpy()
        entry["chain"] += right.long().cumprod(1).sum(0).numpy()

    def summary(self, group: str, trained: int, blocks: list[int]) -> dict:
        counts = self.counts.get(group, {})
        main = counts.get(trained)
        if main is None or not main["anchors"]:
            return dict(anchors=0)
        n = main["anchors"]
        out = dict(anchors=n, accuracy={str(k + 1): round(float(main["right"][k] / n), 4) for k in range(trained)})
        if not blocks:
            return out
        out["chain"] = {str(k + 1): round(float(main["chain"][k] / n), 4) for k in range(trained)}
        accepted = {str(b): round(float(counts[b]["chain"].sum() / counts[b]["anchors"]), 4) for b in blocks}
        out["expected_accepted"] = accepted
        out["tokens_per_round"] = {b: round(1 + v, 4) for b, v in accepted.items()}
        out["expected_accepted_trained_width"] = {str(b): round(float(main["chain"][:b].sum() / n), 4)
                                                  for b in blocks}
        return out


def evaluate(drafters: list[Loaded], verifier_model, conversations, kinds=None, new_tokens: int = 96,
             horizon: int = HORIZON, show_progress: bool = True) -> tuple[list[dict], dict]:
    """Every drafter's teacher-forced accuracy, chain and expected acceptance on the conversations (module
    docstring), overall and per kind (`kinds`, one per conversation; None: overall only). Returns (one dict per
    drafter: {"overall", "per_kind"}, the data's own figures: anchors, greedy_agreement)."""
    from specdiff.progress import progress

    kinds = kinds or [None] * len(conversations)
    tallies = [Tally() for _ in drafters]
    agree = positions = anchors_total = 0
    for conversation, kind in progress(list(zip(conversations, kinds)), desc="teacher-forced drafts",
                                       unit="conversation", enabled=show_progress):
        anchors = anchors_of(conversation, new_tokens, horizon)
        if not anchors:
            continue
        truth, hidden_states = verifier_pass(verifier_model, conversation)
        tokens = torch.tensor(list(conversation[0]) + list(conversation[1]))
        scored = torch.arange(anchors[0] + 1, anchors[-1] + horizon + 1)  # every position some anchor scores
        agree += int((tokens[scored] == truth[scored]).sum())
        positions += len(scored)
        anchors_total += len(anchors)
        starts = torch.tensor(anchors)
        for loaded, tally in zip(drafters, tallies):
            for draft in sorted(set(loaded.blocks) | {loaded.trained}):
                predicted = predictions(loaded, conversation, hidden_states, anchors, draft)  # [A, draft]
                want = truth[starts[:, None] + torch.arange(1, draft + 1)]  # [A, draft]: the truth at a + k
                right = predicted == want
                for group in ("overall", kind):
                    if group is not None:
                        tally.add(group, draft, right)
    results = []
    for loaded, tally in zip(drafters, tallies):
        groups = sorted({k for k in kinds if k is not None})
        result = dict(overall=tally.summary("overall", loaded.trained, loaded.blocks))
        if groups:
            result["per_kind"] = {g: tally.summary(g, loaded.trained, loaded.blocks) for g in groups}
        results.append(result)
    return results, dict(anchors=anchors_total, greedy_agreement=round(agree / max(positions, 1), 4))


# -- decoded --------------------------------------------------------------------------------------------------------

def decoded(loaded: Loaded, verifier, tokenizer, conversations, blocks=DECODE_BLOCKS, new_tokens: int = 96,
            batch: int = 8, rules: str = "both") -> dict:
    """{"block B+1" | "trained width": {B: mean accepted drafted tokens per round}}: greedy lossless decoding of the
    conversations' prompts with a DFlash drafter, at each width rule (module docstring, `--decode`)."""
    import specdiff as sd
    from specdiff import models

    drafter = models.load(loaded.folder if Path(loaded.folder).is_absolute() else ROOT / loaded.folder,
                          role="drafter", verifier=verifier)
    prompts = [list(p) for p, _ in conversations]
    out = {}
    for label, trained in (("block B+1", False), ("trained width", True))[(rules == "trained"):]:
        drafter.at_trained_width = trained
        out[label] = {}
        for b in blocks:
            gen = sd.SpeculativeGenerator(drafter, verifier, block_size=b, tokenizer=tokenizer, batch_size=batch)
            stats = gen.generate(prompts, max_new_tokens=new_tokens).stats
            accepted, rounds = sum(sum(s.accepted) for s in stats), sum(len(s.accepted) for s in stats)
            out[label][str(b)] = round(accepted / max(rounds, 1), 4)
    return out


# -- the command ----------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", action="append", required=True,
                        help="a distilled drafter: shipped name, kind (dflash, masked, ar) or folder; repeatable")
    parser.add_argument("--verifier", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--new-tokens", type=int, default=96, help="anchors scored per response")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts of each validation file")
    parser.add_argument("--files", nargs="+", default=[str(f) for f in VALIDATION_FILES],
                        help="prompt files ({\"messages\", \"kind\"} lines; default the two validation files)")
    parser.add_argument("--batch", type=int, default=8, help="prompts per batch of greedy generation")
    parser.add_argument("--train-sample", type=int, default=0,
                        help="also score N training conversations (seeded draw from the drafter's training data)")
    parser.add_argument("--data", default=None, help="the distillation data (default data/distill/VERIFIER)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode", action="store_true",
                        help="DFlash drafters also decode the held-out prompts at B = 2, 4, 8, both width rules")
    parser.add_argument("--decode-blocks", type=int, nargs="+", default=list(DECODE_BLOCKS))
    parser.add_argument("--decode-rules", choices=("both", "trained"), default="both",
                        help="trained: only at the trained width (the engine's rule)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--final-report", action="store_true",
                        help="allow the test files: a drafter's final held-out figures, once its recipe is chosen "
                             "(never to choose one); the JSON says so")
    args = parser.parse_args(argv)
    if any("test" in Path(f).stem for f in args.files) and not args.final_report:
        parser.error("held-out conversations come from validation prompts, never the test files "
                     "(--final-report: a chosen drafter's final figures)")
    from specdiff import models

    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    verifier = models.load(args.verifier, dtype=args.dtype, temperature=0.0)
    model = verifier.model.eval()
    tokenizer = models.load_tokenizer(args.verifier)
    loaded = [load_drafter(d, verifier, args.verifier) for d in args.drafter]
    conversations, kinds, description = held_out(model, tokenizer, args.verifier, args.files, args.new_tokens,
                                                 args.dtype, args.limit, args.batch)
    scores, figures = evaluate(loaded, model, conversations, kinds, args.new_tokens)
    description.update(figures)
    result = dict(verifier=args.verifier, dtype=args.dtype, horizon=HORIZON, held_out=description, drafters={},
                  final_report=bool(args.final_report))
    for drafter, score in zip(loaded, scores):
        result["drafters"][drafter.name] = dict(kind=drafter.kind, folder=drafter.folder, training=drafter.training,
                                                trained_positions=drafter.trained, blocks=drafter.blocks,
                                                held_out=score)
    if args.decode:
        for drafter in loaded:
            if scorer_of(drafter).decodes:
                result["drafters"][drafter.name]["decoded"] = decoded(
                    drafter, verifier, tokenizer, conversations, args.decode_blocks, args.new_tokens, args.batch,
                    args.decode_rules)
    if args.train_sample:
        data_dir = Path(args.data or ROOT / "data" / "distill" / args.verifier)
        for drafter in loaded:  # each on the conversations it was trained on
            sample, about = train_sample(data_dir, args.verifier, args.train_sample, args.seed,
                                         drafter.training.get("conversations"))
            (score,), figures = evaluate([drafter], model, sample, None, args.new_tokens)
            result["drafters"][drafter.name]["train_sample"] = dict(**about, **figures, **score)
    if any(not scorer_of(d).rolls_out for d in loaded):
        result["ar_note"] = "ar drafters: position-1 accuracy only (teacher-forced next token, no k-step rollout)"
    result["seconds"] = round(time.perf_counter() - began, 1)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
