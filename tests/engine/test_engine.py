"""The engine's parts: KV-cache compaction, the verifier's rounds, the drafters' caches and
conventions, stopping rules, and clear errors on bad input."""
from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_qwen3
from verifier_rounds import check_rounds_against_full_forwards

import specdiff as sd
from specdiff.lm.cache import compaction_index, keep_columns, new_cache
from specdiff.lm.masks import left_pad


def test_compaction_index_right_aligns_kept_columns():
    keep = torch.tensor([[True, False, True, True, False],
                         [False, False, True, False, False],
                         [True, True, True, True, True]])
    index, key_mask = compaction_index(keep)
    assert index.shape == (3, 5)
    assert key_mask.tolist() == [[False, False, True, True, True], [False, False, False, False, True], [True] * 5]
    assert index[0, 2:].tolist() == [0, 2, 3] and index[1, 4].item() == 2 and index[2].tolist() == [0, 1, 2, 3, 4]


def _verifier_model(kind: str):
    import transformers

    if kind == "qwen3":
        return tiny_qwen3(vocab=11, seed=3, layers=2)
    small = dict(vocab_size=11, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=8, max_position_embeddings=64, pad_token_id=0)
    torch.manual_seed(3)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**small)).eval()
    if kind == "gemma2":  # sliding-window layers, window shorter than the sequences
        return transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**small, sliding_window=4)).eval()
    return transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**small, sliding_window=4)).eval()


@pytest.mark.parametrize("kind", ["qwen3", "llama", "gemma2", "gemma3"])
def test_verifier_rounds_equal_full_forwards(kind):
    """Prompts of different lengths, rounds with different acceptance per row, a row leaving the batch:
    every round's p equals an uncached forward of each row alone over its committed tokens + chunk
    (sliding-window architectures included)."""
    verifier, committed = check_rounds_against_full_forwards(
        _verifier_model(kind), [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 1, 2]], vocab=11,
        kept=lambda round_index, row: 1 + (round_index + row) % 4, leave_round=2, atol=1e-4, label=kind)
    assert verifier.cache.get_seq_length() == max(len(r) - 1 for r in committed)  # no column wasted


def test_keep_columns_is_a_crop_at_batch_one():
    model = tiny_qwen3(vocab=7, seed=0)
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3, 4, 5]]), cache=cache, use_cache=True)
    keys = cache.layers[0].keys.clone()
    mask = keep_columns(cache, torch.tensor([[True, True, True, False, False]]))
    assert mask.shape == (1, 3) and torch.equal(cache.layers[0].keys, keys[:, :, :3])


def test_ar_drafter_cache_matches_greedy_decoding():
    """Greedy AR drafting after several rounds of partial acceptance equals greedy decoding of the drafter
    from the committed tokens (its cache is cropped right)."""
    model = tiny_qwen3(vocab=9, seed=5, layers=2)
    drafter = sd.AutoregressiveDrafter(model, temperature=0.0)
    prompt = [1, 4, 2]
    ids, key_mask = left_pad([prompt], 0)
    drafter.start(ids, key_mask)
    committed = list(prompt)
    for accepted in (2, 0, 4, 1):
        draft = drafter.propose(torch.tensor([committed]), torch.ones(1, len(committed), dtype=torch.bool), 4)
        greedy = list(committed)
        for _ in range(4):  # reference: uncached full forwards
            with torch.no_grad():
                greedy.append(int(model(input_ids=torch.tensor([greedy])).logits[0, -1].argmax()))
        assert draft.tokens[0].tolist() == greedy[len(committed):]
        drafter.commit(torch.tensor([accepted]))
        committed += draft.tokens[0, :accepted].tolist() + [(accepted * 3) % 9]  # accepted, then a correction


def test_round_prefix_cache_first_step_equals_the_uncached_step():
    from specdiff.drafters.masked import bidirectional_logits
    from specdiff.drafters.prefix_cache import round_cache_steps

    model = tiny_qwen3(vocab=9, seed=4, layers=2, bidirectional=True)
    tokens = torch.tensor([[0, 0, 1, 2, 3, 8, 8, 8], [1, 5, 2, 6, 3, 8, 8, 8]])
    key_mask = tokens.ne(0) | torch.arange(8).ge(2)
    step = round_cache_steps(model, tokens.clone(), key_mask, 3, shift=True)
    canvas = torch.full((2, 3), 8)
    first = step(canvas)
    expected = bidirectional_logits(model, tokens, key_mask, torch.arange(5, 8), shift=True)
    assert torch.allclose(first, expected, atol=1e-5)
    second = step(torch.tensor([[4, 8, 8], [4, 8, 8]]))  # a later step: prefix keys reused, canvas re-encoded
    recomputed = bidirectional_logits(model, torch.cat([tokens[:, :5], torch.tensor([[4, 8, 8]] * 2)], 1), key_mask,
                                      torch.arange(5, 8), shift=True)
    assert second.shape == recomputed.shape and not torch.allclose(second, first)


@pytest.mark.parametrize("kind", ["bert", "modernbert"])
def test_masked_lm_classes_draft_without_shift(kind):
    """LLaDA's convention: a masked-LM class, bidirectional by construction, no shift."""
    import transformers

    if kind == "bert":
        config = transformers.BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=64, pad_token_id=0)
        model = transformers.BertForMaskedLM(config).eval()
    else:
        config = transformers.ModernBertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=32,
                                               max_position_embeddings=64, pad_token_id=0, mask_token_id=11)
        model = transformers.ModernBertForMaskedLM(config).eval()
    drafter = sd.MaskedDiffusionDrafter(model, steps=2, mask_token_id=11)
    assert drafter.shift_logits is False and drafter.pad_token_id == 0
    ids, key_mask = left_pad([[1, 2, 3], [4, 5, 6, 7, 8]], 0)
    draft = drafter.draft(ids, key_mask, 4, generator=torch.Generator().manual_seed(0))
    assert draft.tokens.shape == (2, 4) and (draft.tokens != 11).all()
    picked = draft.probs.gather(-1, draft.tokens[..., None]).squeeze(-1)
    assert (picked > 0).all() and torch.allclose(draft.probs.sum(-1), torch.ones(2, 4), atol=1e-5)
    verifier = sd.Verifier(tiny_qwen3(vocab=12, seed=1))
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=4, proposal="point_mass", eos_token_id=[])
    out = gen.generate([[1, 2, 3], [4, 5]], max_new_tokens=9)
    assert [len(row) for row in out.token_ids] == [9, 9] and out.summary.exact


def test_conventions_come_from_the_config_with_clear_errors():
    dream_like = tiny_qwen3(vocab=9, bidirectional=True)
    drafter = sd.MaskedDiffusionDrafter(dream_like)
    assert drafter.shift_logits is True and drafter.mask_token_id == 8 and drafter.pad_token_id == 0
    plain = tiny_qwen3(vocab=9)
    with pytest.raises(ValueError, match="shift_logits"):
        sd.MaskedDiffusionDrafter(plain, mask_token_id=8)
    plain.config.logits_shift = 1
    with pytest.raises(ValueError, match="mask_token_id"):
        sd.MaskedDiffusionDrafter(plain)


def test_eos_and_max_new_tokens_stop_each_row():
    verifier_model = tiny_qwen3(vocab=6, seed=0, layers=2)
    drafter = sd.AutoregressiveDrafter(tiny_qwen3(vocab=6, seed=1), temperature=1.0, top_p=1.0, top_k=0)
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier_model), block_size=4, eos_token_id=5)
    out = gen.generate([[1, 2]] * 200 + [[3]] * 200, max_new_tokens=7, generator=torch.Generator().manual_seed(0))
    for row, stats in zip(out.token_ids, out.stats):
        assert 1 <= len(row) <= 7 and stats.new_tokens == len(row)
        assert 5 not in row[:-1]  # nothing after EOS
        assert len(row) == 7 or row[-1] == 5
        assert stats.rounds == len(stats.accepted) and all(0 <= a <= 4 for a in stats.accepted)
    assert any(row[-1] == 5 for row in out.token_ids) and any(len(row) == 7 for row in out.token_ids)
    verifier_model.generation_config.eos_token_id = 4
    assert sd.SpeculativeGenerator(drafter, sd.Verifier(verifier_model)).eos_token_ids == {4}


def _pair(vocab=6):
    return sd.AutoregressiveDrafter(tiny_qwen3(vocab=vocab, seed=1)), sd.Verifier(tiny_qwen3(vocab=vocab, seed=0))


def test_bad_input_gets_a_clear_error_before_generation():
    drafter, verifier = _pair()
    with pytest.raises(ValueError, match="vocabulary"):
        sd.SpeculativeGenerator(sd.AutoregressiveDrafter(tiny_qwen3(vocab=7)), verifier)
    for kwargs, message in [(dict(block_size=0), "block_size"), (dict(rule="lossless"), "rule"),
                            (dict(method="tree"), "method"), (dict(proposal="joint"), "proposal"),
                            (dict(batch_size=0), "batch_size")]:
        with pytest.raises(ValueError, match=message):
            sd.SpeculativeGenerator(drafter, verifier, **kwargs)
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate([[1, 2]], max_new_tokens=0)
    with pytest.raises(ValueError, match="context"):
        gen.generate([[1] * 61], max_new_tokens=5)  # 61 + B = 65 > 64
    with pytest.raises(ValueError, match="tokenizer"):
        gen.generate(["a string"], max_new_tokens=5)
    with pytest.raises(ValueError, match="vocabulary"):
        gen.generate([[1, 9]], max_new_tokens=5)
    masked = tiny_qwen3(vocab=6, bidirectional=True)
    for kwargs, message in [(dict(steps=0), "steps"), (dict(threshold=0.0), "threshold"),
                            (dict(threshold=1.5), "threshold"), (dict(order="spiral"), "order"),
                            (dict(prefix_cache="always"), "prefix_cache"), (dict(temperature=-1), "temperature")]:
        with pytest.raises(ValueError, match=message):
            sd.MaskedDiffusionDrafter(masked, **kwargs)
    with pytest.raises(ValueError, match="top_p"):
        sd.Verifier(tiny_qwen3(vocab=6), top_p=0.0)


@pytest.mark.parametrize("broken", ["verifier", "drafter"])
def test_nan_logits_name_the_model_and_the_round(broken):
    drafter, verifier = _pair()
    model = verifier.model if broken == "verifier" else drafter.model
    with torch.no_grad():
        model.lm_head.weight[2] = float("nan")
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=3, eos_token_id=[])
    with pytest.raises(ValueError, match=f"{broken}.*round 1"):
        gen.generate([[1, 2]], max_new_tokens=5)


def _live_tensor_bytes() -> tuple[int, int]:
    """(number of live tensors, bytes of their distinct storages)."""
    import gc
    import warnings

    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.distributed's deprecated aliases are probed
        tensors = [obj for obj in gc.get_objects() if torch.is_tensor(obj)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return len(tensors), sum(storages.values())


def _cache_bytes(cache) -> int:
    return sum(layer.keys.untyped_storage().nbytes() + layer.values.untyped_storage().nbytes()
               for layer in cache.layers if getattr(layer, "keys", None) is not None)


def test_memory_is_flat_across_a_1000_token_generation():
    """Apart from the sequence's own KV caches (one column per committed token, nothing for rejected
    drafts), neither the number of live tensors nor their bytes grow across rounds."""
    verifier = sd.Verifier(tiny_qwen3(vocab=6, seed=0, context=1100))
    drafter = sd.AutoregressiveDrafter(tiny_qwen3(vocab=6, seed=1, context=1100), temperature=1.0, top_p=1.0, top_k=0)
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=4, eos_token_id=[])
    samples = []

    def on_round(round_index, live):
        if round_index % 100 == 0:
            count, total = _live_tensor_bytes()
            kv = _cache_bytes(verifier.cache) + _cache_bytes(drafter.cache)
            samples.append((count, total - kv, verifier.cache.get_seq_length(), drafter.cache.get_seq_length()))

    out = gen.generate([[1, 2, 3]], max_new_tokens=1000, generator=torch.Generator().manual_seed(0), on_round=on_round)
    assert len(out.token_ids[0]) == 1000 and len(samples) >= 3
    counts, other_bytes = [s[0] for s in samples], [s[1] for s in samples]
    assert max(counts) - min(counts) <= 4, counts
    assert max(other_bytes) - min(other_bytes) <= 64 * 1024, other_bytes
    for _, _, verifier_columns, drafter_columns in samples:
        assert drafter_columns <= verifier_columns + 1  # the drafter caches no rejected draft either


@pytest.mark.parametrize("temperature, top_p, top_k", [(0.7, 0.8, 20), (1.0, 0.95, 0), (0.5, 1.0, 5), (1.3, 0.3, 0),
                                                       (8.0, 0.99, 0), (8.0, 0.99, 100), (0.2, 0.95, 0)])
def test_sampling_settings_shape_p_as_transformers_generate(temperature, top_p, top_k):
    """The verifier's p: temperature, then top-k, then top-p, as transformers' logits warpers apply them."""
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    from specdiff.lm.sampling import sampling_probs

    logits = 4 * torch.randn(64, 254, generator=torch.Generator().manual_seed(0))
    expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1:
        expected = TopPLogitsWarper(top_p)(None, expected)
    assert torch.allclose(sampling_probs(logits, temperature, top_p, top_k), torch.softmax(expected, -1), atol=1e-6)


def test_sample_rows_draws_each_row_from_its_distribution():
    from scipy import stats

    from specdiff.lm.sampling import sample_rows

    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 1.0, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float32)
    draws = sample_rows(probs.expand(20_000, 3, 4), torch.Generator().manual_seed(0))  # [20000, 3]
    for row in range(3):
        counts = torch.bincount(draws[:, row], minlength=4).double()
        assert counts[probs[row] == 0].sum() == 0  # never a token of probability 0
        keep = probs[row] > 0
        if keep.sum() == 1:
            assert counts[keep].item() == 20_000
            continue
        expected = probs[row][keep].double() / probs[row][keep].double().sum() * 20_000
        assert stats.chisquare(counts[keep].numpy(), expected.numpy()).pvalue > 1e-4
