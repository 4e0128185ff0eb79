"""Issues 39 (item 1) and 52 (item 2): outside the kind modules no code chooses by a drafter kind's name, under any
variable name. What differs between kinds lives on its `KindSpec` (`specdiff.drafters.registry`); what a demo or
a bench does with a kind lives in their tables (`specdiff/runs/demo.toml`, `specdiff/bench/kinds.toml`).

The check reads every module of the package and of `tools/` as a syntax tree and flags:
- each comparison (==, !=, in, not in) whose one side is a kind's name or alias ("masked", "ar", ...), or a
  tuple / list / set holding one;
- each membership test (in, not in) against a module-level name bound to such a tuple / list / set;
- each `choices=` keyword (argparse) whose value holds a kind's name;
- each module-level table keyed by a kind's name: a dict literal (or `dict(...)` call) with a kind's name among its
  keys, bound to a module-level name (a kind's recipe, model or scorer is found through its `KindSpec`, e.g. its
  `distilled_role`, not looked up by its name).
The exemptions are named: the kind modules themselves, the continuous half (its drafters are not these kinds),
comparisons whose other side is one of `OTHER_VOCABULARIES`, where the same word means something else ("block"
verification, a prefix cache's "block" attention), and the tables of `OBJECTIVE_TABLES`, keyed by a training
objective's name ("ar", "block", "dflash" objectives), another vocabulary."""
from __future__ import annotations

import ast
from pathlib import Path

import specdiff
from specdiff.drafters import registry

ROOT = Path(specdiff.__file__).parent
TOOLS = ROOT.parent / "tools"
KIND_MODULES = {"drafters/registry.py", "drafters/masked.py", "drafters/block.py", "drafters/uniform.py",
                "drafters/dflash.py", "drafters/autoregressive.py", "drafters/lookup.py", "drafters/datastore.py",
                "drafters/hybrid.py"}
# "block" verification / attention; "hybrid" verifiers (recurrent-state layers), not the hybrid proposer
OTHER_VOCABULARIES = {"method", "rejection_sample_method", "committed_attention", "layer_type", "architecture"}
# tables keyed by a training objective's name: the testbed recipes' objectives (`zoo.configs.TRAINING[name]
# ["objective"]`: training.zoo, training.build) and the losses (`training.objectives`)
OBJECTIVE_TABLES = {"ZOO_OBJECTIVES", "ZOO_BUILDERS", "OBJECTIVES"}


def _kind_words() -> set[str]:
    return {name for spec in registry.specs() for name in (spec.name, *spec.aliases)}


def _literals(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _kind_collections(tree, words: set[str]) -> set[str]:
    """Module-level names bound to a tuple / list / set literal holding a kind's name."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if any(word in words for word in _literals(node.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _keys(node) -> list[str]:
    """The string keys of a dict literal or of a `dict(...)` call's keywords."""
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if isinstance(node, ast.Call) and _name(node.func) == "dict":
        return [keyword.arg for keyword in node.keywords if keyword.arg]
    return []


def _kind_tables(tree, source: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, 'NAME = {...}' shortened) of every module-level table keyed by a kind's name (module docstring)."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            keys = [key for key in _keys(node.value) if key in words]
            if keys and not set(names) & OBJECTIVE_TABLES:
                out.append((node.lineno, f"{' = '.join(names)} keyed by {', '.join(keys)}"))
    return out


def kind_comparisons(root: Path = ROOT, prefix: str = "") -> list[str]:
    """'path:line: source' of every choice by a kind name outside the exemptions (module docstring)."""
    words, found = _kind_words(), []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not prefix and (relative in KIND_MODULES or relative.startswith("continuous/")):
            continue
        source = path.read_text()
        tree = ast.parse(source)
        collections = _kind_collections(tree, words)
        found += [f"{prefix}{relative}:{line}: {text}" for line, text in _kind_tables(tree, source, words)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                flags = {flag.lstrip("-").replace("-", "_") for arg in node.args for flag in _literals(arg)}
                for keyword in node.keywords:
                    if keyword.arg == "choices" and not flags & OTHER_VOCABULARIES and any(
                            word in words for word in _literals(keyword.value)):
                        found.append(f"{prefix}{relative}:{keyword.value.lineno}: "
                                     f"choices={ast.get_source_segment(source, keyword.value)}")
                continue
            if not isinstance(node, ast.Compare) or not all(
                    isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                continue
            sides = [node.left, *node.comparators]
            if any(_name(side) in OTHER_VOCABULARIES for side in sides):
                continue
            member = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                isinstance(side, ast.Name) and side.id in collections for side in node.comparators)
            if member or any(word in words for side in sides for word in _literals(side)):
                found.append(f"{prefix}{relative}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_no_kind_is_compared_with_a_string_literal_outside_the_kind_modules():
    found = kind_comparisons() + kind_comparisons(TOOLS, "tools/")
    assert found == [], "compare through the kind's KindSpec (or a recipe table) instead:\n" + "\n".join(found)


def test_the_check_finds_a_planted_comparison(tmp_path):
    (tmp_path / "planted.py").write_text("def f(drafter_name):\n    return drafter_name in ('x', 'dflash')\n"
                                         "def g(method):\n    return method == 'block'\n")
    assert kind_comparisons(tmp_path) == ["planted.py:2: drafter_name in ('x', 'dflash')"]


def test_the_check_finds_planted_choices_and_membership_tests(tmp_path):
    (tmp_path / "planted.py").write_text("LENIENT = ('masked', 'x')\n"
                                         "def f(parser, kind):\n"
                                         "    parser.add_argument('--kind', choices=('dflash', 'ar'))\n"
                                         "    return kind in LENIENT\n")
    assert sorted(kind_comparisons(tmp_path)) == ["planted.py:3: choices=('dflash', 'ar')", "planted.py:4: kind in LENIENT"]


def test_the_check_finds_planted_tables_keyed_by_kind_names(tmp_path):
    (tmp_path / "planted.py").write_text("RECIPES = {'dflash': 1, 'x': 2}\n"
                                         "SCORERS = dict(masked=1)\n"
                                         "BY_ROLE = {'distilled-dflash': 1}\n"
                                         "ZOO_OBJECTIVES = {'ar': 1, 'mdlm': 2}\n"
                                         "def f():\n    local = {'ar': 1}\n    return local\n")
    assert kind_comparisons(tmp_path) == ["planted.py:1: RECIPES keyed by dflash", "planted.py:2: SCORERS keyed by masked"]


def test_the_check_finds_the_tables_main_keyed_by_kind_name_before_issue_52(tmp_path):
    """The three tables of issue 52's leftover (training's RECIPES and DRAFTERS, tools/distill_eval.py's SCORERS),
    as they were (keyed by "dflash", "ar", "masked"), are found."""
    (tmp_path / "distill.py").write_text('''RECIPES = {
    "dflash": Recipe(dict(steps=4500), _dflash_loss, draft_vocab=True, names_class=False),
    "ar": Recipe(dict(steps=400), _ar_loss),
    "masked": Recipe(dict(steps=3000), _masked_loss, draft_vocab=True),
}
DEFAULTS = {kind: recipe.defaults for kind, recipe in RECIPES.items()}
''')
    (tmp_path / "build.py").write_text('''ZOO_BUILDERS = {"ar": _zoo_qwen, "mdlm": _zoo_qwen, "dflash": _zoo_dflash}
DRAFTERS = {"dflash": _dflash, "ar": _ar, "masked": _masked}
''')
    (tmp_path / "distill_eval.py").write_text('''SCORERS = {
    "dflash": Scorer(_prepare_dflash, dflash_predictions, rolls_out=True, decodes=True),
    "masked": Scorer(_prepare_masked, masked_predictions, rolls_out=True),
    "ar": Scorer(lambda *args: None, ar_predictions, rolls_out=False),
}
''')
    assert kind_comparisons(tmp_path, "x/") == ["x/build.py:2: DRAFTERS keyed by dflash, ar, masked",
                                                "x/distill.py:1: RECIPES keyed by dflash, ar, masked",
                                                "x/distill_eval.py:1: SCORERS keyed by dflash, masked, ar"]
