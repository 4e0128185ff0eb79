"""Dream-style masked diffusion drafter (Ye et al. 2025), on a bidirectional Qwen3 backbone.

The model sees `prompt + prefix + canvas`, where the canvas starts fully masked; each denoising
step re-encodes the whole sequence (no KV cache, attention is bidirectional), predicts every masked
position — with Dream's shift, the logit at position i is the distribution of token i+1 — and
unmasks the positions it is most sure of, in `entropy` order (lowest entropy first, Dream's default),
`confidence` order (highest max probability), `left_to_right`, or `random`.

- `denoise(...)`: the core loop on a batch of token tensors; K steps unmask the canvas in K nearly
  equal groups. Returns the tokens and, per position, the distribution it was sampled from at the
  step it was unmasked (what the verifier needs as q in marginal mode).
- `MaskedDiffusionDrafter.draft(...)`: speculative drafting of a block of B tokens after a prefix.
- `MaskedDiffusionDrafter.generate(...)`: standalone generation (whole answer canvas masked).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdiff.drafters.base import Draft, Drafter, filter_logits

ORDERS = ("entropy", "confidence", "left_to_right", "random")


def bidirectional_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """Full (non-causal) 4D boolean attention mask [b, 1, L, L] from a key mask [b, L] (True = real
    token). transformers 5 passes a prepared 4D mask through unchanged, so attention is bidirectional."""
    b, length = key_mask.shape
    return key_mask[:, None, None, :].expand(b, 1, length, length)


def masked_logits(model, tokens: torch.Tensor, key_mask: torch.Tensor,
                  columns: torch.Tensor | None = None) -> torch.Tensor:
    """One bidirectional forward with Dream's shift: returns logits [b, L, V] where row j is the
    distribution of token j (taken from the model's output at j-1; row 0 is a copy of row 1's source),
    or only the rows `columns` [C] (each >= 1): [b, C, V], projecting only those positions to the vocab.

    The attention mask is handed to the layers already prepared (a {layer type: mask} dict, which
    transformers passes through), with `is_causal=False`: nothing masked when no row is padded (SDPA
    runs unmasked and bidirectional), else a 4D boolean mask that hides only the padding."""
    position_ids = (key_mask.long().cumsum(-1) - 1).clamp(min=0)  # [b, L], left padding aware
    mask = None if bool(key_mask.all()) else bidirectional_mask(key_mask)
    layer_masks = {kind: mask for kind in set(model.config.layer_types)}
    keep = 0 if columns is None else columns - 1  # output j-1 is the distribution of token j
    logits = model(input_ids=tokens, attention_mask=layer_masks, position_ids=position_ids, is_causal=False,
                   logits_to_keep=keep).logits
    if columns is not None:
        return logits  # [b, C, V]
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # [b, L, V]


def _positions_per_step(n_masked: int, steps: int) -> list[int]:
    """How many positions to unmask at each of `steps` steps (nearly equal, sums to n_masked)."""
    steps = max(1, min(steps, n_masked))
    base, extra = divmod(n_masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


@torch.no_grad()
def denoise(model, tokens: torch.Tensor, key_mask: torch.Tensor, canvas: torch.Tensor, mask_token_id: int,
            steps: int, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 0, order: str = "entropy",
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Unmasks every `canvas` position of `tokens` in `steps` steps.

    tokens [b, L] (canvas positions hold anything; they are set to the mask token), key_mask [b, L]
    bool, canvas [b, L] bool with the same number of canvas positions in every row.
    Returns (tokens [b, L], probs [b, L, V]): probs[i, j] is the filtered distribution that token j was
    sampled from at the step it was unmasked (zeros outside the canvas)."""
    if order not in ORDERS:
        raise ValueError(f"unknown unmasking order {order!r}; choose from {ORDERS}")
    tokens = torch.where(canvas, torch.full_like(tokens, mask_token_id), tokens)
    b, length = tokens.shape
    cols = canvas.any(0).nonzero().squeeze(1)  # [C] canvas columns (the same in every row)
    if not bool(canvas[:, cols].all()):
        raise ValueError("every row needs the same canvas columns")
    n_canvas = cols.numel()
    probs_canvas = None
    still_masked = torch.ones(b, n_canvas, dtype=torch.bool)  # [b, C]
    for k in _positions_per_step(n_canvas, steps):
        logits = masked_logits(model, tokens, key_mask, cols).float()  # [b, C, V]
        if probs_canvas is None:
            probs_canvas = torch.zeros_like(logits)
        logits[..., mask_token_id] = float("-inf")  # never propose the mask token
        if temperature == 0:
            probs = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        else:
            probs = torch.softmax(filter_logits(logits / temperature, top_p=top_p, top_k=top_k), dim=-1)
        sampled = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(b, n_canvas)
        if order == "entropy":
            plain = torch.softmax(logits, dim=-1)
            score = (plain * torch.log(plain.clamp_min(1e-12))).sum(-1)  # -entropy, [b, C]
        elif order == "confidence":
            score = torch.softmax(logits, dim=-1).gather(-1, sampled[..., None]).squeeze(-1)
        elif order == "left_to_right":
            score = -torch.arange(n_canvas, dtype=torch.float)[None, :].expand(b, n_canvas)
        else:
            score = torch.rand(b, n_canvas, generator=generator)
        score = score.masked_fill(~still_masked, float("-inf"))
        chosen = score.topk(k, dim=-1).indices  # [b, k]
        unmask = torch.zeros_like(still_masked).scatter_(1, chosen, True) & still_masked  # [b, C]
        tokens[:, cols] = torch.where(unmask, sampled, tokens[:, cols])
        probs_canvas = torch.where(unmask[..., None], probs, probs_canvas)
        still_masked &= ~unmask
    probs_out = torch.zeros(b, length, probs_canvas.shape[-1])
    probs_out[:, cols] = probs_canvas
    return tokens, probs_out


@dataclass
class MaskedDiffusionDrafter(Drafter):
    """Masked diffusion drafter: K denoising steps over a block of B masked positions after the prefix.

    model: a Qwen3ForCausalLM trained with the MDLM objective (e.g. `specdiff.zoo.load("masked-drafter")`).
    Exactness: with order="left_to_right" and K = B the marginal q is exact; other orders are the
    paper's (approximate) marginal mode, or use point-mass verification."""

    model: torch.nn.Module
    mask_token_id: int
    pad_token_id: int
    steps: int = 1
    temperature: float = 0.2
    top_p: float = 0.95
    top_k: int = 0
    order: str = "entropy"

    @torch.no_grad()
    def draft(self, prefix: torch.Tensor, prefix_mask: torch.Tensor | None, block_size: int,
              generator: torch.Generator | None = None) -> Draft:
        """prefix [b, P] (left-padded prompt + accepted tokens), prefix_mask [b, P] (True on real tokens).
        Returns Draft(tokens [b, B], probs [b, B, V])."""
        b = prefix.shape[0]
        if prefix_mask is None:
            prefix_mask = torch.ones_like(prefix, dtype=torch.bool)
        block = torch.full((b, block_size), self.mask_token_id, dtype=prefix.dtype)
        tokens = torch.cat([prefix, block], dim=1)
        key_mask = torch.cat([prefix_mask.bool(), torch.ones(b, block_size, dtype=torch.bool)], dim=1)
        canvas = torch.zeros_like(key_mask)
        canvas[:, -block_size:] = True
        out, probs = denoise(self.model, tokens, key_mask, canvas, self.mask_token_id, self.steps,
                             self.temperature, self.top_p, self.top_k, self.order, generator)
        return Draft(tokens=out[:, -block_size:], probs=probs[:, -block_size:])

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, canvas_tokens: int,
                 steps: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Standalone generation: the whole answer canvas starts masked and is denoised in `steps`
        steps (default: one token per step). prompt_ids [b, P] left-padded. Returns canvas [b, C]."""
        draft = MaskedDiffusionDrafter(self.model, self.mask_token_id, self.pad_token_id,
                                       steps or canvas_tokens, self.temperature, self.top_p, self.top_k, self.order)
        return draft.draft(prompt_ids, prompt_mask, canvas_tokens, generator).tokens
