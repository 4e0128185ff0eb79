"""Distillation data (issue 31; `specdiff.zoo_tools.distill_data`): the chat template's user prefix, the
filters (unfinished, too short, repeated, held-out), uint16 shards and their index, resuming, and refusing
another verifier's data. The generation itself is replaced by a fixed one here; the real command's output
is the committed data under data/distill/ (docs/distill.md)."""
from __future__ import annotations

import json

import pytest

from specdiff.zoo_tools import distill_data


def _tiny_verifier(path, tok):
    """A one-layer Llama over the testbed tokenizer, saved with it in `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def verifier_dir(tmp_path):
    from specdiff import zoo

    tok = zoo.tokenizer()
    original = tok.chat_template
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    path = _tiny_verifier(tmp_path / "tiny", tok)
    tok.chat_template = original
    return str(path), tok


def test_the_user_prefix_is_the_template_before_the_content(verifier_dir):
    from specdiff import models

    assert distill_data.user_prefix(models.load_tokenizer(verifier_dir[0])) == "<|user|>"


def test_shards_keep_finished_new_turns_that_are_not_held_out_and_resume(verifier_dir, tmp_path, monkeypatch):
    path, tok = verifier_dir
    eos = tok.eos_token_id
    words = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    sentence = "There are 12 rocks in each of the 7 bags that Omar has"
    held_out = tmp_path / "held.jsonl"  # a held-out prompt sharing 8 words in a row with the first turn
    held_out.write_text(json.dumps({"prompt": "Look: " + tok.decode(words(sentence))}) + "\n")
    turns = [words(sentence + " today") + [eos],                                                 # held out: 8-gram
             words("How many rocks does Omar have") + [eos],                                   # kept
             words("How many rocks does Omar have") + [eos],                                   # a repeat
             words("unfinished turn with no end"),                                             # no EOS
             words("hi") + [eos]]                                                              # too short
    calls = []

    def fake_generate(model, rows, max_new_tokens, eos_token_ids, *sampling, generator=None, pad_token_id=0, **kw):
        calls.append(len(rows))
        if len(calls) % 2 == 1:  # the user turns
            return [list(t) for t in turns[: len(rows)]], 0.0
        return [[7, 8, eos] for _ in rows], 0.0  # the responses

    monkeypatch.setattr("specdiff.engine.baselines.autoregressive_generate", fake_generate)
    out = tmp_path / "data"
    index = distill_data.generate(out, path, shards=1, samples=5, held_out=[str(held_out)], show_progress=False,
                                  passages=0)
    assert index["conversations"] == 1 and calls == [5, 1]
    (prompt, response), = distill_data.load_shards(out)
    assert response == [7, 8, eos] and "rocks does Omar have" in tok.decode(prompt)  # the template around it
    first = (out / "shard-00000.npz").read_bytes()
    index = distill_data.generate(out, path, shards=2, samples=5, show_progress=False, passages=0)  # resumes at shard 1
    assert (out / "shard-00000.npz").read_bytes() == first and len(index["shards"]) == 2
    assert index["shards"][1]["conversations"] == 0  # its turns repeat shard 0's or are filtered
    assert len(index["prompt_set_sha256"]) == 64
    with pytest.raises(ValueError, match="holds data of verifier"):
        distill_data.generate(out, "another-verifier", shards=3, show_progress=False)


def test_uint16_storage_refuses_larger_ids(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        distill_data._write_shard(tmp_path, 0, [[70_000]], [[1]], ["x"], 0.0)
    assert not list(tmp_path.iterdir())


def test_a_verifier_without_a_chat_template_gets_raw_prompts_and_is_told(tmp_path, monkeypatch):
    from specdiff import zoo

    tok = zoo.tokenizer()
    assert tok.chat_template is None  # the testbed's tokenizer has none
    path = _tiny_verifier(tmp_path / "base", tok)
    words = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    seen = []

    def fake_generate(model, rows, max_new_tokens, eos_token_ids, *sampling, generator=None, pad_token_id=0, **kw):
        seen.append([list(r) for r in rows])
        if len(seen) == 1:  # the user turns: one unfinished (kept when raw), one too short
            return [words("Omar has 12 bags of rocks in his shed"), words("hi")], 0.0
        return [[7, 8] for _ in rows], 0.0

    monkeypatch.setattr("specdiff.engine.baselines.autoregressive_generate", fake_generate)
    assert distill_data.user_prefix(tok) is None
    with pytest.warns(UserWarning, match="no chat template: the prompts are used raw"):
        index = distill_data.generate(tmp_path / "data", str(path), shards=1, samples=2, show_progress=False,
                                      passages=0)
    assert seen[0] == [[tok.bos_token_id]] * 2  # written from BOS alone, no template
    assert index["raw_prompts"] is True and index["conversations"] == 1
    (prompt, response), = distill_data.load_shards(tmp_path / "data")
    written = tok.decode(words("Omar has 12 bags of rocks in his shed"), skip_special_tokens=True).strip()
    assert tok.decode(prompt, skip_special_tokens=True).strip() == written and "rocks" in written
    assert response == [7, 8]


def test_recipe_2_adds_passages_long_tasks_greedy_halves_drops_loops_and_checks_shards(verifier_dir, tmp_path,
                                                                                        monkeypatch):
    """Passages written by the verifier become long inputs; every other row is greedy; a response that repeats a
    10-gram 3 times is dropped and counted; a shard whose file changes fails its checksum: load_shards refuses it
    naming the file, and the next `generate` regenerates it."""
    path, tok = verifier_dir
    eos = tok.eos_token_id
    words = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    passage = [40 + (7 * i) % 200 for i in range(130)]  # 130 tokens, no 10-gram repeated
    loop = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16] * 3
    calls = []

    def fake_generate(model, rows, max_new_tokens, eos_token_ids, *sampling, generator=None, pad_token_id=0, **kw):
        assert [len(r) for r in rows] == sorted(len(r) for r in rows)  # a bucket of similar prompt lengths
        calls.append((len(rows), kw.get("greedy_rows"), rows, kw.get("stop_row")))
        if len(calls) % 3 == 1:  # the user turns
            return [words(f"How many rocks does Omar have in bag {i}") + [eos] for i in range(len(rows))], 0.0
        if len(calls) % 3 == 2:  # the passages: one loops, one is too short, the rest are used
            return [loop, words("short one") + [eos]] + [passage + [eos]] * (len(rows) - 2), 0.0
        return [[7, 8, eos] if i else loop for i in range(len(rows))], 0.0  # the responses: the first loops

    monkeypatch.setattr("specdiff.engine.baselines.autoregressive_generate", fake_generate)
    out = tmp_path / "data"
    index = distill_data.generate(out, path, shards=1, samples=3, passages=4, show_progress=False)
    shard = index["shards"][0]
    assert calls[0][1] is None and calls[0][3] is None  # user turns: all sampled, never stopped early
    assert sorted(calls[1][1]) == [False, False, True, True]  # passages: halves greedy
    assert calls[1][3] is calls[2][3] is distill_data.repeats_itself  # passages and responses stop once looping
    assert shard["recipe"] == 2 and shard["dropped"]["repetitive"] == 2  # the looping passage and response
    assert shard["kinds"] == {"magpie": 2, "passage": 3, "long_task": 2}  # one magpie answer dropped (it looped)
    data = __import__("numpy").load(out / shard["file"])
    assert len(data["greedy"]) == len(data["kind"]) == shard["conversations"] == 7
    decoded_greedy = {tuple(row): flag for _, flags, rows, _ in calls[1:3] for row, flag in zip(rows, flags)}
    starts = __import__("numpy").cumsum([0, *(data["prompt_lengths"] + data["response_lengths"])[:-1]])
    for start, length, flag in zip(starts, data["prompt_lengths"], data["greedy"]):
        assert decoded_greedy[tuple(data["tokens"][start:start + length].tolist())] == bool(flag)  # as recorded
    conversations = distill_data.load_shards(out)
    long_prompts = [p for p, _ in conversations if len(p) > 100]
    assert len(long_prompts) == 2  # the passage inside the task prompt
    (out / shard["file"]).write_bytes((out / shard["file"]).read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(distill_data.ShardChecksumError, match="shard-00000.npz"):
        distill_data.load_shards(out)
    index = distill_data.generate(out, path, shards=1, samples=3, passages=4, show_progress=False)
    assert distill_data.load_shards(out)  # regenerated, checksum holds again


def test_spec_bench_questions_are_held_out():
    texts = distill_data.spec_bench_texts()
    assert len(texts) >= 480  # every question, both turns where there are two
    grams = distill_data.held_out_ngrams()
    assert distill_data._ngrams(texts[0]) <= grams
    assert distill_data.repeats_itself([1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3)
    assert not distill_data.repeats_itself(list(range(40)))


def test_a_looping_response_is_cut_before_its_repetition_or_dropped_when_little_remains():
    head = list(range(100, 140))  # 40 tokens that do not repeat
    loop = list(range(10, 22)) * 3
    assert distill_data.cut_repetition(head + loop) == head + loop[:12]  # the first instance kept
    assert distill_data.cut_repetition(list(range(5)) + loop) is None  # 17 tokens left: dropped
    assert distill_data.cut_repetition(head) == head


def test_stopping_a_response_once_it_repeats_itself_keeps_the_same_cut():
    """The generator stops a response at the first check where `repeats_itself` holds (every few tokens); the
    cut of that prefix is the cut of the whole response, whatever would have followed."""
    import random

    rng = random.Random(4)
    checked = 0
    for _ in range(300):
        head = [rng.randrange(50, 400) for _ in range(rng.randrange(0, 60))]
        loop = [rng.randrange(0, 40) for _ in range(rng.randrange(1, 14))]
        tail = [rng.randrange(0, 400) for _ in range(rng.randrange(0, 40))]
        ids = head + loop * rng.randrange(1, 12) + tail
        first = next((n for n in range(len(ids) + 1) if distill_data.repeats_itself(ids[:n])), None)
        if first is None:
            continue
        checked += 1
        for n in (first, min(first + 7, len(ids)), len(ids)):
            assert distill_data.cut_repetition(ids[:n]) == distill_data.cut_repetition(ids)
    assert checked > 100
