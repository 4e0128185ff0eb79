"""Sampling settings as transformers' generate applies them: temperature, then top-k, then top-p.

`sampling_logits` returns the logits actually sampled from (-inf where a token is excluded), which
is what `specdiff.verify(..., inputs="logits")` takes, and `sampling_probs` their softmax.
"""
from __future__ import annotations

import torch


def check_sampling(temperature: float, top_p: float, top_k: int, who: str) -> None:
    """Clear errors for sampling settings out of range."""
    if not temperature >= 0:
        raise ValueError(f"{who}: temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"{who}: top_p must be in (0, 1], got {top_p}")
    if int(top_k) != top_k or top_k < 0:
        raise ValueError(f"{who}: top_k must be an integer >= 0 (0: off), got {top_k}")


TOP_P_CANDIDATES = 32  # the nucleus is looked for among the 32 most likely tokens first


def filter_logits(logits: torch.Tensor, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Top-k then nucleus (top-p) filtering of logits [..., V]: removed entries become -inf.
    Top-p keeps the smallest set of most likely tokens whose mass reaches top_p; the most likely
    token always survives. Ties at a cut are kept, as transformers' warpers keep them.

    The nucleus is found among the top-k (or the 32 most likely) tokens without sorting the whole
    vocabulary; a row whose nucleus is wider than that falls back to the full sort."""
    vocab = logits.shape[-1]
    top_k = int(top_k) if top_k and top_k < vocab else 0
    if top_p >= 1.0:
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return logits
    candidates = logits.topk(top_k or min(vocab, TOP_P_CANDIDATES), dim=-1).values  # [..., k], descending
    if top_k:
        logits = logits.masked_fill(logits < candidates[..., -1:], float("-inf"))
    probs = (candidates - logits.logsumexp(-1, keepdim=True)).exp()  # [..., k]: their probabilities
    cumulative = probs.cumsum(-1)
    kept = (cumulative - probs < top_p).sum(-1, keepdim=True)  # >= 1: the mass before each kept token < top_p
    cutoff = candidates.gather(-1, kept - 1)  # [..., 1]: the least likely kept logit
    wide = cumulative[..., -1] < top_p  # [...]: rows whose nucleus is wider than the candidates
    if bool(wide.any()):  # those rows alone are sorted in full
        rows = logits[wide]  # [n, V]
        ordered = rows.sort(dim=-1, descending=True).values
        row_probs = ordered.softmax(-1)
        row_kept = ((row_probs.cumsum(-1) - row_probs) < top_p).sum(-1, keepdim=True)
        cutoff = cutoff.clone()
        cutoff[wide] = ordered.gather(-1, row_kept - 1)
    return logits.masked_fill(logits < cutoff, float("-inf"))


def sample_rows(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw from each row of probs [..., V] (rows summing to 1 up to rounding) -> indices [...].

    Inverse CDF: the first index whose cumulative mass exceeds u * total, u ~ U[0, 1); a token of
    probability 0 is never drawn (its cumulative mass equals its predecessor's). Cheaper than
    torch.multinomial for the few rows of a draft."""
    cumulative = probs.double().cumsum(-1)  # [..., V]
    u = torch.rand(probs.shape[:-1] + (1,), generator=generator, device=probs.device, dtype=torch.float64)
    index = (cumulative <= u * cumulative[..., -1:]).sum(-1)  # [...]
    last_positive = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.uint8).argmax(-1)
    return torch.minimum(index, last_positive)  # u * total rounding up to the total


def sampling_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Logits [..., V] -> the logits sampled from. temperature 0 is greedy: 0 on the argmax, -inf elsewhere."""
    logits = logits.float()
    if temperature == 0:
        greedy = torch.full_like(logits, float("-inf"))
        return greedy.scatter(-1, logits.argmax(-1, keepdim=True), 0.0)
    return filter_logits(logits / temperature, top_p, top_k)


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Logits [..., V] -> the distribution sampled from [..., V]."""
    return torch.softmax(sampling_logits(logits, temperature, top_p, top_k), dim=-1)


class NonFiniteLogits(ValueError):
    """A model's logits hold NaN or inf; names the model and, once known, the round."""

    def __init__(self, who: str, kind: str, round_index: int | None = None):
        self.who, self.kind = who, kind
        where = "" if round_index is None else f" in round {round_index}"
        super().__init__(f"the {who}'s logits hold {kind}{where}; check the model's weights and dtype")


def check_finite(logits: torch.Tensor, who: str, round_index: int | None = None) -> None:
    """Raises NonFiniteLogits when a model's raw logits hold NaN or inf."""
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteLogits(who, "NaN" if bool(torch.isnan(logits).any()) else "inf", round_index)


def sample_fast(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of logits [b, V] from the same law as `sample_rows(sampling_probs(...))`, but other
    draws: the row is sampled among its TOP_P_CANDIDATES most likely tokens whenever its nucleus lies inside
    them (one pass over V for the normaliser, none for sorting), and by the full path otherwise. For batches
    of many rows (distillation data), where the full path's [b, V] passes cost a third of a forward.
    temperature 0 is greedy. Returns indices [b]."""
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(-1)
    if top_p >= 1.0 or top_k:
        return sample_rows(sampling_probs(logits, temperature, top_p, top_k), generator)
    scaled = logits / temperature  # [b, V]
    top, ids = scaled.topk(min(scaled.shape[-1], TOP_P_CANDIDATES), dim=-1)  # [b, k], descending
    probs = (top - scaled.logsumexp(-1, keepdim=True)).exp()  # [b, k]: their probabilities
    cumulative = probs.cumsum(-1)
    cutoff = top.gather(-1, (cumulative - probs < top_p).sum(-1, keepdim=True) - 1)  # [b, 1]: least likely kept
    kept = top >= cutoff  # [b, k]: the nucleus, ties at the cut kept (as `filter_logits`)
    choice = ids.gather(-1, sample_rows(probs * kept, generator)[:, None])[:, 0]  # [b]
    wide = cumulative[:, -1] < top_p  # rows whose nucleus is wider than the candidates: the full path
    if bool(wide.any()):
        choice[wide] = sample_rows(sampling_probs(logits[wide], temperature, top_p, top_k), generator)
    return choice


def eos_token_ids(model, given=None) -> set[int]:
    """EOS ids: as given, else the model's generation_config, else its config."""
    if given is None:
        generation_config = getattr(model, "generation_config", None)
        given = getattr(generation_config, "eos_token_id", None)
        if given is None:
            given = getattr(model.config, "eos_token_id", None)
    if given is None:
        return set()
    return {int(t) for t in ([given] if isinstance(given, int) else given)}
