"""Block diffusion drafter: SDAR (Cheng et al. 2026a; block diffusion after Arriola et al. 2025's BD3-LM).

A block diffusion LM is autoregressive over blocks and a masked diffusion model within one: the
block being generated attends to every earlier token and, bidirectionally, to itself; earlier tokens
never attend to it. So the committed tokens' keys and values are computed once, when they are
committed, and cached: each round's first step encodes the newly committed tokens (each attending
causally to the tokens before it) together with the canvas of B masks, and later steps encode only
the canvas (`specdiff.drafters.prefix_cache.PersistentPrefix`). Nothing drafted is ever cached.

Effort (the first paper's Section 4.3): a fixed K steps, or SDAR's confidence threshold tau (every
position whose sampled token's probability exceeds tau is unmasked, at least the most confident one
per step), with the unmasking orders of `specdiff.drafters.unmasking` ("confidence" by default).

Conventions, read from the config unless given:
- no logit shift (SDAR: the output at position j is token j's distribution); specdiff's zoo
  block drafter records `logits_shift: 1` (Dream-style, it starts from an autoregressive model);
- `block_size`: the block length the model was trained on; drafting more tokens is refused.
- `mask_token_id` from the config or the tokenizer.

Exactness (marginal mode): as the masked drafter: exact for K = 1 and for order="left_to_right"
with a fixed K; with tau or another order q is recorded at the step a token was unmasked, before
the tokens unmasked later, and marginal verification is approximate (point mass is exact).

Loading a real checkpoint where you have one (SDAR ships its modeling code):
    sdar = AutoModelForCausalLM.from_pretrained("JetLM/SDAR-8B-Chat-b16", trust_remote_code=True)
    drafter = sd.BlockDiffusionDrafter(sdar, threshold=0.9, tokenizer=tok)   # verifier: Qwen3-8B
"""
from __future__ import annotations

from specdiff.drafters.masked import MaskedDiffusionDrafter, MaskedKind
from specdiff.drafters.registry import KindSpec, register


class BlockDiffusionDrafter(MaskedDiffusionDrafter):
    """Drafts B tokens per round by block diffusion with a KV cache of the committed tokens.

    model: a causal-LM class run block-causally (SDAR, the zoo's block-drafter). Sampling defaults
    are the first paper's SDAR draft settings (Table 3): temperature 0.6, top-p 0.95, top-k 20."""

    committed_attention = "causal"  # committed tokens are cached causally, as its objective trains them

    def __init__(self, model, steps: int = 1, threshold: float | None = None, order: str = "confidence",
                 temperature: float = 0.6, top_p: float = 0.95, top_k: int = 20, shift_logits: bool | None = None,
                 mask_token_id: int | None = None, pad_token_id: int | None = None, tokenizer=None,
                 block_length: int | None = None):
        if shift_logits is None:
            shift_logits = bool(getattr(model.config, "logits_shift", 0) or 0)  # SDAR: no shift
        if pad_token_id is None and getattr(model.config, "pad_token_id", None) is None and tokenizer is None:
            pad_token_id = 0  # only fills left padding, which every mask hides
        super().__init__(model, steps=steps, threshold=threshold, order=order, temperature=temperature, top_p=top_p,
                         top_k=top_k, shift_logits=shift_logits, mask_token_id=mask_token_id,
                         pad_token_id=pad_token_id, tokenizer=tokenizer, prefix_cache="persistent")
        length = block_length if block_length is not None else getattr(model.config, "block_size", None)
        if length is not None and (int(length) != length or length < 1):
            raise ValueError(f"block_length must be an integer >= 1, got {length}")
        self.block_length = None if length is None else int(length)

    def propose(self, ids, key_mask, block_size, generator=None):
        """ids [b, L] committed tokens, left-padded; key_mask [b, L]. Returns Draft(tokens [b, B], probs [b, B, V])."""
        self._check_length(block_size)
        return super().propose(ids, key_mask, block_size, generator)

    def propose_planned(self, ids, key_mask, plan, generator=None):
        """As the masked drafter's, with max B_r at most the trained block length."""
        self._check_length(plan.max_block)
        return super().propose_planned(ids, key_mask, plan, generator)

    def _check_length(self, block_size: int) -> None:
        if self.block_length is not None and block_size > self.block_length:
            raise ValueError(f"block_size {block_size} exceeds the block length this drafter was trained on "
                             f"({self.block_length}); use block_size <= {self.block_length}")


class BlockKind(MaskedKind):
    """Block diffusion drafters: SDAR (model_type sdar, its own code, no shift), specdiff's block drafter. Its
    prefix is always cached; B is at most the block length it was trained on."""

    rank = 1

    name, zoo_model, distilled_role, priority = "block", "block-drafter", None, 10
    describes = "SDAR (model_type sdar), specdiff block drafters"
    option_keys = ("steps", "threshold", "order", "shift_logits", "mask_token_id", "pad_token_id", "block_length")
    model_types = ("sdar", "SDAR")

    def recognise(self, config):
        return (config.get("specdiff_role") == "block-drafter" or config.get("model_type") in self.model_types
                or "SDAR" in " ".join(config.get("architectures") or []))

    def loader(self, config, transformers):
        return transformers.AutoModelForCausalLM  # SDAR: its auto_map

    def build(self, model, config, defaults, tokenizer, target=None, **options):
        self.check_options(options)
        return BlockDiffusionDrafter(model, tokenizer=tokenizer, **{**defaults, **options})

    def run_options(self, run):
        return KindSpec.run_options(self, run)

    def trained_block(self, config):
        """B is at most the block length it was trained on (its config's block_size)."""
        return config.get("block_size")


register(BlockKind())
