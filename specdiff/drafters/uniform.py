"""Uniform diffusion drafter: DiffusionGemma (DiffusionGemma Team 2026; uniform noise as in Austin et
al. 2021 and Sahoo et al. 2025's Duo), as the first paper drafts with it.

The model is `DiffusionGemmaForBlockDiffusion` (transformers >= 5.24): a causal encoder writes the
committed tokens into a KV cache, and a decoder denoises a canvas of B tokens that attends to that
cache and, bidirectionally, to itself, fed its previous step's logits (self-conditioning). The
drafter keeps the encoder cache across rounds: each round encodes only the committed tokens it has
not seen (the accepted ones and the correction or bonus token); drafted tokens are never cached.

Drafting (the paper's Appendix F): the canvas starts as uniform random tokens and is denoised in a
fixed K steps, replacing DiffusionGemma's entropy-bound sampler and adaptive stopping. At step
k = 1..K the decoder's logits are scaled by a temperature annealed linearly from 0.8 to 0.4
(`temperature=(t_first, t_last)`; K = 1 uses t_last, 0.4), filtered by top-p, and every position
is sampled. Before the last step, as DiffusionGemma's sampler does, the round(B k / K) positions the
order ranks first ("entropy": lowest entropy first; or "random") keep their sample and the others
are renoised uniformly. At step K every position keeps its sample: the final-step transition
probabilities are q (Section 3.2, Proposition 2).

Exactness (marginal mode): exact at every K. Given the canvas and self-conditioning logits that
enter the last step, the B tokens are drawn independently, token i from q_i; so conditionally on
that state (auxiliary randomness the verifier never sees), each y_i is drawn from q_i given the
drafted tokens to its left, which is all per-position rejection sampling needs (the same argument
as Proposition 2, position by position). Unlike masked diffusion, no token's q is recorded at an
earlier step than the tokens that depended on it. tests/engine/test_drafters_exactness.py checks
this by enumeration at K = 1, 2, 3.

Two backbones:
- DiffusionGemma (`DiffusionGemmaForBlockDiffusion`): the encoder / decoder described above, with
  self-conditioning;
- a causal-LM class run block-causally (the zoo's `uniform-drafter`: a Qwen3 backbone with Dream's
  shift, initialised from the masked drafter): committed tokens are encoded once, causally, into a KV
  cache kept across rounds (`specdiff.drafters.prefix_cache.PersistentPrefix`, as the block drafter),
  and each step encodes only the canvas, which attends to the cache and bidirectionally to itself. No
  self-conditioning (the logits of the previous step are not an input of that class).
The sampling loop and its exactness argument are the same for both.

Orders: "entropy" (DiffusionGemma's), "random", or "left_to_right" (before the last step the first
round(B k / K) positions keep their sample). `entropy_bound=b` adds DiffusionGemma's adaptive stopping:
a step whose every position has entropy <= b (nats, after temperature and top-p) becomes the last one,
so K is an upper bound. The decision is taken from the logits entering the step, before anything is
sampled from them, so it is a function of the state Z and exactness is kept.

Loading a real checkpoint where you have one:
    dg = DiffusionGemmaForBlockDiffusion.from_pretrained("google/diffusiongemma-26B-A4B-it")
    drafter = sd.UniformDiffusionDrafter(dg, steps=4)   # the verifier: Gemma-4-31B
"""
from __future__ import annotations

import torch

from specdiff.drafters.base import Draft, Drafter
from specdiff.drafters.registry import KindSpec, register
from specdiff.lm.cache import keep_columns
from specdiff.lm.masks import position_ids
from specdiff.lm.sampling import check_finite, check_sampling, sample_rows, sampling_probs

UNIFORM_ORDERS = ("entropy", "random", "left_to_right")


class UniformDiffusionDrafter(Drafter):
    """Drafts B tokens per round by uniform diffusion in a fixed K steps (see module docstring).

    model: `DiffusionGemmaForBlockDiffusion` (or a class with its encoder / decoder interface), or a
    causal-LM class run block-causally (Qwen3, the zoo's uniform drafter; shifted logits per its
    config's `logits_shift`, or `shift_logits=`)."""

    exact_marginal = True  # the last step samples every position independently (module docstring)

    def __init__(self, model, steps: int = 1, temperature: tuple[float, float] | float = (0.8, 0.4),
                 top_p: float = 0.95, top_k: int = 0, order: str = "entropy", self_conditioning: bool = True,
                 entropy_bound: float | None = None, shift_logits: bool | None = None):
        if isinstance(steps, bool) or int(steps) != steps or steps < 1:
            raise ValueError(f"steps (K) must be an integer >= 1, got {steps}")
        if order not in UNIFORM_ORDERS:
            raise ValueError(f"unknown order {order!r} for a uniform drafter; choose from {UNIFORM_ORDERS}")
        first, last = (temperature, temperature) if isinstance(temperature, (int, float)) else temperature
        for value in (first, last):
            check_sampling(value, top_p, top_k, "UniformDiffusionDrafter")
        if entropy_bound is not None and not entropy_bound >= 0:
            raise ValueError(f"entropy_bound must be >= 0 (nats) or None, got {entropy_bound}")
        self.encoder_decoder = hasattr(getattr(model, "model", None), "encoder")
        if not self.encoder_decoder and "CausalLM" not in type(model).__name__:
            raise ValueError(f"{type(model).__name__} is neither a DiffusionGemma-style model (model.encoder / "
                             "model.decoder) nor a causal-LM class to run block-causally: a uniform drafter needs "
                             "DiffusionGemmaForBlockDiffusion or, e.g., Qwen3ForCausalLM")
        if shift_logits is None:
            shift_logits = bool(getattr(model.config, "logits_shift", 0) or 0)
        self.shift_logits, self.entropy_bound = bool(shift_logits), entropy_bound
        self.model, self.steps, self.order = model, int(steps), order
        self.self_conditioning = self_conditioning and self.encoder_decoder
        self.persistent = None
        self.temperatures = (float(first), float(last))
        self.top_p, self.top_k = top_p, top_k
        self.cache, self.cache_mask = None, None

    def step_temperatures(self) -> list[float]:
        """Temperature of each of the K steps: linear from t_first to t_last; t_last alone at K = 1."""
        first, last = self.temperatures
        if self.steps == 1:
            return [last]
        return [first + (last - first) * k / (self.steps - 1) for k in range(self.steps)]

    @torch.inference_mode()
    def start(self, ids, key_mask, verifier_hidden=None) -> None:
        if not self.encoder_decoder:
            from specdiff.drafters.prefix_cache import PersistentPrefix

            self.persistent = PersistentPrefix(self.model, self.shift_logits, key_mask, committed_attention="causal")
            self.cache = self.persistent.cache
            return
        from transformers import DynamicCache

        self.cache = DynamicCache()  # one full layer per model layer: sliding windows are applied by the masks
        self.cache_mask = key_mask[:, :0]  # [b, C]: which cache columns hold real tokens

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded; key_mask [b, L]. Returns Draft(tokens [b, B], probs [b, B, V])."""
        if self.cache is None:
            self.start(ids, key_mask)
        batch, device = ids.shape[0], ids.device
        noise_vocab = self.model_vocab_size
        canvas = torch.randint(0, noise_vocab, (batch, block_size), generator=generator, device=device)
        step_logits = self._step_logits_fn(ids, key_mask, block_size)
        conditioning, temperatures = None, self.step_temperatures()
        for k, temperature in enumerate(temperatures, start=1):
            logits = step_logits(canvas, conditioning)
            check_finite(logits, "drafter")
            probs = sampling_probs(self.trim(logits), temperature, self.top_p, self.top_k)  # [b, B, V]
            # [b, B] entropies, computed once: the stopping rule and the entropy order both read them
            entropy = _entropy(probs) if self.entropy_bound is not None or self.order == "entropy" else None
            last = k == len(temperatures) or (self.entropy_bound is not None
                                              and bool((entropy <= self.entropy_bound).all()))
            sampled = sample_rows(probs, generator)  # [b, B]: every position drawn independently from q_i
            if last:
                return Draft(tokens=sampled, probs=probs)
            keep = _kept_positions(self.order, probs, entropy, round(block_size * k / self.steps), generator)  # [b, B]
            noise = torch.randint(0, noise_vocab, (batch, block_size), generator=generator, device=device)
            canvas = torch.where(keep, sampled, noise)
            if self.self_conditioning:
                conditioning = (logits.float() / max(temperature, 1e-6)).to(logits.dtype)
        raise AssertionError("unreachable")

    def _step_logits_fn(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int):
        """(canvas [b, B], self-conditioning logits or None) -> logits [b, B, V], one denoising step; the
        committed tokens not cached yet are encoded first (DiffusionGemma) or with the first step (causal LM)."""
        batch, device = ids.shape[0], ids.device
        if not self.encoder_decoder:
            full = torch.cat([key_mask, torch.ones(batch, block_size, dtype=torch.bool, device=device)], 1)
            placeholder = torch.zeros(batch, block_size, dtype=ids.dtype, device=device)
            step = self.persistent.step_logits_fn(torch.cat([ids, placeholder], 1), full, block_size)
            return lambda canvas, conditioning: step(canvas)
        self._encode_pending(ids, key_mask)
        full_mask = torch.cat([self.cache_mask, torch.ones(batch, block_size, dtype=torch.bool, device=device)], 1)
        positions = position_ids(full_mask)[:, -block_size:]  # [b, B]
        attend = full_mask[:, None, None, :].expand(batch, 1, block_size, full_mask.shape[1])  # [b, 1, B, C + B]
        masks = {kind: attend for kind in set(self._text_config.layer_types)}

        def step(canvas, conditioning):
            return self.model(cache=self.cache, decoder_input_ids=canvas, decoder_attention_mask=masks,
                              decoder_position_ids=positions, self_conditioning_logits=conditioning).logits
        return step

    def _encode_pending(self, ids: torch.Tensor, key_mask: torch.Tensor) -> None:
        """Feeds the committed tokens not cached yet to the causal encoder, which appends them to the cache."""
        pending = key_mask.sum(-1) - self.cache_mask.sum(-1)  # [b] >= 1: the newest token is never cached
        width = int(pending.max())
        if width < 1:
            raise RuntimeError("UniformDiffusionDrafter.propose needs at least one committed token it has not encoded: "
                               "call commit() after each propose (the engine does), or start() again")
        columns = torch.arange(width, device=ids.device)[None, :]
        chunk_mask = columns >= (width - pending)[:, None]  # [b, width]
        full_mask = torch.cat([self.cache_mask, chunk_mask], dim=1)  # [b, C + width]
        positions = position_ids(full_mask)
        masks = {kind: causal_chunk_mask(full_mask, positions, width, self._window(kind))
                 for kind in set(self._text_config.layer_types)}
        self.model.model.encoder(input_ids=ids[:, -width:], attention_mask=masks, position_ids=positions[:, -width:],
                                 cache=self.cache)
        self.cache_mask = keep_columns(self.cache, full_mask)

    @torch.inference_mode()
    def commit(self, num_accepted: torch.Tensor, verifier_hidden=None) -> None:
        """Nothing drafted was cached: the next `propose` encodes the accepted and correction tokens."""

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        if self.persistent is not None:
            self.persistent.select(rows)
            return
        self.cache.batch_select_indices(rows)
        self.cache_mask = keep_columns(self.cache, self.cache_mask[rows])

    @property
    def _text_config(self):
        return self.model.config.get_text_config()

    def _window(self, kind: str) -> int | None:
        return getattr(self._text_config, "sliding_window", None) if kind == "sliding_attention" else None


def causal_chunk_mask(full_mask: torch.Tensor, positions: torch.Tensor, width: int,
                      window: int | None = None) -> torch.Tensor:
    """[b, 1, width, L]: the last `width` columns of full_mask [b, L] as causal queries over every real key at
    or before them (within `window` positions, if given); each query also sees itself (no empty rows)."""
    length = full_mask.shape[1]
    query = torch.arange(length - width, length, device=full_mask.device)[:, None]  # [W, 1]
    key = torch.arange(length, device=full_mask.device)[None, :]  # [1, L]
    allowed = (key <= query)[None] & full_mask[:, None, :]  # [b, W, L]
    if window is not None:
        distance = positions[:, -width:, None] - positions[:, None, :]  # [b, W, L]
        allowed &= distance < window
    return (allowed | (key == query)[None])[:, None]


def _kept_positions(order: str, probs: torch.Tensor, entropy: torch.Tensor | None, count: int,
                    generator) -> torch.Tensor:
    """[b, B] bool: the `count` positions of each row that keep their sample (lowest entropy first, by
    `entropy` [b, B]; or random; or the leftmost)."""
    if order == "random":
        score = torch.rand(probs.shape[:2], generator=generator, device=probs.device)
    elif order == "left_to_right":
        score = -torch.arange(probs.shape[1], dtype=torch.float, device=probs.device)[None].expand(probs.shape[:2])
    else:
        score = -entropy  # [b, B]
    chosen = score.topk(count, dim=-1).indices
    return torch.zeros(probs.shape[:2], dtype=torch.bool, device=probs.device).scatter_(1, chosen, True)


def _entropy(probs: torch.Tensor) -> torch.Tensor:
    """[b, B] entropy (nats) of each position's distribution probs [b, B, V]."""
    return -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)


class UniformKind(KindSpec):
    """Uniform diffusion drafters: DiffusionGemma (`DiffusionGemmaForBlockDiffusion`), specdiff's uniform
    drafter (a Qwen3 backbone run block-causally). K steps, no threshold."""

    rank = 2

    name, zoo_model, priority = "uniform", "uniform-drafter", 20
    describes = "DiffusionGemma (model_type diffusion_gemma), specdiff uniform drafters"
    option_keys = ("steps", "order", "self_conditioning", "entropy_bound")
    effort = ("steps",)

    def recognise(self, config):
        return (config.get("specdiff_role") == "uniform-drafter" or config.get("model_type") == "diffusion_gemma"
                or "DiffusionGemma" in " ".join(config.get("architectures") or []))

    def loader(self, config, transformers):
        known = [getattr(transformers, a) for a in config.get("architectures") or [] if hasattr(transformers, a)]
        return known[0] if known else transformers.AutoModel

    def build(self, model, config, defaults, tokenizer, target=None, **options):
        self.check_options(options)
        return UniformDiffusionDrafter(model, **{**defaults, **options})


register(UniformKind())
