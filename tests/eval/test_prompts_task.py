"""The `prompts` task and `--prompts-file` (issue 30, item 3): a user's JSONL of {"prompt"} or {"messages"}
lines, other keys carried, bad lines named by number, and no scoring without references."""
from __future__ import annotations

import json

import pytest

from specdiff.eval.tasks import DataFileError, get_task
from specdiff.eval.tasks import prompts as prompts_task


def _file(tmp_path, lines):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_prompts_and_conversations_with_carried_keys(tmp_path):
    path = _file(tmp_path, [{"prompt": "2 + 2 =", "kind": "math"}, "",
                            {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}], "kind": "chat", "id": "c1"}])
    problems = get_task("prompts").load(None, path=path)
    assert [p.meta.get("kind") for p in problems] == ["math", "chat"]
    assert not prompts_task.is_conversation(problems[0]) and prompts_task.is_conversation(problems[1])
    assert problems[1].id == "c1" and not prompts_task.has_references(problems)
    assert prompts_task.build_prompt(problems[0]) == "2 + 2 ="
    assert prompts_task.build_prompt(problems[1]) == "Be brief.\nHi\n"  # no chat template: the contents
    assert len(get_task("prompts").load(1, path=path)) == 1 and len(get_task("prompts").load(50, path=path)) == 2


@pytest.mark.parametrize("line, message", [
    ("not json", "not a JSON object"),
    ({"text": "x"}, "either 'prompt'"),
    ({"prompt": "x", "messages": []}, "either 'prompt'"),
    ({"messages": [{"role": "system", "content": "x"}]}, "no user turn"),
    ({"messages": [{"role": "user"}]}, "string 'role' and 'content'"),
    ({"prompt": ""}, "non-empty string"),
])
def test_a_bad_line_is_named_by_its_number(tmp_path, line, message):
    path = _file(tmp_path, [{"prompt": "fine"}, line])
    with pytest.raises(DataFileError, match=message) as error:
        prompts_task.read(path)
    assert f"{path}:2:" in str(error.value)


def test_targets_are_scored_by_containment(tmp_path):
    path = _file(tmp_path, [{"prompt": "Capital of France?", "target": "Paris"}])
    problems = prompts_task.read(path)
    assert prompts_task.has_references(problems)
    assert [s.correct for s in prompts_task.score(problems * 2, ["It is  Paris.", "Lyon"])] == [True, False]


def test_generate_reads_conversations_and_carries_keys(tmp_path):
    from types import SimpleNamespace

    from specdiff.commands.generate import read_prompts

    path = _file(tmp_path, [{"messages": [{"role": "user", "content": "Hi"}], "kind": "chat"}, {"prompt": "x"}])
    args = SimpleNamespace(prompts=["a\\nb"], chat=["hello"], prompts_file=str(path))
    prompts = read_prompts(args)
    assert prompts == ["a\nb", [{"role": "user", "content": "hello"}], [{"role": "user", "content": "Hi"}], "x"]
    assert args.prompt_extras == [{}, {}, {"kind": "chat"}, {}]
    bad = _file(tmp_path, [{"prompt": "x"}, {"messages": [{"role": "assistant", "content": "x"}]}])
    with pytest.raises(ValueError, match=r"prompts.jsonl:2: the conversation has no user turn"):
        read_prompts(SimpleNamespace(prompts=[], chat=None, prompts_file=str(bad)))


def test_eval_without_references_reports_speed_and_says_nothing_was_scored(tmp_path, capsys):
    from specdiff.cli import main

    path = _file(tmp_path, [{"prompt": "3 + 4 =\n", "kind": "math"}, {"prompt": "5 + 1 =\n", "kind": "math"}])
    assert main(["eval", "--prompts-file", str(path), "--max-new-tokens", "6", "-K", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "prompts" and out["scored"] is False and out["accuracy"] is None
    assert "nothing was scored" in out["note"] and out["tokens_per_s"] > 0 and "mean_accepted" in out
    assert [r["kind"] for r in out["records"]] == ["math", "math"]


def test_a_conversation_without_a_user_turn_is_refused_by_the_engine():
    import specdiff as sd
    from specdiff import zoo

    verifier = zoo.load("verifier")
    tok = zoo.tokenizer()
    gen = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(verifier), sd.Verifier(verifier), tokenizer=tok)
    original = tok.chat_template
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    try:
        with pytest.raises(ValueError, match="no user turn"):
            gen.generate([[{"role": "system", "content": "x"}]], max_new_tokens=2)
        out = gen.generate([[{"role": "user", "content": "1 + 1 ="}]], max_new_tokens=2)
        assert len(out.token_ids[0]) == 2
    finally:
        tok.chat_template = original
