"""Issue 39, item 1: outside the kind modules no code compares a drafter kind with a string literal, under any
variable name. What differs between kinds lives on its `KindSpec` (`specdiff.drafters.registry`).

The check reads every module of the package as a syntax tree and flags each comparison (==, !=, in, not in)
whose one side is a kind's name or alias ("masked", "ar", ...), or a tuple / list / set holding one. The
exemptions are named: the kind modules themselves, the continuous half (its drafters are not these kinds), and
comparisons whose other side is one of `OTHER_VOCABULARIES`, where the same word means something else ("block"
verification, a prefix cache's "block" attention)."""
from __future__ import annotations

import ast
from pathlib import Path

import specdiff
from specdiff.drafters import registry

ROOT = Path(specdiff.__file__).parent
KIND_MODULES = {"drafters/registry.py", "drafters/masked.py", "drafters/block.py", "drafters/uniform.py",
                "drafters/dflash.py", "drafters/autoregressive.py", "drafters/lookup.py", "drafters/datastore.py",
                "drafters/hybrid.py"}
# "block" verification / attention; "hybrid" verifiers (recurrent-state layers), not the hybrid proposer
OTHER_VOCABULARIES = {"method", "rejection_sample_method", "committed_attention", "layer_type", "architecture"}


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


def kind_comparisons(root: Path = ROOT) -> list[str]:
    """'path:line: source' of every comparison of a kind name with a literal outside the exemptions."""
    words, found = _kind_words(), []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative in KIND_MODULES or relative.startswith("continuous/"):
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Compare) or not all(
                    isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                continue
            sides = [node.left, *node.comparators]
            if any(_name(side) in OTHER_VOCABULARIES for side in sides):
                continue
            if any(word in words for side in sides for word in _literals(side)):
                found.append(f"{relative}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_no_kind_is_compared_with_a_string_literal_outside_the_kind_modules():
    found = kind_comparisons()
    assert found == [], "compare through the kind's KindSpec (or a recipe table) instead:\n" + "\n".join(found)


def test_the_check_finds_a_planted_comparison(tmp_path):
    (tmp_path / "planted.py").write_text("def f(drafter_name):\n    return drafter_name in ('x', 'dflash')\n"
                                         "def g(method):\n    return method == 'block'\n")
    assert kind_comparisons(tmp_path) == ["planted.py:2: drafter_name in ('x', 'dflash')"]
