"""GSM8K: extraction and verdicts equal lm-evaluation-harness's, loading a local JSONL, prompts.

The reference below is the harness's own code path, rewritten here so that the test needs no
lm_eval install (lm_eval 0.4.13: tasks/gsm8k/gsm8k.yaml for the regexes, `until` and metric
settings; filters/extraction.py RegexFilter.apply for the filter; api/metrics.py
exact_match_hf_evaluate for the metric). Where lm_eval is installed, `test_reference_is_the_harness`
checks the rewrite against its RegexFilter.
"""
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdiff.eval.tasks import BOXED_INSTRUCTION, DataFileError, MissingDataError, Problem, gsm8k

# --- the harness, rewritten (see the module docstring) ---------------------------------------
HARNESS_STRICT = r"#### (\-?[0-9\.\,]+)"
HARNESS_FLEXIBLE = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
HARNESS_IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]
HARNESS_UNTIL = ["Question:", "</s>", "<|im_end|>"]


def harness_regex_filter(resp, regex_pattern, group_select=0, fallback="[invalid]"):
    match = re.compile(regex_pattern).findall(resp)
    if match:
        match = match[group_select]
        if isinstance(match, tuple):
            match = [m for m in match if m]
            match = match[0] if match else fallback
        match = match.strip()
    else:
        match = fallback
    return match


def harness_exact_match(prediction, reference):
    for s in HARNESS_IGNORE:
        prediction, reference = re.sub(s, "", prediction), re.sub(s, "", reference)
    return prediction.lower() == reference.lower()


def harness_verdict(completion, answer):
    """strict-match, falling back to flexible-extract when strict finds nothing."""
    for stop in HARNESS_UNTIL:  # generate_until stops there
        completion = completion.split(stop)[0]
    extracted = harness_regex_filter(completion, HARNESS_STRICT)
    if extracted == "[invalid]":
        extracted = harness_regex_filter(completion, HARNESS_FLEXIBLE, group_select=-1)
    return harness_exact_match(extracted, answer)
# ----------------------------------------------------------------------------------------------


ANSWER = "She has 3 + 15 = 18 apples.\n#### 18"
TRICKY = [  # (completion, reference answer, the harness's verdict)
    ("3 + 15 = 18.\n#### 18", ANSWER, True),
    ("#### 18 and later #### 19", ANSWER, True),              # the first ####
    ("#### 19 but really 18", ANSWER, False),
    ("####18", ANSWER, True),                                 # no space: strict misses, the last number wins
    ("So she has 18.", ANSWER, True),                         # trailing period dropped
    ("So she has 18...", ANSWER, False),                      # only one period is dropped
    ("She pays $18.", ANSWER, True),                          # $ dropped
    ("The total is 18.0", ANSWER, False),                     # strings, not values
    ("18 apples, then 5 left", "#### 5", True),               # a lone digit is a number too
    ("1, 2, 3", "#### 3", True),
    ("#### 1,234", "#### 1234", True),                        # commas dropped on both sides
    ("#### $1,234.00", "#### 1234", False),                   # strict misses $, flexible keeps .00
    ("Answer: 5,000,000", "x\n#### 5,000,000", True),
    ("#### -5", "#### -5", True),
    ("#### - 5", "#### -5", False),
    ("it is −5", "#### -5", False),                           # a unicode minus is not a minus
    ("\\boxed{72}", "#### 72", True),
    ("\\boxed{72} from 8 * 9 = 72 over 2 days", "#### 72", False),  # the last number, not the boxed one
    ("#### 18\n\nQuestion: and next?\n#### 3", ANSWER, True),
    ("Question: 5?\n#### 18", ANSWER, False),                 # cut at the stop string: nothing left
    ("", ANSWER, False),
    ("no numbers at all", ANSWER, False),
    ("18", "18", True),                                       # a bare reference answer
]


@pytest.mark.parametrize("completion, answer, verdict", TRICKY)
def test_tricky_completions_match_the_harness(completion, answer, verdict):
    assert harness_verdict(completion, answer) is verdict  # the fixed expectation...
    problem = Problem(question="q", answer=answer, target=gsm8k.normalize(answer))
    [score] = gsm8k.score([problem], [completion])
    assert score.correct is verdict                        # ...and specdiff agrees


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789$,.-# \nabQ:x", max_size=40), st.sampled_from(["#### 18", "#### 1,800", "#### -3",
                                                                                "#### 0.5"]))
def test_random_completions_match_the_harness(completion, answer):
    problem = Problem(question="q", answer=answer, target=gsm8k.normalize(answer))
    assert gsm8k.score([problem], [completion])[0].correct is harness_verdict(completion, answer)


def test_reference_is_the_harness():
    extraction = pytest.importorskip("lm_eval.filters.extraction", reason="lm_eval not installed")
    texts = [c for c, _, _ in TRICKY]
    for pattern, group in ((HARNESS_STRICT, 0), (HARNESS_FLEXIBLE, -1)):
        theirs = extraction.RegexFilter(regex_pattern=pattern, group_select=group).apply([[t] for t in texts], None)
        assert [r[0] for r in theirs] == [harness_regex_filter(t, pattern, group) for t in texts]


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_load(tmp_path):
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1:,}"} for i in range(998, 1003)]
    path = write_jsonl(tmp_path / "test.jsonl", rows)
    problems = gsm8k.load(path=str(path))
    assert [p.target for p in problems] == ["999", "1000", "1001", "1002", "1003"]
    assert problems[1].answer == rows[1]["answer"]
    assert gsm8k.load(2, path=str(path)) == problems[:2]
    assert gsm8k.score(problems[:2], ["#### 999", "#### 1,000"])[1].correct


def test_default_place_and_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDIFF_DATA_DIR", str(tmp_path))
    with pytest.raises(MissingDataError) as error:
        gsm8k.load()
    message = str(error.value)
    assert str(tmp_path / "gsm8k" / "test.jsonl") in message and "JSONL" in message and '"question"' in message
    (tmp_path / "gsm8k").mkdir()
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"question": "q", "answer": "#### 1"}])
    assert len(gsm8k.load()) == 1


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"question": "q"}), "no string field 'answer'"),
    (json.dumps({"question": "q", "answer": 7}), "no string field 'answer'"),
    (json.dumps(["q", "a"]), "no string field 'question'"),
    (json.dumps({"question": "q", "answer": "no final line"}), "no '#### <number>'"),
])
def test_malformed_file_names_path_and_line(tmp_path, line, message):
    good = json.dumps({"question": "q", "answer": "#### 1"})
    path = write_jsonl(tmp_path / "bad.jsonl", [good, "", good, line, good])
    with pytest.raises(DataFileError, match=re.escape(f"{path}:4: ") + ".*" + re.escape(message)):
        gsm8k.load(path=str(path))


def test_n(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "answer": "#### 1"}] * 3)
    for n in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="positive integer"):
            gsm8k.load(n, path=str(path))
    with pytest.raises(ValueError, match="only 3"):
        gsm8k.load(4, path=str(path))
    empty = write_jsonl(tmp_path / "empty.jsonl", [""])
    with pytest.raises(DataFileError, match="no problems"):
        gsm8k.load(path=str(empty))


def test_prompts(chat_tokenizer):
    problem = Problem(question="Tom has 3 apples. How many?", answer="#### 3", target="3")
    assert gsm8k.build_prompt(problem) == "Question: Tom has 3 apples. How many?\nAnswer:"
    assert gsm8k.build_prompt(problem, boxed=True) == f"{BOXED_INSTRUCTION}\n{gsm8k.build_prompt(problem)}"
    assert gsm8k.build_prompt(problem, chat_tokenizer) == "<|user|>Tom has 3 apples. How many?\n<|assistant|>"
    assert gsm8k.build_prompt(problem, chat_tokenizer, boxed=True) == (
        f"<|user|>{BOXED_INSTRUCTION}\nTom has 3 apples. How many?\n<|assistant|>")
