"""`specdiff bench speedup --verifier PATH`: the bench (`specdiff.bench`) on a prompts suite end to end
at tiny sizes, on a tiny random Llama saved with a chat-template tokenizer (nothing fetched)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specdiff.bench import timer, tuner
from specdiff.cli import main
from specdiff.runs import prompts as real_bench

ROOT = Path(__file__).resolve().parents[2]
CHAT_TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}: {{ m['content'] }}<|eos|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|bos|>assistant: {% endif %}")
TINY = ["--max-new-tokens", "12", "--repeats", "1", "--problems", "3", "--tune-problems", "2",
        "--tune-max-new-tokens", "8", "--blocks", "4", "8", "--lookup-ngrams", "2", "--hf-lookup-tokens", "3", "5",
        "--threads", "1", "--json"]


def _save_tiny_llama(path: Path, seed: int) -> str:
    """A 2-layer random LlamaForCausalLM (peaked logits) with the testbed's tokenizer and a chat template."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(ROOT / "specdiff" / "zoo" / "tokenizer.json"),
                                        bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>",
                                        unk_token="<|unk|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 2.0)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    return {"verifier": _save_tiny_llama(root / "verifier", 0), "assistant": _save_tiny_llama(root / "assistant", 1)}


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit_info:
        return exit_info.code


def test_greedy_run_reports_every_row_and_tunes_on_validation_only(tiny, monkeypatch, capsys):
    from specdiff.bench import speedup
    from specdiff.eval.tasks import prompts as prompts_task

    reads, phases, tuning = [], [], [False]
    read, measure, tune = prompts_task.read, timer.measure, tuner.tune

    def spy_read(path):
        reads.append((tuning[0], Path(path).resolve()))
        return read(path)

    def spy_measure(methods, prompts, *args, **kwargs):
        phases.append((kwargs.get("phase"), {Path(p.source).resolve() for p in prompts}, list(methods)))
        return measure(methods, prompts, *args, **kwargs)

    def spy_tune(*args, **kwargs):
        tuning[0] = True
        try:
            return tune(*args, **kwargs)
        finally:
            tuning[0] = False

    monkeypatch.setattr(prompts_task, "read", spy_read)
    monkeypatch.setattr(tuner, "measure", spy_measure)
    monkeypatch.setattr(speedup, "measure", spy_measure)
    monkeypatch.setattr(speedup.tuner, "tune", spy_tune)
    test_file = real_bench.TEST_FILE.resolve()
    assert main(["bench", "speedup", "--verifier", tiny["verifier"], "--prompts-file", str(test_file),
                 "--hf-assistant", tiny["assistant"], "--dtype", "float32", *TINY]) == 0  # float32 on any CPU
    out = json.loads(capsys.readouterr().out)
    for key in ("speedup_vs_ar", "speedup_vs_hf_best_speculative", "greedy_identical", "mean_accepted", "drafter",
                "rows", "tuning"):
        assert key in out
    budget = out["tuning"]["chosen"]["spec_lookup_tree"]["config"]["tree_budget"]  # chosen on validation
    assert budget in (8, 16)  # the real preset's trees
    assert set(out["rows"]) == {"ar", "hf", "hf_lookup", "hf_assisted", "spec_lookup", f"spec_lookup_tree{budget}"}
    assert out["rows"][f"spec_lookup_tree{budget}"]["greedy_identical"] == 1.0  # trees: HF greedy, token for token
    assert out["drafter"] == "lookup" and out["row"] == "spec_lookup" and out["greedy"] is True
    lookup = out["rows"]["spec_lookup"]
    assert lookup["greedy_identical"] == 1.0 and out["greedy_identical"] == 1.0 and lookup["exact"]
    assert lookup["greedy_identical_up_to_ties"] == 1.0 and out["greedy_identical_up_to_ties"] == 1.0
    assert out["rows"]["hf"]["greedy_identical"] == 1.0  # the reference itself
    assert out["mean_accepted"] == lookup["mean_accepted"] >= 0
    assert set(lookup["per_kind"]) == {"chat", "code", "math"}  # the file's first 3 prompts, kinds in turn
    for row in out["rows"].values():
        assert row["tokens_per_s"] > 0 and row["prompts"] == 3 and "mean_accepted" in row
    ar_baseline = max(out["rows"]["ar"]["tokens_per_s"], out["rows"]["hf"]["tokens_per_s"])
    assert out["speedup_vs_ar"] == pytest.approx(lookup["tokens_per_s"] / ar_baseline)
    hf_best = max(out["rows"]["hf_lookup"]["tokens_per_s"], out["rows"]["hf_assisted"]["tokens_per_s"])
    assert out["speedup_vs_hf_best_speculative"] == pytest.approx(lookup["tokens_per_s"] / hf_best)
    # tuning: every (B, n) of the grid and each HF N, on validation prompts only, never on --prompts-file
    names = {row["name"] for row in out["tuning"]["grid"]}
    assert names == {"lookup B=4 n=2", "lookup B=8 n=2", "hf prompt lookup N=3", "hf prompt lookup N=5",
                     "lookup tree 8", "lookup tree 16"}  # the trees' budgets, at the tuned B
    assert out["rows"]["spec_lookup"]["config"]["block_size"] in (4, 8)
    assert out["rows"]["hf_lookup"]["config"]["prompt_lookup_num_tokens"] in (3, 5)
    validation = real_bench.VALIDATION_FILE.resolve()
    assert [path for during_tuning, path in reads if during_tuning] == [validation]
    assert test_file in [path for during_tuning, path in reads if not during_tuning]
    assert [(phase, sources) for phase, sources, _ in phases] == [("tune", {validation}), ("tune trees", {validation}),
                                                                  ("test", {test_file})]


def test_sampled_run_omits_greedy_identical(tiny, capsys):
    assert main(["bench", "speedup", "--verifier", tiny["verifier"], "--temperature", "0.8", "--top-p", "0.9",
                 "--prompts-file", str(real_bench.TEST_FILE), *TINY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "greedy_identical" not in out and out["greedy"] is False
    assert out["sampling"]["temperature"] == 0.8 and out["sampling"]["top_p"] == 0.9
    budget = out["tuning"]["chosen"]["spec_lookup_tree"]["config"]["tree_budget"]
    # no --hf-assistant: no assisted row; the tree at the budget chosen on validation
    assert set(out["rows"]) == {"ar", "hf", "hf_lookup", "spec_lookup", f"spec_lookup_tree{budget}"}
    assert all("greedy_identical" not in row for row in out["rows"].values())
    assert out["speedup_vs_ar"] > 0 and out["speedup_vs_hf_best_speculative"] > 0


def test_batched_rows_sit_beside_plain_decoding_at_the_same_batch(tiny, capsys):
    """`batch_sizes`: each of `batch_drafters` at its tuned configuration, B prompts per call, beside `ar_batch<N>`
    (plain decoding, B prompts per call); greedy batched rows stay HF greedy token for token (float32)."""
    assert main(["bench", "speedup", "--verifier", tiny["verifier"], "--prompts-file", str(real_bench.TEST_FILE),
                 "--drafters", "lookup", "--set", "trees=[]", "--set", "batch_sizes=[2]",
                 "--set", "batch_drafters=[\"lookup\"]", "--dtype", "float32", *TINY]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    assert {"ar_batch2", "spec_lookup_batch2"} <= set(rows)
    assert rows["ar_batch2"]["config"]["batch_size"] == rows["spec_lookup_batch2"]["config"]["batch_size"] == 2
    assert rows["spec_lookup_batch2"]["config"]["block_size"] == rows["spec_lookup"]["config"]["block_size"]
    for name in ("ar_batch2", "spec_lookup_batch2"):
        assert rows[name]["prompts"] == 3 and rows[name]["greedy_identical"] == 1.0
        assert rows[name]["new_tokens"] == rows["hf"]["new_tokens"]
    batch = out["batch"]["spec_lookup_batch2"]
    assert batch["speedup_vs_ar_batch"] == pytest.approx(rows["spec_lookup_batch2"]["tokens_per_s"]
                                                         / rows["ar_batch2"]["tokens_per_s"])
    assert _exit_code(["bench", "speedup", "--verifier", tiny["verifier"], "--drafters", "lookup",
                       "--set", "trees=[]", "--set", "batch_sizes=[2]", "--set", "batch_drafters=[\"dflash\"]",
                       *TINY]) == 2
    assert "batch_drafters names 'dflash', which is not measured" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--drafters", "masked"], "do not fit the vocabulary of the real verifier"),
    (["--drafters", "lookup,ar-drafter"], "do not fit the vocabulary of the real verifier"),
    (["--drafters", "lookup,lookup"], "names the lookup drafter twice"),
    (["--prompts-file", str(real_bench.VALIDATION_FILE)], "validation set"),
    (["--top-p", "0.9"], "give --temperature"),
])
def test_real_bench_refusals(tiny, capsys, argv, message):
    assert _exit_code(["bench", "speedup", "--verifier", tiny["verifier"], *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_prompts_file_means_the_same_on_the_testbed(capsys):
    """Issue 39: no flag is refused for the testbed; a conversation file needs a chat template, which the testbed's
    tokenizer lacks: a clear error before anything is measured."""
    assert _exit_code(["bench", "speedup", "--prompts-file", str(real_bench.TEST_FILE)]) == 2
    err = capsys.readouterr().err
    assert "no chat template" in err and "Traceback" not in err


def test_the_shipped_prompt_files_are_disjoint_and_cover_five_kinds():
    from specdiff.eval.tasks import prompts as prompts_task

    validation, test = prompts_task.read(real_bench.VALIDATION_FILE), prompts_task.read(real_bench.TEST_FILE)
    kinds = {"chat", "code", "math", "summarisation", "rewriting"}
    for problems, per_kind in ((validation, 6), (test, 8)):
        counted = {kind: sum(p.meta["kind"] == kind for p in problems) for kind in kinds}
        assert counted == {kind: per_kind for kind in kinds} and len(problems) == 5 * per_kind
    assert not {p.question for p in validation} & {p.question for p in test}


def test_tuning_picks_the_fastest_and_breaks_near_ties_by_tokens_per_round():
    rows = [{"name": "a", "tokens_per_s": 100.0, "tokens_per_round": 1.5},
            {"name": "b", "tokens_per_s": 99.0, "tokens_per_round": 2.5},  # within TIE_TOLERANCE: tied, longer rounds
            {"name": "c", "tokens_per_s": 90.0, "tokens_per_round": 4.0}]  # slower: never chosen for its rounds
    assert tuner.choose(rows)["name"] == "b"
    assert tuner.choose(rows[::2])["name"] == "a"


@pytest.fixture(scope="module")
def tiny_masked(tiny, tmp_path_factory):
    """A masked drafter distilled (a few steps) for the tiny verifier, on random stored conversations."""
    import numpy as np

    from specdiff.training import distill as distill_train
    from specdiff.zoo_tools import distill_data

    root = tmp_path_factory.mktemp("masked")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, 40, size=6).tolist() for _ in range(6)]
    responses = [rng.integers(5, 30, size=10).tolist() + [2] for _ in range(6)]
    index = {"verifier": tiny["verifier"],
             "shards": [distill_data._write_shard(root, 0, prompts, responses, [str(i) for i in range(6)], 0.0)]}
    distill_data._write_index(root, index)
    distill_train.train("masked", tiny["verifier"], root, root / "drafter", steps=2, draft_size=40, show_progress=False,
                        batch=2, block=4, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, positions=8)
    return str(root / "drafter")


def test_a_drafter_whose_effort_is_k_gets_the_tradeoff_adaptive_and_leniency_rows(tiny, tiny_masked, capsys):
    """Issue 32: the K tradeoff at the tuned B, a controller chosen on validation against the tuned fixed row, and
    leniency rows beside Lossless with what they emit (Lossless emits the verifier's law: TV 0), at K = 1 and
    (issue 40) at K = 2, each at the B of that K's lossless row."""
    assert main(["bench", "speedup", "--verifier", tiny["verifier"], "--drafters", tiny_masked, "--temperature", "0.8",
                 "--prompts-file", str(real_bench.TEST_FILE), *TINY, "--steps", "1", "2", "--tradeoff-steps", "1", "2",
                 "--leniency", "linear:1", "typical:0.2", "--leniency-steps", "1", "2",
                 "--controllers", "confidence:floor=0.3"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows, tuned = out["rows"], out["tuning"]["chosen"]["spec_masked"]["config"]
    assert [entry["K"] for entry in out["k_tradeoff"]["masked"]] == [1, 2]
    for entry in out["k_tradeoff"]["masked"]:  # every K at its B fastest on validation, measured beside the others
        grid = [row for row in out["tuning"]["grid"] if row["row"] == "spec_masked" and row["config"]["steps"] == entry["K"]]
        assert rows[entry["row"]]["config"]["block_size"] == tuner.choose(grid)["config"]["block_size"]
        assert rows[entry["row"]]["config"]["steps"] == entry["K"] and entry["tokens_per_s"] > 0
    assert [entry["K"] for entry in out["leniency"]["masked"]] == [1, 1, 1, 2, 2, 2]
    efforts = {entry["K"]: entry["row"] for entry in out["k_tradeoff"]["masked"]}
    for k in (1, 2):
        lenient = {entry["rule"]: entry for entry in out["leniency"]["masked"] if entry["K"] == k}
        assert set(lenient) == {"lossless", "linear 1", "typical 0.2"} and lenient["lossless"]["row"] == efforts[k]
        assert lenient["lossless"]["emitted_tv"] == 0 and lenient["lossless"]["tokens_per_call_vs_lossless"] == 1
        assert lenient["linear 1"]["emitted_tv"] > 0.05  # Linear(1) emits q itself: far from a random verifier's p
        assert lenient["linear 1"]["tokens_per_call_vs_lossless"] > 1  # and accepts every draft (longer rounds)
        for entry in lenient.values():  # at the B of that K's lossless row
            assert 0 <= entry["greedy_agreement"] <= 1 and rows[entry["row"]]["config"]["steps"] == k
            assert rows[entry["row"]]["config"]["block_size"] == rows[efforts[k]]["config"]["block_size"]
    adaptive = out["tuning"]["chosen"]["spec_masked_adaptive"]["config"]
    assert adaptive["controller"] == "confidence:floor=0.3"
    assert any(row["row"] == "spec_masked_adaptive" for row in out["tuning"]["grid"])  # chosen on validation
    assert out["speedup_adaptive_vs_fixed"]["masked"] == pytest.approx(
        rows["spec_masked_adaptive"]["tokens_per_s"] / rows["spec_masked"]["tokens_per_s"])
