"""Read a batch of next-token distributions given as probabilities or as logits.

Token verification needs a position's distribution only for the rows still accepting there, and
keeps the whole row only where a row stops. From logits, each such row is normalised by one
fused softmax and nothing else is read. `Distributions` hides which of the two it holds.
"""
from __future__ import annotations

import torch

PROB_SUM_TOLERANCE = 1e-3
LOW_PRECISION_SUM_TOLERANCE = 1e-2


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else (float32, bfloat16, float16) is computed in float32."""
    return torch.float64 if tensor.dtype == torch.float64 else torch.float32


class Distributions:
    """A batch of distributions over V tokens, [b, P, V], stored as probabilities or logits.

    From logits, normalisers are computed only for the rows that are read, so token
    verification pays for the positions up to where each row stops and no further.
    """

    def __init__(self, values: torch.Tensor, kind: str, name: str, dtype: torch.dtype, validate: bool = True):
        self.values = values
        self.kind = kind
        self.name = name
        self.dtype = dtype
        self.validate = bool(validate)
        self._scratch = None  # (logits, probabilities) buffers for rows_at
        if validate == "full" and kind == "logits":
            _check_logits(values, name)  # one extra read of every logit
        elif validate and kind == "probs":
            _check_probabilities(values, name)

    @property
    def shape(self):
        return self.values.shape

    def at(self, tokens: torch.Tensor, num_positions: int | None = None) -> torch.Tensor:
        """Probability of tokens[:, i] at position i, for every i. tokens: [b, B]. Returns [b, B]."""
        num_positions = tokens.shape[1] if num_positions is None else num_positions
        values = self.values[:, :num_positions]
        picked = values.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).to(self.dtype)
        if self.kind == "probs":
            return picked
        log_normalizer = torch.logsumexp(values.to(self.dtype), dim=-1)  # [b, P]
        if self.validate and not torch.isfinite(log_normalizer).all():
            _name_bad_logits(values, self.name)
        return torch.exp(picked - log_normalizer)

    def rows(self, positions: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Whole distributions: row rows[j] at positions[j]. Returns a new [n, V] tensor."""
        if rows is None:
            rows = torch.arange(self.values.shape[0], device=self.values.device)
        picked = self.values[rows, positions]  # [n, V]
        if self.kind == "probs":
            return picked.to(self.dtype)
        probs = torch.softmax(picked.to(self.dtype), dim=-1)
        self._check_rows(picked, probs)
        return probs

    def rows_at(self, position: int, rows: torch.Tensor) -> torch.Tensor:
        """The distributions of rows `rows` at one position, [n, V], in a scratch buffer that the
        next call overwrites (copy out what must outlive it).

        The two scratch buffers (logits, probabilities) are sized by the largest n asked for, so a
        caller that walks the rows in chunks of a few hundred thousand entries keeps them in cache
        and never page-faults fresh vocabulary-sized tensors.
        """
        num_rows, vocab = rows.numel(), self.values.shape[-1]
        if self._scratch is None or self._scratch[0].shape[0] < num_rows:
            device = self.values.device
            self._scratch = (torch.empty(num_rows, vocab, dtype=self.dtype, device=device),
                             torch.empty(num_rows, vocab, dtype=self.dtype, device=device))
        picked, probs = self._scratch[0][:num_rows], self._scratch[1][:num_rows]
        source = self.values[:, position]  # [b, V] view
        same_dtype = self.values.dtype == self.dtype
        if num_rows == 1 and same_dtype and source.device.type == "cpu" and source.stride(-1) == 1:
            row = int(rows[0])
            picked = source[row : row + 1]  # one row: read it in place, no copy
        elif num_rows == self.values.shape[0] and source.is_contiguous() and same_dtype:
            picked = source  # one sequence: its row is contiguous already, no copy
        elif num_rows == self.values.shape[0]:
            picked.copy_(source)  # every row is still accepting: a plain (strided) copy
        elif same_dtype:
            torch.index_select(source, 0, rows, out=picked)
        else:
            picked.copy_(source.index_select(0, rows))
        if self.kind == "probs":
            return picked
        torch.ops.aten._softmax.out(picked, -1, False, out=probs)
        self._check_rows(picked, probs)
        return probs

    def _check_rows(self, logits: torch.Tensor, probs: torch.Tensor) -> None:
        # A NaN or +inf logit, or a row of -inf only, turns the whole softmax row into NaN.
        if self.validate and probs.shape[0] and torch.isnan(probs[..., 0]).any():
            _name_bad_logits(logits, self.name)

    def dense(self, num_positions: int, check: bool = True) -> torch.Tensor:
        """All probabilities of the first num_positions positions, [b, num_positions, V].
        check=False leaves the validation of logits to check_read, for the positions used."""
        values = self.values[:, :num_positions].to(self.dtype)
        if self.kind == "probs":
            return values
        probs = torch.softmax(values, dim=-1)
        if check:
            self._check_rows(values, probs)
        return probs

    def check_read(self, probs: torch.Tensor, read: torch.Tensor) -> None:
        """Validate the rows of dense(check=False) that the caller used, read [b, P] bool, as if
        they alone had been normalised: logits at positions never read are not judged."""
        if self.kind == "logits" and self.validate and bool((torch.isnan(probs[..., 0]) & read).any()):
            _name_bad_logits(self.values[:, : read.shape[1]][read], self.name)

    def is_impossible(self, tokens: torch.Tensor) -> torch.Tensor:
        """Whether tokens[:, i] has probability exactly 0 at position i. tokens: [b, B]. Returns [b, B]."""
        picked = self.values[:, : tokens.shape[1]].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return picked == (0.0 if self.kind == "probs" else float("-inf"))


def _check_logits(logits: torch.Tensor, name: str) -> None:
    """One read: the maximum is NaN if any logit is NaN, and +inf if any is +inf."""
    if logits.numel() == 0:
        return
    largest = logits.amax()
    if torch.isnan(largest) or largest == float("inf"):
        _name_bad_logits(logits, name)


def _check_probabilities(probs: torch.Tensor, name: str) -> None:
    if probs.numel() == 0:
        return
    totals = probs.sum(dim=-1, dtype=torch.float64)
    if torch.isnan(totals).any():
        raise ValueError(f"{name} contains NaN")
    if torch.isinf(totals).any():
        raise ValueError(f"{name} contains infinite values")
    if (probs.amin() < 0).item():
        raise ValueError(f"{name} has negative probabilities (min {probs.amin().item():.3g})")
    worst = (totals - 1.0).abs().max().item()
    # bfloat16/float16 store each probability to 2-3 significant digits; allow their rounding.
    tolerance = PROB_SUM_TOLERANCE if probs.dtype in (torch.float32, torch.float64) else LOW_PRECISION_SUM_TOLERANCE
    if worst > tolerance:
        raise ValueError(
            f"{name} rows must sum to 1 (tolerance {tolerance}); worst row is off by {worst:.3g}. "
            "Pass inputs='logits' if these are logits."
        )


def _name_bad_logits(logits: torch.Tensor, name: str) -> None:
    """Raise the ValueError that says what is wrong with these logits (called on failure only)."""
    if torch.isnan(logits).any():
        raise ValueError(f"{name} (logits) contains NaN")
    if (logits == float("inf")).any():
        raise ValueError(f"{name} (logits) contains +inf")
    raise ValueError(f"{name} (logits) has a row where every logit is -inf")
