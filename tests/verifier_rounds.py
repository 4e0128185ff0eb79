"""Shared check (not a test module): a Verifier's rounds against uncached forwards of each row alone."""
from __future__ import annotations

import torch

import specdiff as sd
from specdiff.lm.masks import left_pad


def check_rounds_against_full_forwards(model, committed: list[list[int]], vocab: int, kept, leave_round: int,
                                       atol: float, label=None) -> tuple[sd.Verifier, list[list[int]]]:
    """Five rounds of 3 drafted tokens on prompts of different lengths. Each round's p must equal an
    uncached forward of each row alone over its committed tokens + chunk (within atol, log-probs).
    Then `kept(round_index, row)` columns are committed per row (last committed + 0..3 drafted), one
    correction is appended, and after `leave_round` the middle row leaves the batch.
    Returns the verifier and the rows' committed tokens."""
    verifier = sd.Verifier(model, temperature=1.0)
    verifier.start(*left_pad(committed, 0))
    generator = torch.Generator().manual_seed(0)
    for round_index in range(5):
        rows = len(committed)
        drafted = torch.randint(1, vocab, (rows, 3), generator=generator)
        chunk = torch.cat([torch.tensor([[r[-1]] for r in committed]), drafted], dim=1)  # [n, 4]
        logits, _ = verifier.score(chunk)
        for row in range(rows):
            full = torch.tensor([committed[row] + drafted[row].tolist()])
            with torch.no_grad():
                expected = torch.log_softmax(model(input_ids=full).logits[0, -4:].float(), -1)
            got = torch.log_softmax(logits[row], -1)
            assert torch.allclose(got, expected, atol=atol), (label, round_index, row, (got - expected).abs().max())
        keep = torch.tensor([kept(round_index, row) for row in range(rows)])
        verifier.commit(keep)
        for row in range(rows):
            correction = int(torch.randint(1, vocab, (1,), generator=generator))
            committed[row] += drafted[row, : keep[row] - 1].tolist() + [correction]
        if round_index == leave_round:  # the middle row finishes
            verifier.select(torch.tensor([0, 2]))
            committed = [committed[0], committed[2]]
    return verifier, committed
