"""Issue 41, item 4: free drafts. The datastore drafter (REST: a suffix index over the verifier's own
conversations) and the hybrid proposer (free drafts where a long match exists, the model drafter otherwise):
the index against brute force, the drafts' rule, exactness in law (sampled, one batched call, the TV and χ²
bounds of tests/tiny_models.py) and greedy identity with plain decoding at batch 1 and 4."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_models import LENGTH, PROMPT, ROWS, SAMPLING, VOCAB, assert_matches_exact, exact_continuations, tiny_qwen3

import specdiff as sd
from specdiff.drafters import datastore
from specdiff.drafters.datastore import DatastoreDrafter, SuffixIndex
from specdiff.drafters.hybrid import HybridDrafter
from specdiff.drafters.lookup import PromptLookupDrafter


def _brute_range(tokens: np.ndarray, gram: list[int]) -> set[int]:
    n = len(gram)
    return {i for i in range(len(tokens) - n + 1) if tokens[i:i + n].tolist() == gram}


def test_the_suffix_index_finds_every_occurrence_and_nothing_else():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 5, size=3000).astype(np.int32)
    tokens[rng.choice(3000, 60, replace=False)] = datastore.SEPARATOR
    index = SuffixIndex(tokens)
    assert sorted(index.order.tolist()) == list(range(3000))  # a permutation
    for n in (1, 2, 3, 5, 8):
        for start in rng.choice(2990, 25):
            gram = tokens[start:start + n].tolist()
            if datastore.SEPARATOR in gram:
                continue
            lo, hi = index._range(gram)
            assert set(index.order[lo:hi].tolist()) == _brute_range(tokens, gram), (n, gram)
    assert index._range([9, 9]) == (index._range([9, 9])[0],) * 2  # absent: an empty range


def test_the_longest_match_wins_and_the_draft_is_the_heaviest_path():
    # three conversations: after (1, 2) comes 3 4 twice and 3 5 once; after (7, 1, 2) comes 9
    tokens = np.array([1, 2, 3, 4, -1, 1, 2, 3, 4, -1, 1, 2, 3, 5, -1, 7, 1, 2, 9, 9, -1], dtype=np.int32)
    drafter = DatastoreDrafter(SuffixIndex(tokens), max_ngram=4, min_ngram=2)
    draft = drafter.propose(torch.tensor([[0, 6, 1, 2], [0, 7, 1, 2], [0, 0, 8, 8]]), torch.ones(3, 4, dtype=torch.bool), 4)
    assert draft.probs is None and draft.lengths.tolist() == [2, 2, 0]
    assert draft.tokens[0, :2].tolist() == [3, 4]  # (1, 2) -> the majority continuation, ends at the separator
    assert draft.tokens[1, :2].tolist() == [9, 9]  # (7, 1, 2) is longer: its own continuation
    assert drafter.match_lengths == [2, 3, 0]
    supported = DatastoreDrafter(SuffixIndex(tokens), max_ngram=4, min_ngram=2, min_support=2)
    assert supported.propose(torch.tensor([[6, 1, 2]]), torch.ones(1, 3, dtype=torch.bool), 4).lengths.tolist() == [2]
    with pytest.raises(ValueError, match="min_ngram"):
        DatastoreDrafter(SuffixIndex(tokens), max_ngram=1, min_ngram=2)


def test_a_data_folder_becomes_a_datastore_cached_by_its_checksums(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    np.savez(folder / "shard-00000.npz", tokens=np.array([5, 6, 7, 8, 5, 6, 9], dtype=np.uint16),
             prompt_lengths=np.array([2, 2]), response_lengths=np.array([2, 1]))
    (folder / "index.json").write_text(json.dumps({"shards": [{"file": "shard-00000.npz", "sha256": "abc"}]}))
    index = datastore.from_shards(folder, cache_dir=tmp_path / "cache")
    assert index.tokens.tolist() == [5, 6, 7, 8, -1, 5, 6, 9, -1]  # prompt + response, a separator after each
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1
    again = datastore.from_shards(folder, cache_dir=tmp_path / "cache")
    assert again.order.tolist() == index.order.tolist()
    with pytest.raises(FileNotFoundError, match="index.json"):
        datastore.from_shards(tmp_path / "missing")
    with pytest.raises(ValueError, match="specdiff distill data --verifier nobody"):
        datastore.data_folder("nobody")


def _datastore_of(model, prompt, rows: int = 40, length: int = 12, seed: int = 1) -> SuffixIndex:
    """A datastore of the model's own sampled continuations of the prompt (its regenerated conversations)."""
    torch.manual_seed(seed)
    out = model.generate(torch.tensor([prompt] * rows), max_new_tokens=length, do_sample=True, temperature=1.0,
                         top_k=0, pad_token_id=0)
    tokens = np.concatenate([np.append(row.numpy(), datastore.SEPARATOR) for row in out]).astype(np.int32)
    return SuffixIndex(tokens)


def test_datastore_drafts_are_point_masses_and_exact_in_law():
    verifier_model = tiny_qwen3(VOCAB, seed=0, layers=2)
    drafter = DatastoreDrafter(_datastore_of(verifier_model, PROMPT), max_ngram=6, min_ngram=1)
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier_model, **SAMPLING), block_size=3,
                                  proposal="marginal", eos_token_id=[], batch_size=ROWS)
    assert gen.proposal == "point_mass" and gen.exact
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    assert sum(sum(s.accepted) for s in out.stats) > ROWS // 10  # its drafts were accepted
    assert_matches_exact(out.token_ids, exact_continuations(verifier_model, PROMPT, LENGTH, **SAMPLING), "datastore")


def _hybrid(verifier_model, drafter_model, index, min_match=5):
    model_drafter = sd.AutoregressiveDrafter(drafter_model, **SAMPLING)
    return HybridDrafter(model_drafter, [PromptLookupDrafter(), DatastoreDrafter(index, max_ngram=6, min_ngram=1)],
                         min_match=min_match)


def test_the_hybrid_is_exact_in_law_with_free_and_model_rounds_mixed_in_a_batch():
    """Rows of one batch take free drafts (q a point mass) or the AR drafter's (its q) round by round."""
    verifier_model, drafter_model = tiny_qwen3(VOCAB, seed=0, layers=2), tiny_qwen3(VOCAB, seed=5)
    drafter = _hybrid(verifier_model, drafter_model, _datastore_of(verifier_model, PROMPT, rows=3))  # some rows match
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier_model, **SAMPLING), block_size=3,
                                  eos_token_id=[], batch_size=ROWS)
    assert gen.proposal == "marginal" and gen.exact
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    assert drafter.mixed_rounds > 0 and drafter.free_rounds < drafter.rounds  # free and model rows in one batch
    assert_matches_exact(out.token_ids, exact_continuations(verifier_model, PROMPT, LENGTH, **SAMPLING), "hybrid")


def test_greedy_datastore_and_hybrid_equal_plain_greedy_decoding_at_batch_1_and_4():
    from architectures import build, hf_greedy

    model = build("llama")
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10], [11, 12, 13, 11, 12], [14]]
    references = [hf_greedy(model, p, new_tokens=24)[0] for p in prompts]
    stored = np.concatenate([np.array(p + r + [datastore.SEPARATOR]) for p, r in zip(prompts[:2], references[:2])])
    index = SuffixIndex(stored.astype(np.int32))  # the first two rows' answers are in the datastore
    for batch_size in (1, 4):
        for drafter in (DatastoreDrafter(index, max_ngram=4, min_ngram=2),
                        HybridDrafter(sd.AutoregressiveDrafter(build("llama", seed=1), temperature=0.0),
                                      [DatastoreDrafter(index, max_ngram=4, min_ngram=2)], min_match=2)):
            gen = sd.SpeculativeGenerator(drafter, sd.Verifier(model, temperature=0.0), block_size=4,
                                          eos_token_id=[], batch_size=batch_size)
            out = gen.generate(prompts, max_new_tokens=24)
            assert out.token_ids == references, type(drafter).__name__
            assert sum(sum(s.accepted) for s in out.stats[:2]) >= 24  # the stored answers were drafted
