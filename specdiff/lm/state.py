"""Recurrent and convolution state across speculative rounds: snapshot, roll back per row, compact a batch.

Hybrid models (Qwen3.5 and Qwen3-Next: Gated DeltaNet; Nemotron-H, Granite-4, Falcon-H1, Bamba, Zamba2:
Mamba-2; Jamba: Mamba-1; LFM2: short convolutions) keep, beside the KV cache of their attention layers, a
fixed-size state per row that a crop cannot shorten: the recurrent state S (one per layer and head) and the
convolution window (the last K inputs of a causal depthwise convolution). After a round each row must keep
the state of its committed prefix only: the chunk's first `kept[r]` columns.

Terms:
- segment: the columns fed since `begin` (the verifier's chunk [last committed, y_1..y_B]; the AR drafter's
  pending tokens and its drafted ones). `rewind(kept)` keeps, per row, the first kept[r] of them.
- base: a copy of every recurrent state taken at `begin`, the state before the segment.
- convolution window: during a segment transformers' past recording (`activate_past_recording`) is on, so
  a layer's conv state holds its input history since `begin` [b, C, K + T]; row r's new window is the K columns
  ending kept[r] columns into the segment, one gather per layer (`update_conv_state` derived).
- replay (verifier): during the chunk's forward the inputs of each layer's chunked kernel are recorded;
  the rollback calls that same kernel again on the base state with the step sizes of the rejected columns
  zeroed, which makes each of them the identity on the state:
    Gated DeltaNet (`torch_chunk_gated_delta_rule`): S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,
      so g_t = beta_t = 0 gives S_t = S_{t-1};
    Mamba-2 (`mamba2_chunk_scan`): h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t, so dt_t = 0 (after softplus and
      the time-step clamp) gives h_t = h_{t-1}.
  Only the rows that rejected something are replayed, and nothing when every row kept everything. The
  replay costs one kernel call per stateful layer on B + 1 tokens; no projection, no other layer runs again.
- checkpoints (drafter, and layers without a usable chunked kernel): the segment is fed one column per
  forward and every recurrent state is copied after each; the rollback selects, per row, the copy after
  its kept[r]-th column. Jamba's chunked scan (`mamba_selective_scan`) ignores the initial state in
  transformers 5.24, so a Jamba verifier is fed its chunk one token at a time ("stepwise" in the stats).

A stateful layer the engine does not know (a module whose forward updates a conv or recurrent state but
whose class is not in `MIXERS`) is refused when the cache is built, before generation, with its class name.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import time
import weakref

import torch

# Mixer classes whose state specdiff rolls back, by kind. `replay`: the chunked kernel (module global of the
# mixer's modeling file) recorded and replayed; `conv`: convolution state only; `stepwise`: no usable chunked
# kernel, fed one token per forward with checkpoints.
MIXERS = {
    "Qwen3_5GatedDeltaNet": "gated_delta", "Qwen3_5MoeGatedDeltaNet": "gated_delta",
    "Qwen3NextGatedDeltaNet": "gated_delta", "OlmoHybridGatedDeltaNet": "gated_delta",
    "NemotronHMamba2Mixer": "mamba2", "GraniteMoeHybridMambaLayer": "mamba2", "FalconH1Mixer": "mamba2",
    "BambaMixer": "mamba2", "Zamba2MambaMixer": "mamba2",
    "JambaMambaMixer": "stepwise",
    "Lfm2ShortConv": "conv", "Lfm2MoeShortConv": "conv",
}
KERNELS = {"gated_delta": ("torch_chunk_gated_delta_rule",), "mamba2": ("mamba2_chunk_scan",)}
BATCHED = {"gated_delta": ("query", "key", "value", "g", "beta"), "mamba2": ("hidden_states", "dt", "B", "C")}


class UnknownStatefulLayer(ValueError):
    """The model has a layer that keeps recurrent or convolution state of a kind specdiff cannot roll back."""


_STATEFUL = weakref.WeakKeyDictionary()  # model -> bool, computed once per model


def is_stateful(model) -> bool:
    """True when the model's cache holds recurrent or convolution state (transformers' linear-attention layers)."""
    if model not in _STATEFUL:
        _STATEFUL[model] = _is_stateful(model)
    return _STATEFUL[model]


def _is_stateful(model) -> bool:
    from transformers.cache_utils import get_layer_types_and_kwargs

    config = model.config.get_text_config(decoder=True)
    try:
        layer_types, _ = get_layer_types_and_kwargs(config)
    except Exception:  # a config without per-layer information: an attention model
        layer_types = []
    return any(layer_type in ("linear_attention", "conv", "hybrid", "hybrid_sliding") for layer_type in layer_types) or bool(
        _stateful_modules(model))


@functools.lru_cache(maxsize=None)
def _updates_state(module_class) -> bool:
    try:
        source = inspect.getsource(module_class.forward)
    except (OSError, TypeError):
        return False
    return "update_recurrent_state" in source or "update_conv_state" in source


def _stateful_modules(model) -> dict[int, torch.nn.Module]:
    """{layer index: mixer module} for every module whose forward updates a conv or recurrent state."""
    found = {}
    for module in model.modules():
        if getattr(module, "layer_idx", None) is not None and _updates_state(type(module)):
            found[int(module.layer_idx)] = module
    return found


def check_stateful_layers(model) -> dict[int, str]:
    """{layer index: kind} of the model's stateful layers; UnknownStatefulLayer names any class not in MIXERS."""
    _check_transformers()
    kinds, unknown = {}, set()
    for index, module in _stateful_modules(model).items():
        name = type(module).__name__
        if name in MIXERS:
            kinds[index] = MIXERS[name]
        else:
            unknown.add(name)
    if unknown:
        raise UnknownStatefulLayer(
            f"{type(model).__name__} has layers that keep recurrent or convolution state specdiff cannot roll "
            f"back: {', '.join(sorted(unknown))} (known: {', '.join(sorted(MIXERS))})")
    return kinds


def _check_transformers() -> None:
    """The rollback reads transformers 5.24's layout of the hybrid layers (module docstring); 5.25 moved the state
    updates into free functions, so a newer transformers is refused here, by name, not part-way into a round."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    if (major, minor) >= (5, 25):
        raise UnknownStatefulLayer(
            f"hybrid (recurrent-state) models need transformers < 5.25; this is {transformers.__version__}: "
            "pip install 'transformers<5.25'")


def new_stateful_cache(model):
    """A `StatefulCache` for a hybrid model (see the module docstring)."""
    return StatefulCache(model)


def _stateful_cache_class():
    from transformers.cache_utils import (DynamicCache, DynamicLayer, DynamicSlidingWindowLayer,
                                          LinearAttentionAndFullAttentionLayer, LinearAttentionCacheLayerMixin)

    class StatefulCache(DynamicCache):
        """transformers' DynamicCache built from the model's config, with full-length attention layers (the
        window is applied by the masks, as in `specdiff.lm.cache.new_cache`), conv past recording on, and
        per-row rollback of every recurrent and convolution state. `crop` and `batch_select_indices` act on
        every layer type (attention keys and values, conv windows, recurrent states)."""

        def __init__(self, model):
            self.kinds = check_stateful_layers(model)
            super().__init__(config=model.config)
            for index, layer in enumerate(self.layers):
                if isinstance(layer, LinearAttentionCacheLayerMixin) and isinstance(layer, DynamicLayer):
                    self.layers[index] = LinearAttentionAndFullAttentionLayer(layer.number_of_states)
                elif isinstance(layer, DynamicSlidingWindowLayer):
                    self.layers[index] = DynamicLayer()
            self.stateful = [i for i, layer in enumerate(self.layers)
                             if isinstance(layer, LinearAttentionCacheLayerMixin)]
            missing = [i for i in self.stateful if i not in self.kinds]
            if missing:
                raise UnknownStatefulLayer(f"{type(model).__name__}: cache layers {missing} keep state but no module "
                                           "of the model updates them")
            self.mixer_modules = sorted({sys.modules[type(m).__module__] for i, m in _stateful_modules(model).items()
                                         if self.kinds.get(i) in KERNELS}, key=lambda m: m.__name__)
            self.stepwise = any(kind == "stepwise" for kind in self.kinds.values())
            self.stats = {"rewinds": 0, "replays": 0, "replay_skipped": 0, "checkpoint_rewinds": 0,
                          "rewind_s": 0.0, "stepwise_forwards": 0}
            self._base = None
            self._records, self._pending, self._checkpoints, self._fed = {}, None, None, 0

        # -- the segment ---------------------------------------------------------------------------------
        def begin(self, checkpoints: bool = False) -> None:
            """Starts a segment: copies every recurrent state (the base). checkpoints=True: the caller feeds one
            column per forward and calls `checkpoint()` after each."""
            self._base = self._recurrent_copy()
            self._records, self._pending, self._fed = {}, None, 0
            for index in self.stateful:  # conv inputs kept whole until the rewind (transformers' past recording)
                self.layers[index].activate_past_recording()
            self._checkpoints = [self._base] if checkpoints else None

        @contextlib.contextmanager
        def feeding(self, columns: int):
            """Wraps one chunked forward of `columns` new columns of a replayed segment: records the inputs of
            every stateful layer's chunked kernel."""
            patched = []
            if self._checkpoints is not None:
                raise RuntimeError("a checkpointed segment is fed one column per forward, then checkpoint()")
            for module in self.mixer_modules:
                for kind, names in KERNELS.items():
                    for name in names:
                        if hasattr(module, name):
                            original = getattr(module, name)
                            setattr(module, name, self._recorder(original, kind))
                            patched.append((module, name, original))
            try:
                yield
            finally:
                for module, name, original in patched:
                    setattr(module, name, original)
                self._fed += columns

        def checkpoint(self) -> None:
            """After a one-column forward of a checkpointed segment: keeps a copy of every recurrent state."""
            self._checkpoints.append(self._recurrent_copy())
            self._fed += 1

        def rewind(self, kept: torch.Tensor) -> None:
            """kept [b]: rows keep the first kept[r] columns of the segment; every state returns to them."""
            begin = time.perf_counter()
            kept = kept.to(torch.long)
            dropped = self._fed - kept  # [b]
            if bool((dropped < 0).any()):
                raise ValueError(f"rewind keeps more columns than were fed ({self._fed})")
            for index in self.stateful:
                self._rewind_conv(self.layers[index], dropped)
                self.layers[index].record_past = False  # outside a segment: transformers' fixed-size window
            if bool((dropped > 0).any()) and self._base is not None:
                if self._checkpoints is not None:
                    self._select_checkpoints(kept)
                    self.stats["checkpoint_rewinds"] += 1
                else:
                    self._replay(kept)
                    self.stats["replays"] += 1
            else:
                self.stats["replay_skipped"] += 1
            self._base, self._records, self._pending, self._checkpoints, self._fed = None, {}, None, None, 0
            self.stats["rewinds"] += 1
            self.stats["rewind_s"] += time.perf_counter() - begin

        # -- every layer type --------------------------------------------------------------------------
        def crop(self, tokens_to_remove: int) -> None:
            """Crops the attention keys and values only (states are rolled back by `rewind`)."""
            for layer in self.layers:
                if isinstance(layer, DynamicLayer):
                    DynamicLayer.crop(layer, tokens_to_remove)

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            for layer in self.layers:
                if isinstance(layer, LinearAttentionCacheLayerMixin):
                    for state in range(layer.number_of_states):
                        if layer.is_conv_states_initialized[state]:
                            layer.conv_states[state] = layer.conv_states[state][indices]
                        if layer.is_recurrent_states_initialized[state]:
                            layer.recurrent_states[state] = layer.recurrent_states[state][indices]
                if isinstance(layer, DynamicLayer):
                    DynamicLayer.batch_select_indices(layer, indices)
                elif not isinstance(layer, LinearAttentionCacheLayerMixin):
                    layer.batch_select_indices(indices)

        # -- recording --------------------------------------------------------------------------------
        def update_recurrent_state(self, recurrent_states, layer_idx: int, state_idx: int = 0, **kwargs):
            if self._pending is not None:
                self._records[(layer_idx, state_idx)] = self._pending
                self._pending = None
            return super().update_recurrent_state(recurrent_states, layer_idx, state_idx, **kwargs)

        def _recorder(self, kernel, kind):
            signature = inspect.signature(kernel)

            def recorded(*args, **kwargs):
                bound = signature.bind(*args, **kwargs)
                self._pending = (kind, kernel, dict(bound.arguments))
                return kernel(*args, **kwargs)

            return recorded

        # -- rollback ---------------------------------------------------------------------------------
        def _recurrent_copy(self) -> dict[int, dict[int, torch.Tensor]]:
            copies = {}
            for index in self.stateful:
                layer = self.layers[index]
                copies[index] = {s: layer.recurrent_states[s].clone() for s in range(layer.number_of_states)
                                 if layer.is_recurrent_states_initialized[s]}
            return copies

        def _rewind_conv(self, layer, dropped: torch.Tensor) -> None:
            """Each row's window: the K conv inputs ending dropped[r] columns before the end of the history."""
            for state in range(layer.number_of_states):
                if not layer.is_conv_states_initialized[state]:
                    continue
                history = layer.conv_states[state]  # [b, C, L]
                width = layer.conv_kernel_size[state]
                pad = max(0, width + int(dropped.max()) - history.shape[-1])
                if pad:
                    history = torch.nn.functional.pad(history, (pad, 0))
                length = history.shape[-1]
                if not bool(dropped.any()):
                    layer.conv_states[state] = history[..., length - width:].contiguous()
                    continue
                start = length - width - dropped  # [b]
                index = start[:, None] + torch.arange(width, device=history.device)[None, :]  # [b, K]
                index = index[:, None, :].expand(history.shape[0], history.shape[1], width)
                layer.conv_states[state] = history.gather(-1, index)  # [b, C, K]

        def _select_checkpoints(self, kept: torch.Tensor) -> None:
            for index in self.stateful:
                layer = self.layers[index]
                for state in self._checkpoints[-1][index]:
                    latest = self._checkpoints[-1][index][state]
                    stacked = torch.stack([c[index].get(state, torch.zeros_like(latest))
                                           for c in self._checkpoints])  # [T+1, b, ...]
                    rows = torch.arange(stacked.shape[1], device=stacked.device)
                    layer.recurrent_states[state].copy_(stacked[kept.to(stacked.device), rows])

        def _replay(self, kept: torch.Tensor) -> None:
            """The recorded chunked kernel again, on the base state, rejected columns' step sizes zeroed."""
            rows = torch.nonzero(kept < self._fed).flatten()  # [n]: only rows that rejected something
            for (index, state), (kind, kernel, arguments) in self._records.items():
                live = self.layers[index].recurrent_states[state]
                base = self._base[index].get(state)
                base = torch.zeros_like(live) if base is None else base
                columns = arguments[BATCHED[kind][0]].shape[1]
                keep = torch.arange(columns, device=kept.device)[None, :] < (kept[rows] - (self._fed - columns))[:, None]
                args = {name: value for name, value in arguments.items() if name not in ("args", "kwargs")}
                args.update(arguments.get("kwargs", {}))
                for name in BATCHED[kind] + ("z",):
                    if torch.is_tensor(args.get(name)):
                        args[name] = args[name][rows]
                if kind == "gated_delta":  # g, beta [n, T, H]
                    args["g"] = args["g"] * keep[..., None]
                    args["beta"] = args["beta"] * keep[..., None]
                    args.update(initial_state=base[rows], output_final_state=True)
                    _, final = kernel(**args)
                else:  # mamba2: the effective step dt [n, T, H] after bias, softplus and clamp, zeroed
                    dt = args["dt"]
                    if args.get("dt_bias") is not None:
                        dt = dt + args["dt_bias"].to(dt.dtype)
                    if args.get("dt_softplus"):
                        dt = torch.nn.functional.softplus(dt)
                    low, high = args.get("dt_limit", (0.0, float("inf")))
                    dt = torch.clamp(dt, min=low, max=high) * keep[..., None]
                    args.update(dt=dt, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                                initial_states=base[rows], return_final_states=True)
                    _, final = kernel(**args)
                live[rows] = final.to(live.dtype)

    return StatefulCache


def _rows(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """rows [b] bool, shaped to broadcast over a state [b, ...]."""
    return rows.view(-1, *([1] * (like.dim() - 1)))


@functools.lru_cache(maxsize=None)
def _class():
    return _stateful_cache_class()


def StatefulCache(model):  # noqa: N802  (a factory: transformers is imported lazily)
    return _class()(model)
