"""What the throughput model (`specdiff.eval.calibration`, the first paper's Section 3.3) needs,
measured on real models: the prefixes H, the distance d_K = E_h TV(p, q_K), and the costs
c_d(K) and c_v of a round.

- `sample_prefixes`: each prompt plus the verifier's own sampled continuation, cut at uniformly
  random points (never after EOS). These are the contexts a lossless run meets, as the paper's H.
- `round_start_prefixes`: the prefixes at which a lossless run of the engine at effort K starts its
  rounds (H_K as the paper indexes it), on the same prompts.
- `prefill_seconds`: the verifier's prefill of each prompt, paid once per problem.
- `profile_rounds`: on each prefix and for each drafter (one per effort K), ONE timed round of
  the engine's loop (`engine/generate.py`), run exactly as the engine runs it at batch 1: the
  verifier prefilled on the prefix (untimed), the drafter's proposal (c_d(K)), the
  verifier's forward over [last committed, y_1..y_B], the acceptance rule, and the bookkeeping
  (commits, appending the emitted tokens): the last three are c_v. The same round gives the TV
  between the verifier's p_i (after y_<i) and the drafter's q_i at every drafted position i, in
  marginal mode (TV(p_i, q_i)) and point-mass mode (1 - p_i(y_i)), and p_i(y_i), q_i(y_i), untimed.
  Efforts are timed round-robin on each prefix, so that load from other processes falls on all of
  them alike.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch

from specdiff.acceptance import Linear
from specdiff.engine.baselines import autoregressive_generate
from specdiff.engine.generate import _append, eos_token_ids
from specdiff.progress import progress as progress_bar
from specdiff.theory import total_variation
from specdiff.verify import verify


def sample_prefixes(verifier, prompts: list[list[int]], cuts_per_prompt: int, max_new_tokens: int, seed: int,
                    progress: bool = False) -> tuple[list[list[int]], list[int]]:
    """`cuts_per_prompt` prefixes per prompt: the prompt + the first c tokens of one verifier-sampled
    continuation, c uniform over the positions before EOS (0 included: the prompt alone). Also returns
    each continuation's length (EOS included, at most max_new_tokens): what a problem generates."""
    generator = torch.Generator(device=verifier.device).manual_seed(seed)
    cut = random.Random(seed)
    eos = eos_token_ids(verifier.model)
    pad = verifier.model.config.pad_token_id or 0
    iterator = progress_bar(prompts, desc="prefixes (verifier samples)", unit="prompt", enabled=progress)
    prefixes, lengths = [], []
    for prompt in iterator:
        (continuation,), _ = autoregressive_generate(verifier.model, [prompt], max_new_tokens, eos,
                                                     verifier.temperature, verifier.top_p, verifier.top_k, generator,
                                                     pad_token_id=pad)
        lengths.append(len(continuation))
        usable = len(continuation) - (1 if continuation and continuation[-1] in eos else 0)
        prefixes += [prompt + continuation[:cut.randint(0, max(usable - 1, 0))] for _ in range(cuts_per_prompt)]
    return prefixes, lengths


def round_start_prefixes(generator, prompts: list[list[int]], count: int, max_new_tokens: int, seed: int,
                         progress: bool = False) -> list[list[int]]:
    """`count` prefixes drawn uniformly (seeded) from those at which `generator` (a SpeculativeGenerator,
    typically lossless at one effort K) starts its rounds on `prompts`, one prompt at a time: the
    paper's H_K as the rounds of a lossless run at effort K meet it."""
    starts = []
    drafter = generator.drafter
    propose = drafter.propose

    def recording_propose(ids, key_mask, block_size, draw=None):
        starts.append(ids[0][key_mask[0]].tolist())
        return propose(ids, key_mask, block_size, draw)

    draws = torch.Generator(device=generator.verifier.device).manual_seed(seed)
    iterator = progress_bar(prompts, desc="round starts (lossless runs)", unit="prompt", enabled=progress)
    drafter.propose = recording_propose  # an instance attribute, removed below: the class is untouched
    try:
        for prompt in iterator:
            generator.generate([prompt], max_new_tokens=max_new_tokens, generator=draws)
    finally:
        del drafter.propose
    return random.Random(seed).sample(starts, min(count, len(starts)))


@torch.inference_mode()
def prefill_seconds(verifier, prompts: list[list[int]], warmup: int = 2) -> list[float]:
    """Seconds of the verifier's prefill of each prompt, as the engine starts a problem (`start`)."""
    out = []
    for index in range(-min(warmup, len(prompts)), len(prompts)):
        ids = torch.tensor([prompts[index]], device=verifier.device)
        begin = time.perf_counter()
        verifier.start(ids, torch.ones_like(ids, dtype=torch.bool))
        if ids.is_cuda:
            torch.cuda.synchronize()
        if index >= 0:
            out.append(time.perf_counter() - begin)
    return out


@dataclass
class RoundProfile:
    """Per effort K: the seconds of every timed round's parts and the per-position distances."""

    draft_s: dict = field(default_factory=dict)  # K -> [seconds per round]
    forward_s: list = field(default_factory=list)  # the verifier's forward over B + 1 tokens
    rule_s: list = field(default_factory=list)  # the acceptance rule (verify) and its host sync
    bookkeeping_s: list = field(default_factory=list)  # commits and appending the emitted tokens
    tv_marginal: dict = field(default_factory=dict)  # K -> tensor [prefixes, B]: TV(p_i, q_i)
    target_prob: dict = field(default_factory=dict)  # K -> tensor [prefixes, B]: p_i(y_i)
    draft_prob: dict = field(default_factory=dict)  # K -> tensor [prefixes, B]: q_i(y_i)

    def distance(self, steps: int, proposal: str = "marginal") -> torch.Tensor:
        """[prefixes, B]: TV(p_i, q_i), or TV(p_i, onehot(y_i)) = 1 - p_i(y_i) in point-mass mode."""
        return 1.0 - self.target_prob[steps] if proposal == "point_mass" else self.tv_marginal[steps]

    def drafted_prob(self, steps: int, proposal: str = "marginal") -> torch.Tensor:
        """[prefixes, B]: q_i(y_i) as verification reads it (1 in point-mass mode)."""
        return torch.ones_like(self.draft_prob[steps]) if proposal == "point_mass" else self.draft_prob[steps]


@torch.inference_mode()
def profile_rounds(drafters: dict, verifier, prefixes: list[list[int]], block_size: int, proposal: str = "marginal",
                   seed: int = 0, warmup: int = 2, progress: bool = False) -> RoundProfile:
    """One engine round per (prefix, K) with `drafters` {K: drafter}; see the module docstring.
    The first `warmup` prefixes are run and not recorded."""
    generator = torch.Generator(device=verifier.device).manual_seed(seed)
    out = RoundProfile(draft_s={k: [] for k in drafters})
    recorded = {name: {k: [] for k in drafters} for name in ("tv_marginal", "target_prob", "draft_prob")}
    items = list(range(-min(warmup, len(prefixes)), len(prefixes)))
    items = progress_bar(items, desc="timed rounds", unit="prefix", enabled=progress)
    for index in items:
        prefix = prefixes[index]
        for steps, drafter in drafters.items():
            parts, distances = _one_round(drafter, verifier, prefix, block_size, proposal, generator)
            if index < 0:
                continue
            out.draft_s[steps].append(parts["draft"])
            for name in ("forward", "rule", "bookkeeping"):
                getattr(out, f"{name}_s").append(parts[name])
            for name, values in distances.items():
                recorded[name][steps].append(values)
    for name, per_k in recorded.items():
        setattr(out, name, {k: torch.stack(v) if v else torch.zeros(0, block_size) for k, v in per_k.items()})
    return out


def _one_round(drafter, verifier, prefix: list[int], block_size: int, proposal: str, generator):
    ids = torch.tensor([prefix], device=verifier.device)
    key_mask = torch.ones_like(ids, dtype=torch.bool)
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    layers = drafter.verifier_hidden_layers
    hidden = verifier.start(ids, key_mask, layers)
    drafter.start(ids, key_mask, hidden)
    begin = time.perf_counter()
    draft = drafter.propose(ids, key_mask, block_size, generator)
    sync()
    drafted = time.perf_counter()
    chunk = torch.cat([ids[:, -1:], draft.tokens], dim=1)
    target_logits, hidden = verifier.score(chunk, layers)
    sync()
    scored = time.perf_counter()
    draft_logits = None if proposal == "point_mass" else draft.probs.log()
    result = verify(draft.tokens, draft_logits, target_logits, rule=Linear(0.0), inputs="logits", generator=generator)
    result.num_accepted.tolist()
    checked = time.perf_counter()
    verifier.commit(result.num_accepted + 1)
    drafter.commit(result.num_accepted, hidden)
    _append(ids, key_mask, result.tokens)
    result.tokens.tolist()
    done = time.perf_counter()
    parts = {"draft": drafted - begin, "forward": scored - drafted,
             "rule": checked - scored, "bookkeeping": done - checked}
    p = torch.softmax(target_logits[0, :block_size].double(), dim=-1)  # [B, V]: p_i after y_<i
    target_prob = p.gather(-1, draft.tokens[0, :, None]).squeeze(-1)
    if draft.probs is None:  # no q recorded: a point mass
        tv, draft_prob = 1.0 - target_prob, torch.ones_like(target_prob)
    else:
        q = draft.probs[0].double()
        tv, draft_prob = total_variation(p, q), q.gather(-1, draft.tokens[0, :, None]).squeeze(-1)
    distances = {"tv_marginal": tv, "target_prob": target_prob, "draft_prob": draft_prob}
    return parts, {name: values.float().cpu() for name, values in distances.items()}
