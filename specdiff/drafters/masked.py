"""Masked diffusion drafter: Dream (Ye et al. 2025) and LLaDA (Nie et al. 2025) conventions.

Each round the drafter appends B mask tokens (the canvas) to the committed tokens and unmasks them
in K denoising steps (the diffusion effort), or, with a confidence threshold tau, as many steps as
it takes to unmask every position whose confidence exceeds tau, at least one per step. Each step
re-encodes the sequence with bidirectional attention, samples every masked position from its
filtered distribution, and keeps the positions the unmasking order ranks first:
- "entropy": lowest entropy first (Dream's default); "confidence": highest probability of the
  sampled token; "margin": largest gap between the two most likely tokens; "random";
  "left_to_right": strictly left to right, which keeps marginal verification exact.
The distribution a position was sampled from at the step it was unmasked is its q (the final-step
marginal of the first paper's Section 3.2 and Proposition 2).

Conventions, read from the model's config unless given:
- `shift_logits`: Dream shifts (the logit at position j-1 is the distribution of token j, inherited
  from its autoregressive initialisation); LLaDA and BERT-style masked LMs do not. specdiff's zoo
  records `logits_shift` in config.json, Dream checkpoints have `model_type == "Dream"`.
- `mask_token_id`, `pad_token_id`: the config's, then the tokenizer's.
- A causal-LM class (the zoo drafter, Dream) is run bidirectionally by handing its layers a
  prepared non-causal mask; a masked-LM class (`BertForMaskedLM`, `ModernBertForMaskedLM`, LLaDA)
  is bidirectional by construction and gets a plain 2D padding mask.

Loading a real checkpoint where you have one:
    dream = AutoModel.from_pretrained("Dream-org/Dream-v0-Instruct-7B", trust_remote_code=True)
    drafter = sd.MaskedDiffusionDrafter(dream, steps=4, tokenizer=tok)   # shift read from model_type
    llada = AutoModel.from_pretrained("GSAI-ML/LLaDA-8B-Instruct", trust_remote_code=True)
    drafter = sd.MaskedDiffusionDrafter(llada, steps=4, shift_logits=False, mask_token_id=126336)

Prefix caches (`specdiff.drafters.prefix_cache`), approximations that change only what is drafted:
q is still what was sampled from, so verification is exactly as exact as without them.
- `prefix_cache=True` ("round", Fast-dLLM's): the committed tokens are encoded once per round and
  their keys and values reused across the K steps; only the last committed token and the canvas
  are re-encoded.
- `prefix_cache="persistent"`: every committed token is encoded once, when it is committed: each
  round's newly committed tokens as one block, bidirectional among themselves and attending to the
  blocks before them; each step encodes only the canvas (and, at a round's first step, the newly
  committed tokens).
"""
from __future__ import annotations

import torch

from specdiff.drafters.base import Draft, Drafter
from specdiff.drafters.prefix_cache import PersistentPrefix, round_cache_steps
from specdiff.drafters.registry import KindSpec, register
from specdiff.lm.bidirectional import bidirectional_logits
from specdiff.lm.bidirectional import is_causal_lm_class as _is_causal_lm_class
from specdiff.lm.masks import position_ids
from specdiff.drafters.unmasking import ORDERS, DraftIndex, unmask_canvas, unmask_planned
from specdiff.lm.sampling import check_sampling

PREFIX_CACHES = (False, "round", "persistent")


class MaskedDiffusionDrafter(Drafter):
    """Drafts B tokens per round by masked diffusion: K steps, or a confidence threshold tau.

    Exactness (marginal mode): exact for K = 1 and for order="left_to_right" with a fixed K, where
    every drafted token is drawn from its q given the tokens to its left; otherwise approximate
    (use proposal="point_mass" for an exact result)."""

    committed_attention = "block"  # how a persistent prefix cache encodes committed tokens (prefix_cache.py)

    def __init__(self, model, steps: int = 1, threshold: float | None = None, order: str = "entropy",
                 temperature: float = 0.2, top_p: float = 0.95, top_k: int = 0, shift_logits: bool | None = None,
                 mask_token_id: int | None = None, pad_token_id: int | None = None, tokenizer=None,
                 prefix_cache: bool | str = False):
        if int(steps) != steps or steps < 1:
            raise ValueError(f"steps (K) must be an integer >= 1, got {steps}")
        if threshold is not None and not 0 < threshold <= 1:
            raise ValueError(f"threshold (tau) must be in (0, 1], got {threshold}")
        if order not in ORDERS:
            raise ValueError(f"unknown unmasking order {order!r}; choose from {ORDERS}")
        check_sampling(temperature, top_p, top_k, "MaskedDiffusionDrafter")
        self.model, self.steps, self.threshold, self.order = model, int(steps), threshold, order
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.causal_class = _is_causal_lm_class(model)
        self.shift_logits = _resolve_shift(model, shift_logits)
        self.mask_token_id = _resolve_id(model, tokenizer, "mask_token_id", mask_token_id)
        self.pad_token_id = _resolve_id(model, tokenizer, "pad_token_id", pad_token_id)
        prefix_cache = {False: False, None: False, True: "round"}.get(prefix_cache, prefix_cache)
        if prefix_cache not in PREFIX_CACHES:
            raise ValueError(f"unknown prefix_cache {prefix_cache!r}: expected False, True / 'round', or 'persistent'")
        if prefix_cache and not self.causal_class:
            raise ValueError("prefix_cache needs a model with a KV cache (a causal-LM class run bidirectionally, "
                             f"as Dream); {type(model).__name__} has none")
        self.prefix_cache, self.persistent = prefix_cache, None

    @property
    def exact_marginal(self) -> bool:
        return self.threshold is None and (self.steps == 1 or self.order == "left_to_right")

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded; key_mask [b, L]. Returns Draft(tokens [b, B], probs [b, B, V])."""
        batch = ids.shape[0]
        canvas = torch.full((batch, block_size), self.mask_token_id, dtype=ids.dtype, device=ids.device)
        tokens = torch.cat([ids, canvas], dim=1)  # [b, L + B]
        full_mask = torch.cat([key_mask, torch.ones_like(canvas, dtype=torch.bool)], dim=1)
        step_logits = self._step_logits_fn(tokens, full_mask, block_size)
        out, probs = unmask_canvas(step_logits, tokens[:, -block_size:], self.mask_token_id, self.steps,
                                   self.threshold, self.order, self.temperature, self.top_p, self.top_k, generator,
                                   self._vocabulary())
        return Draft(tokens=out, probs=probs)

    def exact_marginal_with(self, steps_vary: bool = False, reorders: bool = False) -> bool:
        """With K chosen per row and round, q is the marginal only when unmasking strictly left to right; a
        finish level (confident positions first) breaks that order, so then only one fixed step is exact."""
        if reorders:
            return self.threshold is None and self.steps == 1 and not steps_vary
        if steps_vary:
            return self.threshold is None and self.order == "left_to_right"
        return self.exact_marginal

    @torch.inference_mode()
    def propose_planned(self, ids: torch.Tensor, key_mask: torch.Tensor, plan,
                        generator: torch.Generator | None = None) -> Draft:
        """A draft after a controller's plan: row r unmasks B_r positions in K_r steps (or by tau) and stops
        denoising where its confidence drops (`unmask_planned`). Returns Draft(tokens [b, W], probs
        [b, W, V], lengths [b], confidence [b, W]), W = max B_r."""
        batch, width = ids.shape[0], plan.max_block
        canvas = torch.full((batch, width), self.mask_token_id, dtype=ids.dtype, device=ids.device)
        tokens = torch.cat([ids, canvas], dim=1)  # [b, L + W]
        full_mask = torch.cat([key_mask, torch.ones_like(canvas, dtype=torch.bool)], dim=1)
        step_logits = self._step_logits_fn(tokens, full_mask, width)
        sizes = torch.tensor(plan.block_sizes, device=ids.device)
        steps = plan.steps if plan.steps is not None else [self.steps] * batch
        floors = None if plan.floors is None else torch.tensor(plan.floors, device=ids.device)
        out, probs, lengths, confidence = unmask_planned(
            step_logits, tokens[:, -width:], self.mask_token_id, sizes, steps, floors, self.threshold, self.order,
            self.temperature, self.top_p, self.top_k, generator, self._vocabulary(),
            None if plan.finish is None else torch.tensor(plan.finish, device=ids.device))
        return Draft(tokens=out, probs=probs, lengths=lengths, confidence=confidence)

    def _vocabulary(self):
        """What `unmasking` fits the logits with: the draft vocabulary's index, else output_vocab."""
        if self.draft_to_target is None:
            return self.output_vocab
        rows = (self.draft_to_target == self.mask_token_id).nonzero()  # once per round, not per step
        return DraftIndex(self.draft_to_target, int(self.target_vocab), int(rows[0, 0]) if len(rows) else None)

    def _step_logits_fn(self, tokens: torch.Tensor, key_mask: torch.Tensor, block_size: int):
        """A function canvas [b, B] -> logits [b, B, V] of the canvas positions, one denoising step."""
        if self.prefix_cache == "persistent":
            return self.persistent.step_logits_fn(tokens, key_mask, block_size)
        if self.prefix_cache == "round":
            return round_cache_steps(self.model, tokens, key_mask, block_size, self.shift_logits)
        model, shift = self.model, self.shift_logits
        columns = torch.arange(tokens.shape[1] - block_size, tokens.shape[1], device=tokens.device)
        positions, padded = position_ids(key_mask), not bool(key_mask.all())  # once per round

        def step(canvas):
            tokens[:, -block_size:] = canvas
            return bidirectional_logits(model, tokens, key_mask, columns, shift, positions=positions, padded=padded)
        return step

    @torch.inference_mode()
    def start(self, ids, key_mask, verifier_hidden=None) -> None:
        if self.prefix_cache == "persistent":
            self.persistent = PersistentPrefix(self.model, self.shift_logits, key_mask, self.committed_attention)

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        if self.prefix_cache == "persistent":
            self.persistent.select(rows)

    @torch.inference_mode()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, canvas_tokens: int,
                 steps: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Standalone generation: a canvas of `canvas_tokens` masks after each left-padded prompt [b, P],
        denoised in `steps` steps (default: one token per step). Returns the canvas [b, C]."""
        saved = self.steps, self.threshold
        self.steps, self.threshold = steps or canvas_tokens, None
        try:
            return self.propose(prompt_ids, prompt_mask.bool(), canvas_tokens, generator).tokens
        finally:
            self.steps, self.threshold = saved


def masked_logits(model, tokens: torch.Tensor, key_mask: torch.Tensor,
                  columns: torch.Tensor | None = None) -> torch.Tensor:
    """`bidirectional_logits` with Dream's shift (the zoo drafter's convention)."""
    return bidirectional_logits(model, tokens, key_mask, columns, shift=True)


def _resolve_shift(model, shift_logits: bool | None) -> bool:
    if shift_logits is not None:
        return bool(shift_logits)
    config = model.config
    if getattr(config, "logits_shift", None) is not None:
        return bool(config.logits_shift)
    if getattr(config, "model_type", "") == "Dream":
        return True
    if not _is_causal_lm_class(model):
        return False  # LLaDA, BERT, ModernBERT: the output at j is token j's distribution
    raise ValueError(f"cannot tell whether {type(model).__name__}'s logits are shifted (Dream) or not "
                     "(LLaDA): its config has no `logits_shift`; pass shift_logits=True or False")


def _resolve_id(model, tokenizer, name: str, given: int | None) -> int:
    if given is not None:
        return int(given)
    for source in (model.config, tokenizer):
        value = getattr(source, name, None) if source is not None else None
        if value is not None:
            return int(value)
    raise ValueError(f"no {name}: neither the model's config nor a tokenizer gives one; pass {name}=")


class MaskedKind(KindSpec):
    """Masked diffusion drafters: Dream (shifted logits), LLaDA (no shift), masked-LM classes, specdiff's
    testbed masked drafter and the masked drafter distilled for a real verifier."""

    rank = 0
    distilled_rank = 2

    name, zoo_model, distilled_role, priority = "masked", "masked-drafter", "distilled-masked", 40
    serves_standalone = True  # a diffusion drafter over token ids: what vLLM's DiffusionProposer serves
    describes = "Dream, LLaDA, masked-LM classes, specdiff masked drafters"
    option_keys = ("steps", "threshold", "order", "prefix_cache", "shift_logits", "mask_token_id", "pad_token_id")
    effort = ("steps", "threshold")
    model_types = ("Dream", "llada", "LLaDA")

    def recognise(self, config):
        architectures = " ".join(config.get("architectures") or [])
        return (config.get("specdiff_role") == "masked-drafter" or "MaskedLM" in architectures
                or config.get("model_type") in self.model_types
                or (config.get("mask_token_id") is not None and config.get("is_causal") is False))

    def remote_code(self, config):
        return config.get("model_type") in self.model_types

    def loader(self, config, transformers):
        if "MaskedLM" in " ".join(config.get("architectures") or []):
            return transformers.AutoModelForMaskedLM
        return transformers.AutoModel if self.remote_code(config) else transformers.AutoModelForCausalLM

    def build(self, model, config, defaults, tokenizer, target=None, **options):
        self.check_options(options)
        settings = {**defaults, **options}
        if config.get("model_type") in ("llada", "LLaDA"):
            settings.setdefault("shift_logits", False)  # LLaDA: the output at j is token j's distribution
        return MaskedDiffusionDrafter(model, tokenizer=tokenizer, **settings)

    def build_distilled(self, model, verifier, draft_to_target, **options):
        self.check_options(options)
        drafter = MaskedDiffusionDrafter(model, **{"temperature": 0.0, "top_p": 1.0, "top_k": 0, "steps": 1,
                                                   "pad_token_id": model.config.pad_token_id or 0, **options})
        drafter.draft_to_target = draft_to_target
        return drafter

    def distilled_model(self, model_config, weights, target, draft_to_target):
        """embed(x) = E[x] P, head = E[d2t] P (`specdiff distill --kind masked`)."""
        import transformers

        model = transformers.Qwen3ForCausalLM(model_config)
        model.lm_head = torch.nn.Linear(model_config.hidden_size, len(draft_to_target), bias=False)
        embeddings = target.get_input_embeddings().weight.detach().float().cpu()
        projection = weights.pop("specdiff_projection").float()
        weights["model.embed_tokens.weight"] = embeddings @ projection  # [V, d]
        weights["lm_head.weight"] = embeddings[draft_to_target] @ projection  # [V_d, d]
        return model, set()

    def run_options(self, run):
        options = super().run_options(run)
        options["prefix_cache"] = run.prefix_cache
        return options

    def marginal_exact(self, effort):
        """Exact at one step; with K > 1 or tau, only left-to-right unmasking keeps it (class docstring)."""
        return effort.get("threshold") is None and (effort.get("steps", 1) == 1 or effort.get("order") == "left_to_right")


register(MaskedKind())
