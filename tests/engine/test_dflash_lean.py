"""The DFlash drafter's lean forward (`specdiff.drafters.dflash_lean`, issue 41 item 3) computes what the
transformers call computes: the block's logits and the kept context columns agree round by round (left-padded
rows, varying acceptances, a skipped round, a row selection, with and without the anchor state, float32 and
bfloat16); greedy speculation with it is token-identical to the transformers path and to plain greedy decoding;
and a model it does not know keeps the transformers call."""
from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_qwen3

import specdiff as sd
from specdiff.drafters.dflash_lean import LeanCache

VOCAB = 32


def _dflash_model(target, anchor_state: bool, seed: int = 5, **overrides):
    """A two-layer DFlash model with grouped heads (4 query heads on 2 key/value heads) and random norm weights."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    hidden = target.config.hidden_size
    settings = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, max_position_embeddings=64, layer_types=["full_attention"] * 2,
                    block_size=5, mask_token_id=VOCAB - 1, target_layer_ids=[0, 1], bos_token_id=None,
                    eos_token_id=None, pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    config = MuseGlimmerAssistantConfig(**{**settings, **overrides})
    config.specdiff_anchor_state = anchor_state
    torch.manual_seed(seed)
    model = MuseGlimmerAssistantModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(1.0, 0.3)
    return model


@pytest.fixture(scope="module")
def verifier():
    return tiny_qwen3(VOCAB, seed=0, layers=2)


def _pair(model, target, **kw):
    """(lean drafter, transformers-path drafter) on the same model."""
    lean, hf = sd.DFlashDrafter(model, target, **kw), sd.DFlashDrafter(model, target, **kw)
    assert lean.lean is not None
    hf.lean = None
    return lean, hf


@torch.inference_mode()
def _drive(drafters, dtype, tolerance):
    """Rounds of start / propose / commit (and a skip, a select) on every drafter alike; asserts their block
    logits and kept context columns agree."""
    generator = torch.Generator().manual_seed(1)
    width = 2 * drafters[0].target.config.hidden_size  # two target layers

    def states(batch, length):
        return torch.randn(batch, length, width, generator=generator).to(dtype)

    def anchors(batch):
        return torch.randint(1, VOCAB - 1, (batch, 7), generator=generator)

    key_mask = torch.ones(4, 7, dtype=torch.bool)
    key_mask[0, :3], key_mask[2, :5], key_mask[3, :1] = False, False, False  # left-padded prompts
    prompt_states = states(4, 6)
    for drafter in drafters:
        drafter.start(anchors(4), key_mask, prompt_states)
    ids = anchors(4)
    rounds = [(4, [4, 0, 2, 1], "propose"), (2, [0, 0, 0, 0], "propose"), (3, [1, 3, 0, 2], "skip"),
              (5, [5, 2, 2, 0], "propose"), (3, [3, 3, 3, 3], "select"), (1, [0, 1], "propose"), (6, [2, 6], "propose")]
    for block, accepted, action in rounds:
        batch = ids.shape[0]
        if action != "skip":
            logits = [drafter._block_logits(ids, block) for drafter in drafters]  # [b, B, V]
            for other in logits[1:]:
                torch.testing.assert_close(logits[0].float(), other.float(), **tolerance)
            for other in drafters[1:]:
                assert torch.equal(drafters[0].cache_mask, other.cache_mask)
        round_states = states(batch, block + 1)
        for drafter in drafters:
            (drafter.skip if action == "skip" else drafter.commit)(torch.tensor(accepted), round_states)
        if action == "select":
            rows = torch.tensor([2, 0])
            for drafter in drafters:
                drafter.select(rows)
        ids = anchors(drafters[0].pending.shape[0])
    lean_cache = drafters[0].cache
    assert isinstance(lean_cache, LeanCache) and lean_cache.layers[0].keys.shape[0] == 2
    return drafters


@pytest.mark.parametrize("anchor_state", [True, False])
def test_lean_block_logits_equal_the_transformers_call_float32(verifier, anchor_state):
    lean, hf = _drive(_pair(_dflash_model(verifier, anchor_state), verifier), torch.float32,
                      dict(atol=1e-5, rtol=1e-5))
    for mine, theirs in zip(lean.cache.layers, hf.cache.layers):  # the kept context keys and values
        torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(mine.values, theirs.values, atol=1e-6, rtol=1e-6)


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
@pytest.mark.parametrize("anchor_state", [True, False])
def test_lean_block_logits_equal_the_transformers_call_bfloat16(verifier, anchor_state):
    import copy

    target = copy.deepcopy(verifier).to(torch.bfloat16)
    model = _dflash_model(verifier, anchor_state).to(torch.bfloat16)
    _drive(_pair(model, target), torch.bfloat16, dict(atol=0.1, rtol=0.05))


def test_lean_block_logits_with_a_draft_vocabulary(verifier):
    _drive(_pair(_dflash_model(verifier, True), verifier, draft_to_target=[3, 1, 7, 30, 12]), torch.float32,
           dict(atol=1e-5, rtol=1e-5))


def test_greedy_speculation_with_the_lean_drafter_equals_the_transformers_path_and_plain_greedy(verifier):
    from architectures import hf_greedy

    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18], [19]]
    references = [hf_greedy(verifier, prompt, 20)[0] for prompt in prompts]
    model = _dflash_model(verifier, True)
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    for lean in (True, False):
        drafter = sd.DFlashDrafter(model, verifier)
        if not lean:
            drafter.lean = None
        for batch_size in (1, 4):
            gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier, temperature=0.0), block_size=4,
                                          eos_token_id=[], batch_size=batch_size)
            out = gen.generate(prompts, max_new_tokens=20)
            assert out.token_ids == references, (lean, batch_size)
            assert isinstance(drafter.cache, LeanCache) == lean and bool(calls) != lean  # which path ran


@pytest.mark.parametrize("overrides", [dict(layer_types=["sliding_attention"] * 2),
                                       dict(hidden_act="gelu"),
                                       dict(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                             "rope_theta": 1000.0})],
                         ids=["sliding", "gelu", "linear rope"])
def test_a_model_the_lean_forward_does_not_know_keeps_the_transformers_call(verifier, overrides):
    from transformers import DynamicCache

    model = _dflash_model(verifier, True, **overrides)
    drafter = sd.DFlashDrafter(model, verifier)
    assert drafter.lean is None
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    prompt = torch.tensor([[5, 6, 7, 8]])
    drafter.start(prompt, torch.ones_like(prompt, dtype=torch.bool), torch.randn(1, 3, 2 * verifier.config.hidden_size))
    draft = drafter.propose(prompt, torch.ones_like(prompt, dtype=torch.bool), 3)
    assert draft.tokens.shape == (1, 3) and calls == [1] and isinstance(drafter.cache, DynamicCache)


def test_an_eager_attention_model_keeps_the_transformers_call(verifier):
    model = _dflash_model(verifier, False)
    model.config._attn_implementation = "eager"
    assert sd.DFlashDrafter(model, verifier).lean is None


@pytest.mark.parametrize("draft_to_target", [None, [3, 1, 7, 30, 12]], ids=["full head", "draft vocabulary"])
def test_the_head_product_is_one_matrix_product_without_copying_the_weight(draft_to_target):
    """The block's logits are `F.linear` over [b * B, H] rows: a 3-D product would run as bmm on the CPU and copy
    the transposed head weight every round (half of the shipped drafter's proposal time, profiled)."""
    from torch.profiler import ProfilerActivity, profile

    verifier = tiny_qwen3(40, seed=0, layers=2)  # a vocabulary no other weight's width equals
    drafter = sd.DFlashDrafter(_dflash_model(verifier, True), verifier, draft_to_target=draft_to_target)
    prompt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.ones_like(prompt, dtype=torch.bool)
    drafter.start(prompt, mask, torch.randn(2, 3, 2 * verifier.config.hidden_size))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        draft = drafter.propose(prompt, mask, 3)
    assert draft.tokens.shape == (2, 3)
    vocab = verifier.config.vocab_size if draft_to_target is None else len(draft_to_target)
    hidden = verifier.config.hidden_size
    products = [e for e in prof.events() if e.name in ("aten::mm", "aten::addmm", "aten::bmm")
                and [hidden, vocab] in [list(s) for s in e.input_shapes]]  # the head's [H, V] weight, transposed
    assert [e.name for e in products] == ["aten::mm"]
    assert not [e for e in prof.events() if e.name == "aten::contiguous" and [1, hidden, vocab] in e.input_shapes]
