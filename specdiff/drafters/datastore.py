"""Datastore drafts: retrieval from the verifier's own conversations, as in REST (He et al. 2024,
"REST: retrieval-based speculative decoding"), with no model.

Terms:
- datastore: the token ids of conversations the verifier wrote and answered itself (`specdiff distill data`
  shards: prompt + response per conversation), concatenated with a separator (-1) after each;
- suffix index: the datastore's positions sorted by the (at most `INDEX_DEPTH`) tokens that start there, so
  that the positions where a given n-gram starts are one contiguous range (found by binary search);
- match: the longest suffix of a row's committed tokens, n tokens with min_ngram <= n <= max_ngram, that
  occurs in the datastore; its occurrences' continuations are the candidates (at most `max_candidates`, the
  first in index order);
- draft: the candidates' most common continuation, token by token: at each position the most frequent next
  token among the candidates still agreeing (ties: the smaller id), until B tokens, a separator, or fewer than
  `min_support` candidates agree. REST builds a trie of the candidates and verifies its top branches; this
  chain is that trie's heaviest path (`propose_tree`-style branches are the draft-tree issue's).

The draft is a deterministic function of the committed tokens and the datastore, so its law is a point mass
(`point_mass`): verification with q = onehot(y) is exact for every rule's target (the first paper's
Proposition 2 with q a point mass). A row without a match drafts nothing (`Draft.lengths` 0).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from specdiff.drafters.base import Draft, Drafter, point_mass_draft
from specdiff.drafters.registry import KindSpec, register

INDEX_DEPTH = 16  # positions are sorted by their first 16 tokens: matches are at most this long
SEPARATOR = -1


class SuffixIndex:
    """tokens [N] int32 (separators -1), order [N] int64: positions sorted by their first INDEX_DEPTH tokens."""

    def __init__(self, tokens: np.ndarray, order: np.ndarray | None = None):
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        self.order = sort_positions(self.tokens) if order is None else np.asarray(order, dtype=np.int64)
        # padded so that reading INDEX_DEPTH + any draft past the end reads separators
        self._padded = np.concatenate([self.tokens, np.full(INDEX_DEPTH + 1024, SEPARATOR, dtype=np.int32)])

    def __len__(self) -> int:
        return len(self.tokens)

    def longest_match(self, query: list[int], min_n: int, max_n: int) -> tuple[int, int, int]:
        """(n, lo, hi): the longest suffix of `query` with min_n <= n <= max_n that occurs, and the range
        order[lo:hi] of its occurrences; (0, 0, 0) when none does. The ranges of ever longer suffixes are
        not nested (a suffix grows to the left), so each n is searched on its own, longest first."""
        for n in range(min(max_n, INDEX_DEPTH, len(query)), min_n - 1, -1):
            lo, hi = self._range(query[len(query) - n:])
            if hi > lo:
                return n, lo, hi
        return 0, 0, 0

    def _range(self, gram: list[int]) -> tuple[int, int]:
        """The positions whose first len(gram) tokens equal gram: order[lo:hi] (binary search)."""
        n, tokens, order = len(gram), self._padded, self.order
        key = tuple(gram)

        def prefix(i):
            start = int(order[i])
            return tuple(tokens[start:start + n].tolist())

        lo, hi = 0, len(order)
        while lo < hi:  # first position >= gram
            mid = (lo + hi) // 2
            if prefix(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        first, hi = lo, len(order)
        while lo < hi:  # first position > gram
            mid = (lo + hi) // 2
            if prefix(mid) <= key:
                lo = mid + 1
            else:
                hi = mid
        return first, lo

    def continuation(self, n: int, lo: int, hi: int, limit: int, max_candidates: int, min_support: int) -> list[int]:
        """The heaviest path of the candidates' continuations (module docstring), at most `limit` tokens."""
        starts = self.order[lo:min(hi, lo + max_candidates)] + n  # [c]: where each continuation begins
        out = []
        for depth in range(limit):
            following = self._padded[starts + depth]  # [c]
            values, counts = np.unique(following, return_counts=True)
            best = int(np.argmax(counts))  # the first maximum: the smallest id among ties
            token, support = int(values[best]), int(counts[best])
            if token == SEPARATOR or support < min_support:
                break
            out.append(token)
            starts = starts[following == token]
        return out


def sort_positions(tokens: np.ndarray) -> np.ndarray:
    """Every position of tokens [N], sorted by the INDEX_DEPTH tokens that start there (prefix doubling: ranks
    of 1-, 2-, 4-, 8-, 16-token prefixes, each a stable sort on (rank, rank k further on))."""
    n = len(tokens)
    rank = np.unique(tokens, return_inverse=True)[1].astype(np.int64) + 1  # 1.. ; separators rank lowest
    k = 1
    while True:
        following = np.zeros(n, dtype=np.int64)
        following[:n - k] = rank[k:] if k < n else following[:0]
        order = np.lexsort((following, rank))
        pairs = np.stack([rank[order], following[order]])
        new = np.empty(n, dtype=np.int64)
        new[order] = np.concatenate([[1], 1 + np.cumsum(np.any(pairs[:, 1:] != pairs[:, :-1], axis=0))])
        rank, k = new, k * 2
        if k >= INDEX_DEPTH or rank.max() == n:
            return order


def from_shards(folder: str | Path, cache_dir: str | Path | None = None) -> SuffixIndex:
    """The datastore of a `specdiff distill data` folder (every shard in its index.json, each conversation's
    prompt and response), its sorted positions cached under cache_dir (default ~/.cache/specdiff/datastore)
    by the shards' checksums."""
    folder = Path(folder)
    index_file = folder / "index.json"
    if not index_file.is_file():
        raise FileNotFoundError(f"{folder} is not a `specdiff distill data` folder (no index.json)")
    shards = json.loads(index_file.read_text())["shards"]
    if not shards:
        raise ValueError(f"{folder} holds no shards yet: run `specdiff distill data`")
    parts = []
    for shard in shards:
        data = np.load(folder / shard["file"])
        tokens = data["tokens"].astype(np.int32)
        lengths = (data["prompt_lengths"] + data["response_lengths"]).astype(np.int64)
        ends = np.cumsum(lengths)
        parts.append(np.insert(tokens, ends, SEPARATOR))  # a separator after each conversation
    tokens = np.concatenate(parts)
    key = hashlib.sha256("".join(s.get("sha256", s["file"]) for s in shards).encode()).hexdigest()[:16]
    cache = Path(cache_dir or Path.home() / ".cache" / "specdiff" / "datastore") / f"{key}-{INDEX_DEPTH}.npy"
    if cache.is_file():
        order = np.load(cache)
        if len(order) == len(tokens):
            return SuffixIndex(tokens, order)
    index = SuffixIndex(tokens)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial.npy")
    np.save(partial, index.order)
    partial.replace(cache)
    return index


class DatastoreDrafter(Drafter):
    """index: a `SuffixIndex`. max_ngram, min_ngram: the match lengths tried, longest first; max_draft: at most
    this many tokens per round (default: the block size); max_candidates, min_support: module docstring."""

    exact_marginal = True  # a point mass is the exact law of a deterministic draft
    point_mass = True

    def __init__(self, index: SuffixIndex, max_ngram: int = 12, min_ngram: int = 2, max_draft: int | None = None,
                 max_candidates: int = 256, min_support: int = 1):
        if not 1 <= int(min_ngram) <= int(max_ngram) <= INDEX_DEPTH:
            raise ValueError(f"DatastoreDrafter needs 1 <= min_ngram <= max_ngram <= {INDEX_DEPTH}, got "
                             f"{min_ngram}, {max_ngram}")
        if max_draft is not None and int(max_draft) < 1:
            raise ValueError(f"DatastoreDrafter: max_draft must be >= 1, got {max_draft}")
        self.index, self.max_ngram, self.min_ngram = index, int(max_ngram), int(min_ngram)
        self.max_draft = None if max_draft is None else int(max_draft)
        self.max_candidates, self.min_support = int(max_candidates), int(min_support)
        self.model, self._vocab_size = None, None
        self.match_lengths: list[int] = []  # per row, the last proposal's match length n (0: none)

    @property
    def vocab_size(self) -> int | None:
        return self._vocab_size

    def adopt_vocabulary(self, vocab_size: int) -> None:
        self._vocab_size = int(vocab_size)

    @property
    def max_length(self) -> int | None:
        return None

    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded. Returns Draft(tokens [b, W], probs None, lengths [b])."""
        limit = block_size if self.max_draft is None else min(block_size, self.max_draft)
        drafts, self.match_lengths = [], []
        for row, mask in zip(ids.cpu(), key_mask.cpu()):
            tail = row[mask][-self.max_ngram:].tolist()  # host: the last max_ngram committed tokens
            n, lo, hi = self.index.longest_match(tail, self.min_ngram, self.max_ngram)
            found = self.index.continuation(n, lo, hi, limit, self.max_candidates, self.min_support) if n else []
            drafts.append(found)
            self.match_lengths.append(n if found else 0)
        return point_mass_draft(drafts, ids.device)


_INDEXES: dict[str, SuffixIndex] = {}  # data folder -> its index, built once per process


def data_folder(verifier_name: str | None, path: str | Path | None = None) -> Path:
    """The datastore's folder: `path`, else data/distill/<verifier> in the working directory or beside the
    package's source tree."""
    if path is not None:
        return Path(path)
    if not verifier_name:
        raise ValueError("the datastore drafter needs its verifier's name (or a datastore folder: path=...)")
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        folder = root / "data" / "distill" / Path(str(verifier_name)).name
        if (folder / "index.json").is_file():
            return folder
    raise ValueError(f"no datastore for the verifier {verifier_name!r}: no data/distill/{Path(str(verifier_name)).name}"
                     f"/index.json; write one with `specdiff distill data --verifier {verifier_name} --shards N`, or "
                     "give a folder (path=...)")


class DatastoreKind(KindSpec):
    """Datastore drafts (REST): no model; the datastore is its verifier's `specdiff distill data` folder."""

    rank = 6

    name, needs_model, ignores_effort, priority = "datastore", False, True, 96
    describes = "datastore retrieval (REST; no model)"
    option_keys = ("max_ngram", "min_ngram", "max_draft", "max_candidates", "min_support", "path")

    def check_verifier(self, verifier: str) -> None:
        data_folder(verifier)

    def build(self, model=None, config=None, defaults=None, tokenizer=None, target=None, **options):
        unknown = sorted(set(options) - set(self.option_keys))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} do(es) not apply to the datastore drafter; it takes "
                             f"{', '.join(self.option_keys)}")
        folder = data_folder(getattr(target, "name", None), options.pop("path", None)).resolve()
        if str(folder) not in _INDEXES:
            _INDEXES[str(folder)] = from_shards(folder)
        return DatastoreDrafter(_INDEXES[str(folder)], **options)

    def bench_candidates(self, block, grid):
        """One candidate per longest match (`ngrams`) at this B."""
        return [(f"datastore B={block} n={n}", {"block_size": block, "extra": {"max_ngram": min(max(n, 2), 16)}})
                for n in grid.get("ngrams") or [12]]

    def run_options(self, run):
        return self.extra_options(run)


register(DatastoreKind())
