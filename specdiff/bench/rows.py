"""A bench row as a value (issue 52, item 3): what it runs, and from that its JSON name.

A `Row` holds its method ("plain": specdiff's plain decoding; "hf", "hf_lookup", "hf_assisted": transformers'
generate; "spec": a specdiff drafter; "llama_cpp": llama.cpp's plain decoding of the verifier's GGUF, `bench.llama_cpp`),
its drafter (kind and reference), B, the batch, the tree's node budget, whether a run-time controller drives it,
for the tradeoff rows its effort K and leniency rule, whether its verifier is compiled (`bench.compiled`) and a
llama.cpp row's quantisation type (`quant`: "q4_1", "q8_0", ...). Its `name` is the key under which the report
writes it, exactly as scripts read them: `ar` and `ar_batch<N>` (plain decoding), `hf`, `hf_lookup`,
`hf_assisted`, `spec_<kind>`, `spec_<kind>_adaptive`, `spec_<kind>_batch<N>`, `spec_<kind>_tree` (a tree's tuning
group), `spec_<kind>_tree<N>`, the tradeoff rows `spec_<kind> K=<k>` and `spec_<kind> <rule> <value>[ K=<k>]`,
`llama_cpp_<quant>`; a compiled row's name is its eager row's with `_compiled` appended (`ar_compiled`,
`ar_batch<N>_compiled`, `spec_<kind>_compiled`, `spec_<kind>_batch<N>_compiled`). Names are only ever written
from a Row; nothing parses one back: code that holds a row asks its config (`is_plain`), and code that wants a row
builds its Row.
"""
from __future__ import annotations

from dataclasses import dataclass

PLAIN = "ar"  # plain decoding's JSON name (scripts read it; the method is "plain", not the AR drafter kind)
HF = "hf"


@dataclass(frozen=True)
class Row:
    method: str = "spec"  # "plain", "hf", "hf_lookup", "hf_assisted", "spec" or "llama_cpp"
    kind: str | None = None  # a spec row's drafter kind
    drafter: str | None = None  # its drafter reference (a zoo name, distilled drafter, folder, "lookup")
    block: int | None = None  # B, where the row fixes it
    batch: int = 1  # prompts per call
    tree: int | None = None  # draft trees: the node budget (0: the tree's tuning group, before a budget is chosen)
    adaptive: bool = False  # a run-time controller chooses the effort and the draft length
    steps: int | None = None  # a tradeoff row's effort K (None: the tuned one)
    rule: str | None = None  # a leniency row's rule and value ("linear 0.2"; None: lossless)
    compiled: bool = False  # its verifier is compiled (`engine.compiled.CompiledVerifier`): `<eager name>_compiled`
    quant: str | None = None  # a llama.cpp row's quantisation type ("q4_1", "q8_0", "q4_0")

    @property
    def name(self) -> str:
        return f"{self._eager_name()}_compiled" if self.compiled else self._eager_name()

    def _eager_name(self) -> str:
        if self.method == "llama_cpp":
            return f"llama_cpp_{self.quant}"
        if self.method == "plain":
            return PLAIN if self.batch == 1 else f"{PLAIN}_batch{self.batch}"
        if self.method != "spec":
            return self.method
        base = f"spec_{self.kind}"
        if self.rule is not None:
            return f"{base} {self.rule}" + ("" if self.steps in (None, 1) else f" K={self.steps}")
        if self.steps is not None:
            return f"{base} K={self.steps}"
        if self.adaptive:
            return f"{base}_adaptive"
        if self.tree is not None:
            return f"{base}_tree{self.tree or ''}"
        return base if self.batch == 1 else f"{base}_batch{self.batch}"


def plain(batch: int = 1) -> Row:
    return Row("plain", batch=batch)


def spec(kind: str, drafter: str | None = None, **fields) -> Row:
    return Row("spec", kind, drafter, **fields)


def hf(method: str = HF) -> Row:
    """transformers' rows: "hf", "hf_lookup" or "hf_assisted"."""
    return Row(method)


def llama_cpp(quant: str) -> Row:
    """llama.cpp's plain decoding of the verifier's GGUF in quantisation type `quant` ("q4_1", "q8_0", ...)."""
    return Row("llama_cpp", quant=quant)


def is_plain(row: dict) -> bool:
    """Whether a reported row (its JSON dict) is plain decoding: its config names no drafter."""
    config = row.get("config") or {}
    return "drafter" in config and config["drafter"] is None


def is_speculative(row: dict) -> bool:
    """Whether a reported row drafts with one of specdiff's drafters (its config names one)."""
    return (row.get("config") or {}).get("drafter") is not None


def is_fixed_of(row: dict, drafter: str) -> bool:
    """Whether a reported row runs `drafter` one prompt at a time at a fixed configuration: the tuned row and its
    effort and leniency rows (not a batched, tree or adaptive row)."""
    config = row.get("config") or {}
    return (config.get("drafter") == drafter and (config.get("batch_size") or 1) == 1 and not config.get("controller")
            and config.get("tree_budget") is None)


def plain_name(row: dict) -> str:
    """The plain-decoding row at a reported row's batch (`ar_batch<N>`, or `ar` at batch 1)."""
    return plain((row.get("config") or {}).get("batch_size") or 1).name
