"""End-to-end exactness of the uniform, block and DFlash drafters (issue 12, item 7), by enumeration
as in test_exactness.py: a tiny random verifier over V = 4 tokens, the exact law of its first 3 sampled
tokens (64 sequences), and 40,000 rows of lossless speculative generation in one batched call; total
variation <= 0.03 and a chi-square p-value >= 1e-4 (see test_exactness.py for why these have power).

- point mass: exact for every drafter;
- marginal: exact where `drafter.exact_marginal` says so and docs/drafters.md proves it: the uniform
  drafter at every K (its last step samples all positions independently), the block drafter at K = 1
  and left-to-right, DFlash (one step);
- the block drafter with a confidence threshold is flagged inexact in marginal mode;
- DFlash with a reduced draft vocabulary (`draft_to_target`, issue 31): exact, its q 0 outside the index;
- the masked drafter with a reduced draft vocabulary (issue 32: its head has V_d rows, it samples among them
  and writes verifier ids, `unmasking.DraftIndex`), with the mask token inside the index or not.
"""
from __future__ import annotations

import pytest
import torch
from tiny_models import (LENGTH, PROMPT, ROWS, SAMPLING, VOCAB, assert_matches_exact, exact_continuations, tiny_dflash,
                         tiny_diffusion_gemma, tiny_qwen3)

import specdiff as sd



@pytest.fixture(scope="module")
def models():
    verifier = tiny_qwen3(VOCAB, seed=0, layers=2)
    uniform = tiny_diffusion_gemma(VOCAB, seed=3)
    sdar_like = tiny_qwen3(VOCAB, seed=4, bidirectional=True)  # SDAR stand-in: no shift, block length 4
    sdar_like.config.logits_shift, sdar_like.config.block_size = 0, 4
    dflash = tiny_dflash(verifier, block=4, seed=5)
    masked = tiny_qwen3(VOCAB, seed=6, bidirectional=True)  # Dream-style stand-in: shift, mask id VOCAB - 1
    return dict(verifier=verifier, uniform=uniform, block=sdar_like, dflash=dflash, masked=masked,
                exact=exact_continuations(verifier, PROMPT, LENGTH, **SAMPLING))


def _uniform(m, **kw):
    return sd.UniformDiffusionDrafter(m["uniform"], top_p=1.0, **kw)


def _block(m, **kw):
    return sd.BlockDiffusionDrafter(m["block"], temperature=1.0, top_p=1.0, top_k=0, **kw)


def _dflash(m, **kw):
    return sd.DFlashDrafter(m["dflash"], m["verifier"], **kw)


def _dspark(m, draft_to_target=None, **kw):
    """The DFlash stand-in with DSpark's changes (issue 51): the anchor's slot predicts, and a Markov head (rank 3,
    seeded nonzero weights) biases each position by the token drafted before it."""
    import copy

    from specdiff.drafters.dflash import add_markov_head

    model = copy.deepcopy(m["dflash"])
    model.config.sample_from_anchor = True
    add_markov_head(model, 3, len(draft_to_target) if draft_to_target is not None else VOCAB)
    torch.manual_seed(11)
    with torch.no_grad():
        model.markov_w1.normal_(0.0, 1.5)
    return sd.DFlashDrafter(model, m["verifier"], draft_to_target=draft_to_target, **kw)


def _masked_index(m, d2t, **kw):
    """The masked stand-in with a head of len(d2t) rows (seeded), row i drafting verifier id d2t[i]."""
    import copy

    model = copy.deepcopy(m["masked"])
    torch.manual_seed(len(d2t))
    model.lm_head = torch.nn.Linear(model.config.hidden_size, len(d2t), bias=False)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.5)
    drafter = sd.MaskedDiffusionDrafter(model, temperature=1.0, top_p=1.0, top_k=0, **kw)
    drafter.draft_to_target = torch.tensor(d2t)
    return drafter


CASES = [  # (label, drafter factory, block size, proposal, method)
    ("uniform K=1 marginal", lambda m: _uniform(m, steps=1), 3, "marginal", "token"),
    ("uniform K=2 marginal", lambda m: _uniform(m, steps=2, temperature=(1.2, 0.9)), 3, "marginal", "token"),
    ("uniform K=3 marginal block", lambda m: _uniform(m, steps=3, order="random"), 2, "marginal", "block"),
    ("uniform K=2 point mass", lambda m: _uniform(m, steps=2), 3, "point_mass", "token"),
    ("block K=1 marginal", lambda m: _block(m, steps=1), 3, "marginal", "token"),
    ("block left_to_right K=3 marginal", lambda m: _block(m, steps=3, order="left_to_right"), 3, "marginal", "token"),
    ("block threshold point mass", lambda m: _block(m, threshold=0.5), 3, "point_mass", "token"),
    ("dflash marginal", lambda m: _dflash(m, temperature=1.0), 2, "marginal", "token"),
    ("dflash greedy marginal block", lambda m: _dflash(m), 3, "marginal", "block"),
    # a reduced draft vocabulary (d2t: 2 of the 4 ids): q is 0 outside it, and the output is still exact
    ("dflash draft vocabulary marginal", lambda m: _dflash(m, temperature=1.0, draft_to_target=[1, 3]), 2,
     "marginal", "token"),
    ("dflash draft vocabulary marginal block", lambda m: _dflash(m, temperature=1.0, draft_to_target=[2, 0, 3]), 3,
     "marginal", "block"),
    # DSpark (issue 51): the anchor's slot reads, a Markov head: q of each position given the drafted one before
    ("dspark markov marginal", lambda m: _dspark(m, temperature=1.0), 3, "marginal", "token"),
    ("dspark markov draft vocabulary marginal block", lambda m: _dspark(m, [2, 0, 3], temperature=1.0), 3,
     "marginal", "block"),
    ("masked draft vocabulary K=1 marginal", lambda m: _masked_index(m, [0, 2], steps=1), 3, "marginal", "token"),
    ("masked draft vocabulary left_to_right K=2 marginal block",  # the mask id (3) in the index: never drafted
     lambda m: _masked_index(m, [1, 2, 3], steps=2, order="left_to_right"), 2, "marginal", "block"),
    ("masked draft vocabulary entropy K=2 point mass", lambda m: _masked_index(m, [0, 1, 2], steps=2), 3,
     "point_mass", "token"),
]


@pytest.mark.parametrize("label, make, block_size, proposal, method", CASES, ids=[c[0] for c in CASES])
def test_lossless_generation_reproduces_the_verifier(models, label, make, block_size, proposal, method):
    drafter = make(models)
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(models["verifier"], **SAMPLING), block_size=block_size,
                                  method=method, proposal=proposal, eos_token_id=[], batch_size=ROWS)
    assert gen.exact
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    assert all(len(row) == LENGTH for row in out.token_ids)
    assert_matches_exact(out.token_ids, models["exact"], label)


def test_exactness_flags(models):
    verifier = sd.Verifier(models["verifier"])
    assert not sd.SpeculativeGenerator(_block(models, threshold=0.5), verifier).exact
    assert not sd.SpeculativeGenerator(_block(models, steps=2), verifier).exact  # confidence order
    assert sd.SpeculativeGenerator(_uniform(models, steps=4), verifier).exact
    assert sd.SpeculativeGenerator(_dflash(models), verifier).exact
