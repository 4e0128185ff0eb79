"""Issue 41, item 5: draft trees verified in one forward with a tree attention mask over the KV cache
(`specdiff.engine.tree`). The tree builders; greedy output equal to HF greedy token for token; the emitted law
equal to the verifier's (sampled, χ² and TV against the enumerated law); a stateful verifier refused."""
from __future__ import annotations

import random

import pytest
import torch
from tiny_models import LENGTH, PROMPT, SAMPLING, VOCAB, exact_continuations, sequence_index, tiny_qwen3

import specdiff as sd
from specdiff.drafters.base import Draft, Drafter
from specdiff.drafters.tree import Tree, best_first_tree, chain_tree, merge_trees
from specdiff.engine.tree import TreeGenerator


class RandomTreeDrafter(Drafter):
    """A test drafter: a random tree (seeded) of at most `budget` nodes whose first branch is `oracle`'s next
    tokens where given (so that some rounds accept several)."""

    def __init__(self, vocab: int, seed: int = 0, oracle=None):
        self.vocab, self.random, self.oracle = vocab, random.Random(seed), oracle

    def propose(self, ids, key_mask, block_size, generator=None):
        raise NotImplementedError

    def propose_tree(self, ids, depth, budget):
        trees = []
        if self.oracle is not None:
            trees.append(chain_tree(self.oracle(ids[0].tolist(), depth)))
        tokens, parents, depth_of = [], [], [0]
        while len(tokens) < budget:
            parent = self.random.randrange(len(tokens) + 1)
            if depth_of[parent] >= depth:
                continue
            tokens.append(self.random.randrange(self.vocab))
            parents.append(parent)
            depth_of.append(depth_of[parent] + 1)
        trees.append(Tree(tokens, parents))
        return merge_trees(*trees, budget=budget)


def test_the_builders_make_tries_in_topological_order():
    tree = merge_trees(chain_tree([5, 6, 7]), chain_tree([5, 6, 8]), chain_tree([9]))
    assert tree.tokens == [5, 6, 7, 8, 9] and tree.parents == [0, 1, 2, 2, 0]
    assert tree.depths() == [0, 1, 2, 3, 3, 1] and tree.children()[2] == {7: 3, 8: 4}
    assert merge_trees(chain_tree([1, 2, 3]), chain_tree([4, 5]), budget=4).tokens == [1, 2, 3, 4]
    logprobs = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.9, 0.05, 0.05]]))
    best = best_first_tree(logprobs, budget=4, width=2)  # 0 (.6), 0-0 (.54), 1 (.3), 1-0 (.27)
    assert best.tokens == [0, 0, 1, 0] and best.parents == [0, 1, 0, 3]


def test_greedy_trees_equal_hf_greedy_token_for_token():
    from architectures import build, hf_greedy

    model = build("llama")
    verifier = sd.Verifier(model, temperature=0.0)

    def oracle(ids, depth):  # HF's own continuation: the first branch is all accepted
        return hf_greedy(model, ids, new_tokens=depth)[0]

    for p, prompt in enumerate([[5, 6, 7, 5, 6, 7, 5, 6], [9, 10], [11, 12, 13, 11, 12]]):
        reference = hf_greedy(model, prompt, new_tokens=24)[0]
        for drafter in (RandomTreeDrafter(model.config.vocab_size, seed=p),
                        RandomTreeDrafter(model.config.vocab_size, seed=p, oracle=oracle)):
            ids, stats = TreeGenerator(drafter, verifier, depth=4, budget=10, eos_token_id=[]).generate(prompt, 24)
            assert ids == reference
        assert max(stats.accepted) >= 3  # the oracle's branch: whole branches accepted


def test_sampled_trees_emit_the_verifiers_law():
    """4,000 generations of one prompt through random trees: the first LENGTH tokens against the enumerated law
    (χ² p >= 1e-4; TV <= 0.06, the expected TV of an exact sampler being <= 0.4 sqrt(64 / 4000) = 0.05)."""
    from exactness import chi_square_pvalue, histogram, total_variation_to

    model = tiny_qwen3(VOCAB, seed=0, layers=2)
    verifier = sd.Verifier(model, **SAMPLING)
    drafter = RandomTreeDrafter(VOCAB, seed=1)
    generator = torch.Generator().manual_seed(0)
    tree = TreeGenerator(drafter, verifier, depth=3, budget=6, eos_token_id=[])
    rows, accepted = [], 0
    for _ in range(4000):
        ids, stats = tree.generate(PROMPT, LENGTH, generator)
        rows.append(ids)
        accepted += sum(stats.accepted)
    assert accepted > 1000  # branches were accepted, not only one token per forward
    counts = histogram(sequence_index(rows, VOCAB, LENGTH), VOCAB ** LENGTH)
    exact = exact_continuations(model, PROMPT, LENGTH, **SAMPLING).to(counts.dtype)
    tv, pvalue = total_variation_to(counts, exact), chi_square_pvalue(counts, exact)
    assert tv <= 0.06 and pvalue >= 1e-4, f"TV {tv:.4f}, chi-square p {pvalue:.2e}"


def test_a_stateful_verifier_and_a_drafter_without_trees_are_refused():
    from architectures import build

    class Chainless:
        pass

    verifier = sd.Verifier(build("llama"), temperature=0.0)
    with pytest.raises(ValueError, match="does not draft trees"):
        TreeGenerator(Chainless(), verifier)
    verifier.stateful = True  # what a hybrid (recurrent-state) verifier reports
    with pytest.raises(ValueError, match="recurrent-state"):
        TreeGenerator(RandomTreeDrafter(8), verifier)


def test_generate_and_bench_take_trees_and_greedy_trees_equal_chains(capsys):
    import json

    from specdiff.cli import main

    prompt = "Tom has 4 bags of coins with 3 coins in each. How many coins does Tom have now?"
    outputs = {}
    for extra in ([], ["--tree-budget", "8"]):
        assert main(["generate", prompt, "--max-new-tokens", "24", "--temperature", "0", "-B", "4", "--json",
                     *extra]) == 0
        outputs[bool(extra)] = json.loads(capsys.readouterr().out)
    assert outputs[True]["config"]["tree_budget"] == 8 and outputs[True]["exact"]
    assert outputs[True]["generations"][0]["token_ids"] == outputs[False]["generations"][0]["token_ids"]
    argv = ["bench", "speedup", "--json", "--problems", "1", "--set", "tune_problems=1", "--repeats", "1",
            "--max-new-tokens", "12", "--set", "blocks=[4]", "--set", "steps=[1]", "--set", "caches=[\"off\"]",
            "--set", "controllers=[]", "--set", "batch_sizes=[]", "--set", "trees=[6]", "--drafters", "ar"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows["spec_ar_tree6"]["exact"] and rows["spec_ar_tree6"]["config"]["tree_budget"] == 6
    assert rows["spec_ar_tree6"]["new_tokens"] == rows["spec_ar"]["new_tokens"]


def test_a_first_difference_counts_as_a_near_tie_only_within_the_bound(monkeypatch):
    """`greedy_identical_up_to_ties`: a row that first differs from HF by HF's second choice counts when the top-2
    gap is within the dtype's bound, and never by a token outside HF's top two."""
    from architectures import build, hf_greedy

    from specdiff.bench import ties
    from specdiff.runs.prompts import Prompt

    model = build("llama")
    prompt = Prompt(ids=[5, 6, 7, 8], kind="", index=0, source="test")
    reference, logits = hf_greedy(model, prompt.ids, new_tokens=6)
    top = logits[3].topk(3)  # position 3: the first difference below
    gap = float(top.values[0] - top.values[1])
    second, third = reference[:3] + [int(top.indices[1])], reference[:3] + [int(top.indices[2])]
    for bound, ids, counted in ((gap + 1e-3, second, True), (gap / 2, second, False), (1e9, third, False)):
        monkeypatch.setattr(ties, "tie_bound", lambda dtype, bound=bound: bound)
        rows = {"spec": {"greedy_identical": 0.0}, "same": {"greedy_identical": 1.0}}
        records = {"spec": [{"ids": ids}], "same": [{"ids": reference}]}
        ties.up_to_ties(rows, [prompt], [reference], records, model, "float32")
        assert rows["spec"]["greedy_identical_up_to_ties"] == float(counted), (bound, ids)
        assert rows["same"]["greedy_identical_up_to_ties"] == 1.0


def test_the_recorded_bfloat16_bound_is_the_largest_over_the_kernel_families_measured():
    """Issue 54: one bound per kernel family, each naming its CPU; the bound is their largest, and one family was
    measured over at least 10,000 positions."""
    import json

    from specdiff.bench import ties

    recorded = json.loads(ties.BOUNDS_FILE.read_text())["bfloat16"]
    families = recorded["per_kernels"]
    assert len(families) >= 2 and all(f["cpu"] and f["positions"] > 0 for f in families.values())
    assert max(f["positions"] for f in families.values()) >= 10_000
    assert recorded["bound"] == max(f["bound"] for f in families.values())
    assert {"chain2", "chain16", "tree8+8"} <= set(recorded["shapes"])
    assert ties.tie_bound("bfloat16") == recorded["bound"] > 0 and ties.tie_bound("float32") == 0.0


def test_the_tree_budget_is_chosen_on_validation_and_only_it_is_measured(tmp_path, capsys):
    import json

    from specdiff.cli import main

    common = ["--problems", "1", "--set", "tune_problems=2", "--repeats", "1", "--max-new-tokens", "12",
              "--set", "blocks=[4]", "--set", "steps=[1]", "--set", "caches=[\"off\"]", "--set", "controllers=[]",
              "--set", "batch_sizes=[]", "--set", "trees=[3,8]", "--set", "tree_drafters=[\"ar\"]",
              "--drafters", "ar"]
    tuning_file = tmp_path / "tuning.json"
    assert main(["bench", "tune", "--out", str(tuning_file), *common]) == 0
    capsys.readouterr()
    tuning = json.loads(tuning_file.read_text())
    tried = {row["config"]["tree_budget"] for row in tuning["grid"] if row["row"] == "spec_ar_tree"}
    assert tried == {3, 8}  # every budget, on the validation prompts only
    budget = tuning["chosen"]["spec_ar_tree"]["config"]["tree_budget"]
    assert main(["bench", "speedup", "--json", "--tuning", str(tuning_file), *common]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [name for name in rows if "_tree" in name] == [f"spec_ar_tree{budget}"]
    assert rows[f"spec_ar_tree{budget}"]["exact"]
