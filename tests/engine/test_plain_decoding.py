"""`engine.baselines.autoregressive_generate`, the plain cached loop: rows that finish leave the batch (their cache
rows and the padding columns nobody needs are dropped), and the others go on exactly as if alone; `stop_row`
finishes a row early. Greedy, float32, against Hugging Face's own greedy decoding one prompt at a time."""
from __future__ import annotations

import pytest
import torch
from architectures import hf_greedy
from tiny_models import tiny_qwen3

from specdiff.engine import baselines

VOCAB = 24


def test_rows_that_finish_leave_the_batch_and_the_rest_decode_as_if_alone():
    model = tiny_qwen3(VOCAB, seed=3, layers=2, logit_scale=4.0)
    prompts = [[5], [6, 7, 8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19, 20], [21, 3, 4], [7, 7, 9, 1]]
    references = [hf_greedy(model, prompt, 24)[0] for prompt in prompts]
    # an EOS every prompt meets at a different step: each reference's token at step 2 + 3 * row
    stops = {ref[min(2 + 3 * row, 23)] for row, ref in enumerate(references)}
    seen = []
    for eos in sorted(stops):
        cut = [ref[: ref.index(eos) + 1] if eos in ref else ref for ref in references]
        ids, _ = baselines.autoregressive_generate(model, prompts, 24, {eos}, temperature=0.0, pad_token_id=0)
        assert ids == cut, eos
        seen.append(sorted(len(c) for c in cut))
    assert any(lengths[0] < 24 and lengths[-1] == 24 for lengths in seen)  # some rows left early, some went on


def test_stop_row_finishes_a_row_at_a_check_and_leaves_the_others_alone():
    model = tiny_qwen3(VOCAB, seed=3, layers=2, logit_scale=4.0)
    prompts = [[5, 6], [9, 10, 11], [12]]
    references = [hf_greedy(model, prompt, 30)[0] for prompt in prompts]
    ids, _ = baselines.autoregressive_generate(model, prompts, 30, set(), temperature=0.0,
                                               stop_row=lambda row: row[:1] == references[1][:1] and len(row) >= 5)
    every = baselines.STOP_EVERY
    assert ids[1] == references[1][:every]  # stopped at the first check after 5 tokens
    assert ids[0] == references[0] and ids[2] == references[2]


def test_grouped_decode_attention_computes_what_sdpa_computes():
    """`lm.attention`: 4 query heads on 2 key/value heads, left-padded rows; every decode step's logits equal the
    sdpa model's (float32, 1e-5), and greedy decoding is token for token Hugging Face's."""
    import copy

    from transformers import Qwen3Config, Qwen3ForCausalLM

    from specdiff.lm.attention import NAME, use_grouped_decode
    from specdiff.lm.cache import cache_kwargs, new_cache
    from specdiff.lm.masks import left_pad, position_ids

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    torch.manual_seed(0)
    sdpa = Qwen3ForCausalLM(config).eval()
    grouped = copy.deepcopy(sdpa)
    assert use_grouped_decode(grouped) and grouped.config._attn_implementation == NAME
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    ids, key_mask = left_pad(prompts, 0, "cpu")
    caches = [new_cache(m) for m in (sdpa, grouped)]
    with torch.inference_mode():
        tokens, mask, positions = ids, key_mask, position_ids(key_mask)
        for _ in range(6):
            logits = [m(input_ids=tokens, attention_mask=mask.long(), position_ids=positions,
                        **cache_kwargs(m, c)).logits[:, -1] for m, c in zip((sdpa, grouped), caches)]
            torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=1e-5)
            tokens = logits[0].argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones_like(tokens, dtype=torch.bool)], dim=1)
            positions = positions[:, -1:] + 1
    references = [hf_greedy(sdpa, prompt, 12)[0] for prompt in prompts]
    out, _ = baselines.autoregressive_generate(grouped, prompts, 12, set(), temperature=0.0)
    assert out == references


def test_a_soft_capped_model_keeps_its_attention():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from specdiff.lm.attention import use_grouped_decode

    model = Gemma2ForCausalLM(Gemma2Config(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=8))
    before = model.config._attn_implementation
    assert not use_grouped_decode(model) and model.config._attn_implementation == before


@pytest.mark.parametrize("name", ["qwen3_5", "lfm2", "gemma2"])
def test_rows_leave_the_batch_on_hybrid_and_sliding_window_models_too(name):
    """A hybrid model's cache (recurrent / convolution state) and a sliding-window model: rows that finish
    leave, the rest decode as HF does alone (greedy up to stated near-ties, `assert_greedy_equal`)."""
    from architectures import PROMPTS, assert_greedy_equal, build

    model = build(name)
    references = [hf_greedy(model, prompt, 16) for prompt in PROMPTS]
    eos = references[1][0][3]  # the second prompt ends early; the others may go on
    cut = [(ids[: ids.index(eos) + 1] if eos in ids else ids, logits) for ids, logits in references]
    out, _ = baselines.autoregressive_generate(model, PROMPTS, 16, {eos}, temperature=0.0, pad_token_id=0)
    assert_greedy_equal(name, out, cut)
    assert len(out[1]) <= 4
