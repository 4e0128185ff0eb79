"""Draft trees as drafters build them (`specdiff.engine.tree` verifies them; its docstring defines the terms):
a chain (`chain_tree`), DDTree's best-first tree over a block's per-position marginals (`best_first_tree`), and
the trie of several trees' branches (`merge_trees`)."""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch


@dataclass
class Tree:
    tokens: list[int]  # [N]: node i + 1's token
    parents: list[int]  # [N]: node i + 1's parent (0: the root), every parent before its children

    def __len__(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        """[N + 1]: each node's depth, the root's 0."""
        depth = [0]
        for parent in self.parents:
            depth.append(depth[parent] + 1)
        return depth

    def children(self) -> list[dict[int, int]]:
        """[N + 1]: per node, {token: child node}."""
        out: list[dict[int, int]] = [{} for _ in range(len(self.tokens) + 1)]
        for i, (token, parent) in enumerate(zip(self.tokens, self.parents), 1):
            out[parent].setdefault(token, i)
        return out


def chain_tree(tokens: list[int]) -> Tree:
    """One branch: node i + 1 below node i."""
    return Tree(list(tokens), list(range(len(tokens))))


def merge_trees(*trees: Tree, budget: int | None = None) -> Tree:
    """The trie of every branch of `trees` (shared prefixes merged), nodes numbered in the order first seen, at
    most `budget` nodes (earlier trees first)."""
    tokens, parents, index = [], [], {}  # (parent, token) -> node
    for tree in trees:
        mapped = [0]
        for token, parent in zip(tree.tokens, tree.parents):
            key = (mapped[parent], token) if mapped[parent] is not None else None
            if key is None or (key not in index and budget is not None and len(tokens) >= budget):
                mapped.append(None)  # over the budget: this node and its subtree are dropped
                continue
            if key not in index:
                tokens.append(token)
                parents.append(key[0])
                index[key] = len(tokens)
            mapped.append(index[key])
    return Tree(tokens, parents)


def best_first_tree(logprobs: torch.Tensor, budget: int, width: int = 4) -> Tree:
    """DDTree's tree from per-position marginals: logprobs [D, V] (position d's log q over ids, independent of
    the tokens before it, as a one-step block drafter gives them). Paths are scored by the sum of their tokens'
    log q; the `budget` best prefixes (each extending a kept one) are the tree, expanded best first, each node
    trying its position's top `width` tokens."""
    top_lp, top_ids = logprobs.topk(min(width, logprobs.shape[-1]), dim=-1)  # [D, width]
    top_lp, top_ids = top_lp.tolist(), top_ids.tolist()
    tokens, parents, depth_of = [], [], [0]
    heap = [(-top_lp[0][k], 0, k, 0.0) for k in range(len(top_ids[0]))]  # (-score, parent node, rank, parent score)
    heapq.heapify(heap)
    while heap and len(tokens) < budget:
        negative, parent, rank, _ = heapq.heappop(heap)
        depth = depth_of[parent]
        tokens.append(top_ids[depth][rank])
        parents.append(parent)
        node = len(tokens)
        depth_of.append(depth + 1)
        if depth + 1 < len(top_ids):
            for k in range(len(top_ids[depth + 1])):
                heapq.heappush(heap, (negative - top_lp[depth + 1][k], node, k, -negative))
    return Tree(tokens, parents)
