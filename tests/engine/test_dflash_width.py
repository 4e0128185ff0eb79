"""The DFlash drafter drafts at a width it was trained at (issue 51, item 1; `specdiff.drafters.dflash`, "Width"):
a draft of B tokens is the first B slots of a block filled with masks to the smallest trained width >= B + 1, so
its logits are the trained-width block's first B, round after round; `at_trained_width=False` drafts from
[anchor, B masks], whose logits differ (bidirectional attention inside the block)."""
from __future__ import annotations

import pytest
import torch
from engine.test_dflash_lean import VOCAB, _dflash_model
from tiny_models import tiny_qwen3

import specdiff as sd


@pytest.fixture(scope="module")
def verifier():
    return tiny_qwen3(VOCAB, seed=0, layers=2)


@pytest.mark.parametrize("widths, expected", [(None, {1: 5, 2: 5, 4: 5, 5: 6, 7: 8}),
                                              ([3, 5, 9], {1: 3, 2: 3, 3: 5, 4: 5, 6: 9, 8: 9, 9: 10})])
def test_the_width_is_the_smallest_trained_one_that_holds_the_draft(verifier, widths, expected):
    model = _dflash_model(verifier, True)  # block_size 5: [anchor, 4 masks]
    if widths is not None:
        model.config.specdiff_trained_widths = widths
    drafter = sd.DFlashDrafter(model, verifier)
    assert {b: drafter.width(b) for b in expected} == expected
    assert {b: sd.DFlashDrafter(model, verifier, at_trained_width=False).width(b) for b in expected} == {
        b: b + 1 for b in expected}


@torch.inference_mode()
@pytest.mark.parametrize("anchor_state", [True, False])
def test_a_short_draft_is_the_first_slots_of_the_trained_block(verifier, anchor_state):
    model = _dflash_model(verifier, anchor_state)  # trained width 5
    short, full, narrow = (sd.DFlashDrafter(model, verifier), sd.DFlashDrafter(model, verifier),
                           sd.DFlashDrafter(model, verifier, at_trained_width=False))
    generator = torch.Generator().manual_seed(3)
    width = 2 * verifier.config.hidden_size
    key_mask = torch.ones(3, 6, dtype=torch.bool)
    key_mask[1, :2] = False
    prompt = torch.randint(1, VOCAB - 1, (3, 6), generator=generator)
    states = torch.randn(3, 5, width, generator=generator)
    for drafter in (short, full, narrow):
        drafter.start(prompt, key_mask, states)
    differs = False
    for block, accepted in ((2, [1, 0, 2]), (1, [0, 1, 1]), (3, [3, 2, 0])):
        ids = torch.randint(1, VOCAB - 1, (3, 6), generator=generator)
        mine = short._block_logits(ids, block)  # [b, B, V]
        torch.testing.assert_close(mine, full._block_logits(ids, 4)[:, :block], atol=1e-6, rtol=1e-6)
        differs |= not torch.allclose(mine, narrow._block_logits(ids, block), atol=1e-4)
        round_states = torch.randn(3, block + 1, width, generator=generator)
        for drafter in (short, full, narrow):
            drafter.commit(torch.tensor(accepted), round_states)
    assert differs  # the width changes the slots' outputs: what the trained width is for


def test_greedy_speculation_at_the_trained_width_equals_plain_greedy(verifier):
    from architectures import hf_greedy

    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [19]]
    references = [hf_greedy(verifier, prompt, 16)[0] for prompt in prompts]
    drafter = sd.DFlashDrafter(_dflash_model(verifier, True), verifier)
    for block in (1, 2, 3):
        gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier, temperature=0.0), block_size=block,
                                      eos_token_id=[], batch_size=3)
        assert gen.generate(prompts, max_new_tokens=16).token_ids == references
