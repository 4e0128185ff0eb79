"""The compiled verifier: each round's forward runs a graph compiled once, over a static KV cache.

`CompiledVerifier` is a `Verifier` (same start / score / commit / select) whose cache is
`specdiff.lm.static_cache`: fixed buffers, rows left-aligned, rolled back by length. The rules:

- Shapes are fixed per batch, so a few graphs serve every round. A graph is keyed by
  (batch slots, chunk width, cache width, hidden layers):
  - batch slots: the batch rounded up to a power of two; a finished row keeps its slot until the batch
    ends (its columns are computed and never read), so rows leaving never cost a new graph;
  - chunk width ("bucket"): 1 (plain decoding) and the widest chunk seen so far (B + 1 in speculative
    decoding). A narrower chunk (ragged drafts: prompt lookup, controllers) is padded to the bucket; its
    padding columns are written past the row's length and never read;
  - cache width: the longest row a batch may reach (`reserve`, called by the generator), plus the widest
    bucket, rounded up to a power of two (at least 256).
- Batches of rows with different lengths compile: each row writes at its own positions (one scatter per
  layer) and reads only its own columns, whatever its length.
- The prefill (once per batch, prompts of any length) runs eagerly on the same cache.
- Compiled with `torch.compile(fullgraph=True, dynamic=False)` and inductor's freezing (weights folded into
  the graph as constants). Inductor's caches live under `compile_cache_dir()` (~/.cache/specdiff/compile/
  torch-VERSION, or $SPECDIFF_COMPILE_DIR), so a second process loads the graphs instead of compiling them.
- The first call of each graph shows progress and says how long it took. If compiling fails, the cache
  directory is cleared and the compile tried once more (a corrupted or stale cache is rebuilt, never
  trusted); if it fails again, the verifier runs the same forward eagerly and says why in one line.
- Hybrid models (recurrent state) are refused: `CompileRefused`, whose message names `--no-compile`.

Exactness is stated against the compiled graphs themselves (docs/engine.md, "Speed"): the compiled graph
of a B + 1 chunk and that of one token round differently, as eager's do.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import types
from pathlib import Path

import torch

from specdiff.engine.verifier import Verifier
from specdiff.lm.cache import cache_kwargs
from specdiff.lm.sampling import check_finite, sampling_logits
from specdiff.lm.static_cache import NotStaticCacheable, check_static, row_masks, row_static_cache
from specdiff.progress import progress as progress_bar

MIN_CACHE_WIDTH = 256  # columns: the smallest static cache (powers of two above it)
RECOMPILE_LIMIT = 64  # graphs per verifier: dynamo's default (8) is below (slots x buckets x widths)


class CompileRefused(ValueError):
    """The verifier cannot run compiled exactly (a hybrid model, an attention kind the static masks lack)."""


def compile_cache_dir() -> Path:
    """Where inductor's caches go: $SPECDIFF_COMPILE_DIR, else ~/.cache/specdiff/compile, one folder per torch
    version (a cache from another torch is never read)."""
    root = Path(os.environ.get("SPECDIFF_COMPILE_DIR") or Path.home() / ".cache" / "specdiff" / "compile")
    return root / f"torch-{torch.__version__}"


class CompiledVerifier(Verifier):
    """A `Verifier` whose rounds run compiled graphs over a static cache. compile=False runs the very same
    forward eagerly (the reference of the compiled path, and the fallback). progress: show the first compile
    of each graph and its time on stderr. min_width: the smallest cache width (columns), a power of two."""

    def __init__(self, model, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, compile: bool = True,
                 progress: bool = True, min_width: int = MIN_CACHE_WIDTH):
        try:
            check_static(model)
        except NotStaticCacheable as error:
            raise CompileRefused(f"cannot compile this verifier: {error}; run it with --no-compile "
                                 "(compile=False)") from None
        super().__init__(model, temperature, top_p, top_k)
        self.compile, self.progress = bool(compile), bool(progress)
        self.fallback = None  # why the eager path runs, once compiling failed
        self.graphs = set()  # (slots, chunk width, cache width, hidden layers) of every graph called
        self.compile_s = {}  # "batch B chunk N cache W" -> seconds its first call took (compile or cache load)
        self.bucket = 1  # the widest chunk width compiled (1 until a wider chunk comes)
        self._reserved, self._reserved_batch, self.min_width = 0, 1, int(min_width)
        self._graph = None
        self._pad = int(getattr(model.config, "pad_token_id", None) or 0)

    @classmethod
    def of(cls, verifier: Verifier, **options) -> CompiledVerifier:
        """The compiled copy of an eager `Verifier`: the same model and sampling settings (`options` as above)."""
        return cls(verifier.model, verifier.temperature, verifier.top_p, verifier.top_k, **options)

    def reserve(self, columns: int, batch: int = 1) -> None:
        """The longest row (prompt, generated tokens and one round's chunk) the next batches may reach, and their
        largest batch: a smaller batch then runs in as many slots, so that one graph serves a run's every batch (a
        last, partial batch never compiles a graph of its own mid-run)."""
        self._reserved = max(self._reserved, int(columns))
        self._reserved_batch = max(self._reserved_batch, int(batch))

    @property
    def rollback_stats(self):
        return None

    @torch.inference_mode()
    def start(self, ids: torch.Tensor, key_mask: torch.Tensor, hidden_layers: tuple[int, ...] | None = None):
        """ids [b, P] left-padded. Prefills every prompt but its last token, eagerly, into a fresh static cache
        with rows left-aligned. Returns the prefilled columns' hidden states [b, P-1, H*] (left-padded, as the
        eager verifier's) when asked."""
        batch, width = ids.shape
        lengths = key_mask.sum(-1)  # [b]
        slots = 1 << (max(batch, self._reserved_batch) - 1).bit_length()  # rounded up to a power of two
        columns = max(self._reserved, width + self.bucket)  # reserved: the longest row plus its widest chunk
        columns = max(self.min_width, 1 << (columns - 1).bit_length())
        cache = getattr(self, "_static", None)
        if cache is None or (cache.batch, cache.width) != (slots, columns):
            # a new shape: new buffers (and new graphs); the same shape reuses the buffers, so the graphs see the
            # very tensors they were compiled with
            cache = self._static = row_static_cache(slots, columns)
            cache.keyword = next(iter(cache_kwargs(self.model, None)))  # "cache" or "past_key_values"
        self.cache = cache
        self.cache_mask = key_mask[:, :0]  # unused by this class: the cache keeps lengths instead
        self.rounds, self._slots = 0, torch.arange(batch, device=ids.device)
        self.cache.lengths = torch.zeros(slots, dtype=torch.long, device=ids.device)
        prefix = width - 1
        # left-aligned prompts without their last token: row r's token t at column t, [slots, max(P-1, 1)]
        aligned = torch.full((slots, max(prefix, 1)), self._pad, dtype=ids.dtype, device=ids.device)
        order = torch.arange(width, device=ids.device)[None, :]
        source = (order + (width - lengths)[:, None]).clamp(max=width - 1)  # [b, P]: left-aligned column t
        if prefix:
            aligned[:batch] = ids.gather(1, source)[:, :prefix]
        positions = torch.arange(aligned.shape[1], device=ids.device)[None, :].expand(slots, -1)
        logits, hidden = _forward(self.model, self.cache, aligned, positions, hidden_layers, logits=False)
        self.cache.lengths[:batch] = lengths - 1
        if hidden_layers is None:
            return None
        if not prefix:
            return self._empty_hidden(ids, hidden_layers)
        # back to the eager verifier's layout: left-padded [b, P-1, H*]
        back = (order[:, :prefix] - (width - lengths)[:, None]).clamp(min=0)  # [b, P-1]: aligned column
        hidden = hidden[:batch].gather(1, back[..., None].expand(-1, -1, hidden.shape[-1]))
        return hidden * key_mask[:, :prefix, None].to(hidden.dtype)

    @torch.inference_mode()
    def score(self, chunk: torch.Tensor, hidden_layers: tuple[int, ...] | None = None):
        """chunk [b, n] (b: the live rows). Runs the graph of the smallest bucket >= n over every slot; returns
        (sampling logits [b, n, V], hidden states [b, n, H*] or None) of the live rows."""
        self.rounds += 1
        live, scored = chunk.shape
        bucket = 1 if scored == 1 else max(self.bucket, scored)
        self.bucket = max(self.bucket, bucket)
        slots = self.cache.batch
        full = torch.full((slots, bucket), self._pad, dtype=chunk.dtype, device=chunk.device)  # [slots, bucket]
        full[self._slots, :scored] = chunk
        positions = self.cache.lengths[:, None] + torch.arange(bucket, device=chunk.device)[None, :]
        if int(positions[self._slots, -1].max()) >= self.cache.width:
            raise ValueError(f"a row reached the static cache's {self.cache.width} columns: call reserve() with the "
                             "longest row before start()")
        raw, hidden = self._run(full, positions, hidden_layers)
        raw = raw[self._slots, :scored]  # [b, n, V]
        if hidden is not None:
            hidden = hidden[self._slots, :scored]
        check_finite(raw, "verifier", self.rounds)
        self._last_raw, self._last_chunk = raw, scored
        return sampling_logits(raw, self.temperature, self.top_p, self.top_k), hidden

    @torch.inference_mode()
    def commit(self, num_kept: torch.Tensor) -> None:
        """num_kept [b]: row r keeps the first num_kept[r] columns of the last chunk; rollback is its length."""
        self.cache.lengths[self._slots] += num_kept.to(self.cache.lengths.dtype)

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        """Keep only the live rows `rows` [n]; the others keep their slots, unread, until the batch ends."""
        self._slots = self._slots[rows]

    def _run(self, ids, positions, hidden_layers):
        """One forward of [slots, bucket] tokens: the compiled graph, or eagerly after a failed compile."""
        if not self.compile or self.fallback is not None:
            return _forward(self.model, self.cache, ids, positions, hidden_layers)
        if self._graph is None:
            self._graph = _compiled(self.model)
        key = (ids.shape[0], ids.shape[1], self.cache.width, hidden_layers)
        if key in self.graphs:
            with _frozen():
                return self._graph(self.cache, ids, positions, hidden_layers)
        return self._first_call(key, ids, positions, hidden_layers)

    def _first_call(self, key, ids, positions, hidden_layers):
        """The first call of a graph: compiled (or loaded from the cache) with progress; the cache cleared and
        tried again once if that fails, then the eager forward with one line saying why."""
        directory = compile_cache_dir()
        for attempt in (1, 2):
            begin = time.perf_counter()
            try:
                with _point_inductor_at(directory), _showing(self.progress, key), _frozen():
                    out = self._graph(self.cache, ids, positions, hidden_layers)
            except Exception as error:  # noqa: BLE001  (any failure to compile falls back; never a wrong answer)
                if attempt == 1:
                    shutil.rmtree(directory, ignore_errors=True)  # a corrupted or stale cache is rebuilt
                    torch._dynamo.reset()
                    self._graph = _compiled(self.model)
                    continue
                first_line = (str(error).strip().splitlines() or [""])[0][:200]
                self.fallback = f"{type(error).__name__}: {first_line}"
                print(f"specdiff: compiling the verifier failed ({self.fallback}); decoding eagerly", file=sys.stderr)
                return _forward(self.model, self.cache, ids, positions, hidden_layers)
            seconds = time.perf_counter() - begin
            self.graphs.add(key)
            self.compile_s[f"batch {key[0]} chunk {key[1]} cache {key[2]}"] = round(seconds, 2)
            if self.progress:
                print(f"specdiff: verifier graph (batch {key[0]}, chunk {key[1]}, cache {key[2]}) ready in "
                      f"{seconds:.1f} s (inductor cache: {directory})", file=sys.stderr)
            return out


def _forward(model, cache, ids, positions, hidden_layers, logits: bool = True):
    """ids, positions [b, n]: one forward writing columns `positions` of the static cache and reading, per query,
    the columns up to its own position. Returns (logits [b, n, V] or [b, 1, V], hidden [b, n, H*] or None)."""
    cache.positions = positions
    out = model(input_ids=ids, attention_mask=row_masks(model, positions, cache.width), position_ids=positions,
                output_hidden_states=hidden_layers is not None, logits_to_keep=0 if logits else 1,
                **{cache.keyword: cache, "use_cache": True})
    hidden = None
    if hidden_layers is not None:
        hidden = torch.cat([out.hidden_states[layer] for layer in hidden_layers], dim=-1)
    return out.logits, hidden


def compile_mode() -> str:
    """Inductor's mode: $SPECDIFF_COMPILE_MODE, else "max-autotune-no-cudagraphs" on a CPU with AMX and "default"
    elsewhere. The rule, measured (SmolLM2-135M, bfloat16, 2 threads, Intel Xeon with AMX; docs/engine.md, "Speed"):
    max-autotune picks inductor's AMX micro-GEMMs, 18.3 ms a one-token step against 24.0 ms for "default" and
    34.5 ms eager, for 75 s instead of 30-40 s of compiling per graph (once: the inductor cache keeps it). Without
    AMX its gain is unmeasured, so such a CPU keeps "default"."""
    mode = os.environ.get("SPECDIFF_COMPILE_MODE")
    if mode:
        return mode
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return "max-autotune-no-cudagraphs" if amx else "default"


def _compiled(model):
    """`_forward` compiled for one model, as a module holding it: its weights are then the graph's parameters, which
    freezing folds into the graph as constants (a model passed as an argument would stay a graph input). Each
    verifier gets its own copy of the step's code: dynamo keys its graphs by code object, and a frozen graph holds
    its model's weights, so two models never share one."""
    code = _Step.forward.__code__.replace(co_name=f"forward_{id(model):x}")
    forward = types.FunctionType(code, _Step.forward.__globals__, code.co_name)
    step = type("_Step", (_Step,), {"forward": forward})(model)
    from torch._inductor import list_mode_options

    options = {**list_mode_options(compile_mode()), "freezing": True}  # torch.compile takes mode or options
    return torch.compile(step, fullgraph=True, dynamic=False, options=options)


def _frozen():
    """Inductor's freezing on while dynamo traces (it then marks the weights static, guarded on their addresses) and
    while inductor compiles (it folds them in as constants); `options=` alone reaches inductor only, too late."""
    import contextlib

    import torch._inductor.config  # noqa: F401  (imported lazily by torch)

    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(freezing=True))
    # max-autotune's tables of timed choices (dozens of stderr lines per graph): the progress bar says enough
    stack.enter_context(torch._inductor.config.patch(autotune_num_choices_displayed=0,
                                                     max_autotune_report_choices_stats=False))
    stack.enter_context(torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT))
    return stack


class _Step(torch.nn.Module):
    """The compiled unit: one forward of `model` over the static cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, cache, ids, positions, hidden_layers):
        return _forward(self.model, cache, ids, positions, hidden_layers)


class _point_inductor_at:  # noqa: N801  (a context manager)
    """TORCHINDUCTOR_CACHE_DIR set to `directory` while compiling, unless the user set it."""

    def __init__(self, directory: Path):
        self.directory = directory

    def __enter__(self):
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # torch writes its default there once it used it
        if current is None or os.path.abspath(current) in (os.path.abspath(default_cache_dir()),
                                                           str(self.directory)):
            self.directory.mkdir(parents=True, exist_ok=True)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.directory)
        return self

    def __exit__(self, *exc):
        return False


class _showing:  # noqa: N801  (a context manager)
    """A bar while a graph is compiled or loaded (tqdm on a terminal, a line off one, nothing when disabled),
    refreshed every second so that its clock runs."""

    def __init__(self, enabled: bool, key):
        self.enabled, self.key = enabled, key

    def __enter__(self):
        if not self.enabled:
            return self
        self.bar = progress_bar(total=1, desc=f"compiling the verifier (batch {self.key[0]}, chunk {self.key[1]}; "
                                              "minutes the first time, seconds from the cache)", unit="graph")
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self.ticker.start()
        return self

    def _tick(self):
        while not self.stop.wait(1.0):
            self.bar.refresh()

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.ticker.join()
            self.bar.update(1)
            self.bar.close()
        return False
