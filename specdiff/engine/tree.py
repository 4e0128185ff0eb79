"""Draft trees (issue 41, item 5): several candidate continuations per round, verified in ONE verifier forward.

Terms:
- tree: nodes 1..N below the root, node 0, the last committed token. `parents` [N] (parent of node i + 1, every
  parent numbered before its children), `tokens` [N]; depth(0) = 0, depth(i) = depth(parent(i)) + 1;
- branch: a root-to-leaf path; the chain of plain speculative decoding is a tree with one branch;
- tree attention: node i's query sees the committed tokens (the KV cache) and its own ancestors and itself, at
  position C + depth(i) (C: the committed tokens before the root), so each node's logits are those the
  verifier would give after its branch alone: mask [N + 1, C + N + 1];
- verification (every branch a point mass: drafts are deterministic functions of the committed tokens):
      u = root
      loop:  x ~ p_u                     (argmax at temperature 0)
             if a child v of u holds x:  accept v; u = v
             else:                       emit x; stop          (a correction, or after a leaf the bonus)
  The emitted tokens are draws from the verifier's own conditionals along the path, so the output law is the
  verifier's (exact). It is SpecInfer's recursive rejection over siblings with point-mass proposals q_j =
  onehot(c_j): accept c_1 with probability p(c_1), else c_2 with p(c_2) / (1 - p(c_1)), ..., else a draw from p
  without the siblings, which is one draw from p matched against the children (the multi-draft rule);
- commit: the cache keeps the root and the accepted path's columns, in order; every other branch's goes.

`TreeGenerator(drafter, verifier, depth, budget)` generates at batch 1: the drafter's `propose_tree(ids, depth,
budget)` gives the tree (`specdiff.drafters.tree`: `chain_tree`, `best_first_tree`, `merge_trees` build one); `start` and `commit` are the
chain's, `commit` getting the verifier's hidden states of the root and the accepted path. Stateful (recurrent-state)
verifiers are refused: their rollback replays a chain, not a tree. Leniency rules are refused: the tree rule
above is the lossless one.
"""
from __future__ import annotations

import time

import torch

from specdiff.drafters.tree import Tree
from specdiff.engine.stats import SequenceStats
from specdiff.lm.cache import cache_kwargs, keep_columns, new_cache
from specdiff.lm.sampling import eos_token_ids, sample_rows, sampling_logits


class TreeGenerator:
    """Speculative generation with draft trees at batch 1 (module docstring). depth: the deepest node; budget:
    the most nodes per tree (the verifier's forward scores budget + 1 tokens)."""

    def __init__(self, drafter, verifier, depth: int = 8, budget: int = 16, eos_token_id=None):
        if getattr(verifier, "stateful", False):
            raise ValueError("draft trees need an attention verifier: a recurrent-state (hybrid) verifier's rollback "
                             "replays one chain, not a tree; use chains (SpeculativeGenerator)")
        if not hasattr(drafter, "propose_tree"):
            raise ValueError(f"{type(drafter).__name__} does not draft trees (no propose_tree)")
        if int(depth) < 1 or int(budget) < 1:
            raise ValueError(f"depth and budget must be >= 1, got {depth}, {budget}")
        self.drafter, self.verifier, self.depth, self.budget = drafter, verifier, int(depth), int(budget)
        self.eos_token_ids = eos_token_ids(verifier.model, eos_token_id)
        self.exact = True

    @torch.inference_mode()
    def generate(self, prompt: list[int], max_new_tokens: int,
                 generator: torch.Generator | None = None) -> tuple[list[int], SequenceStats]:
        """(new token ids, SequenceStats) of one prompt. The drafter gets the verifier's hidden states as in a
        chain (`Drafter.start`, `Drafter.commit` with the root's and the accepted path's)."""
        model, device = self.verifier.model, self.verifier.device
        ids = torch.tensor([prompt], device=device)
        layers = getattr(self.drafter, "verifier_hidden_layers", None)
        began = time.perf_counter()
        cache, hidden = new_cache(model), None
        if ids.shape[1] > 1:
            out = model(input_ids=ids[:, :-1], output_hidden_states=layers is not None, logits_to_keep=1,
                        **cache_kwargs(model, cache))
            hidden = None if layers is None else torch.cat([out.hidden_states[k] for k in layers], dim=-1)
        elif layers is not None:
            hidden = torch.zeros(1, 0, model.config.hidden_size * len(layers), device=device)
        self.drafter.start(ids, torch.ones_like(ids, dtype=torch.bool), verifier_hidden=hidden)
        out_ids, stats = [], SequenceStats(exact=True, block_size=self.budget)
        while len(out_ids) < max_new_tokens:
            round_start = time.perf_counter()
            tree = self.drafter.propose_tree(ids, self.depth, self.budget)  # [N] nodes
            drafted = time.perf_counter()
            committed = cache.get_seq_length()
            logits, hidden = self._score(cache, int(ids[0, -1]), tree, layers)  # [N + 1, V]
            sampling = sampling_logits(logits, self.verifier.temperature, self.verifier.top_p, self.verifier.top_k)
            path, emitted = _walk(tree, sampling, generator)
            keep = torch.zeros(1, committed + len(tree) + 1, dtype=torch.bool, device=device)
            keep[0, :committed] = True
            keep[0, [committed + node for node in [0, *path]]] = True  # the root and the accepted path, in order
            keep_columns(cache, keep)
            self.drafter.commit(torch.tensor([len(path)], device=device),
                                None if hidden is None else hidden[:, [0, *path]])
            new = emitted[: max_new_tokens - len(out_ids)]
            stop = next((i for i, t in enumerate(new) if t in self.eos_token_ids), None)
            new = new if stop is None else new[: stop + 1]
            out_ids += new
            ids = torch.cat([ids, torch.tensor([emitted], device=device)], dim=1)
            stats.rounds += 1
            stats.accepted.append(min(len(path), len(new)))
            stats.drafted.append(len(tree))
            stats.draft_s += drafted - round_start
            stats.verify_s += time.perf_counter() - drafted
            if stop is not None:
                break
        stats.new_tokens, stats.wall_s = len(out_ids), time.perf_counter() - began
        return out_ids, stats

    def _score(self, cache, root: int, tree: Tree, layers):
        return score_tree(self.verifier.model, cache, root, tree, layers)


def score_tree(model, cache, root: int, tree: Tree, layers=None):
    """The tree's one forward on the cache (module docstring): logits [N + 1, V] (float32) and the hidden states
    [1, N + 1, H * len(layers)] or None. The cache then holds every node's columns after the committed ones."""
    device = next(model.parameters()).device
    committed = cache.get_seq_length()
    n = len(tree) + 1
    sees = torch.zeros(n, n, dtype=torch.bool, device=device)  # [N + 1, N + 1]: node i sees node j
    sees[0, 0] = True
    for i, parent in enumerate(tree.parents, 1):
        sees[i] = sees[parent]
        sees[i, i] = True
    mask = torch.cat([torch.ones(n, committed, dtype=torch.bool, device=device), sees], dim=1)[None, None]
    chunk = torch.tensor([[root, *tree.tokens]], device=device)
    positions = torch.tensor([[committed + d for d in tree.depths()]], device=device)
    out = model(input_ids=chunk, attention_mask=mask, position_ids=positions,
                output_hidden_states=layers is not None, **cache_kwargs(model, cache))
    hidden = None if layers is None else torch.cat([out.hidden_states[k] for k in layers], dim=-1)
    return out.logits[0].float(), hidden


def _walk(tree: Tree, logits: torch.Tensor, generator) -> tuple[list[int], list[int]]:
    """(accepted nodes, emitted tokens) of the tree rule (module docstring); logits [N + 1, V] sampling logits."""
    children = tree.children()
    draws = sample_rows(torch.softmax(logits, dim=-1), generator).tolist()  # [N + 1]: x ~ p_u at every node
    node, path, emitted = 0, [], []
    while True:
        x = draws[node]
        emitted.append(x)
        child = children[node].get(x)
        if child is None:
            return path, emitted
        path.append(child)
        node = child
