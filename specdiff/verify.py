"""verify(): batched token and block verification of drafted tokens.

Terms, per sequence (row) of the batch:
- drafted: the B tokens y_1..y_B that the drafter proposed, with proposal q_i (or a point mass
  on y_i when draft_probs is None);
- accepted: the leading drafted tokens that verification keeps, num_accepted of them;
- recovered: when a drafted token is rejected, the token drawn in its place from the residual
  norm([p~ - q]+) (token) or norm([w p~ - q]+) (block);
- bonus: when all B drafted tokens are accepted, one more token drawn from the unrelaxed
  target p at position B+1.
Each row therefore emits num_accepted + 1 tokens.

Token verification is Algorithm 1 (lines 7-12) of "Speculative Diffusion is a Tale of Two
Tradeoffs" with the relaxed target of `acceptance.py`. Block verification is Algorithm 2 of
Sun et al. (2025), "Block Verification Accelerates Speculative Decoding", on the same relaxed
target.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdiff.acceptance import (Cactus, Lossless, Relaxation, cactus_emitted_distribution, cactus_emitted_off_q,
                                 check_rule, drafted_token_dependent, row_stats)
from specdiff.distributions import Distributions, compute_dtype

METHODS = ("token", "block")
INPUTS = ("probs", "logits")
# A residual with less mass than this is treated as empty: sample from the relaxed target.
EMPTY_RESIDUAL = 1e-9
# Token verification reads every position at once when b (B+1) V is at most this (a left-to-right walk
# costs a few small torch calls per position); above it, it walks the positions in chunks of rows.
SMALL_ELEMENTS = 1 << 18
# Rows x V per chunk of that walk: 1 MiB of float32 scratch per distribution, which stays in cache.
SCRATCH_ELEMENTS = 1 << 18


@dataclass
class VerifyResult:
    num_accepted: torch.Tensor  # [b] long, 0..B
    tokens: torch.Tensor  # [b, B+1] long: accepted draft, then the recovered or bonus token, then -1
    accept_prob: torch.Tensor  # [b, B] token: min(1, p~(y)/q(y)), NaN past the stop; block: weights p_i

    @property
    def num_emitted(self) -> torch.Tensor:
        return self.num_accepted + 1


@dataclass
class _BlockStop:
    """What block verification hands to the residual draw (Sun et al.'s tau and weights)."""

    num_accepted: torch.Tensor  # [b] long: tau
    relax: Relaxation  # the relaxed target's coefficients, [b, B] each
    weights: torch.Tensor  # [b, B]: p_1..p_B
    residual_weight: torch.Tensor  # [b]: p_tau, the weight of p~ in the residual max(p_tau p~ - q, 0)


def verify(
    draft_tokens: torch.Tensor,  # [b, B] long
    draft_probs: torch.Tensor | None,  # [b, B, V], or None: point mass on each drafted token
    target_probs: torch.Tensor,  # [b, B+1, V]: p after prefix + draft[:, :i], i = 0..B
    rule=Lossless(),
    method: str = "token",
    generator: torch.Generator | None = None,
    inputs: str = "probs",
    validate: bool | str = True,
    untruncated_probs: torch.Tensor | None = None,  # [b, B, V] or [b, B+1, V]: p before top-p / top-k
) -> VerifyResult:
    """Verify a batch of drafts against the target, exactly or under a relaxed target.

    Probabilities are those actually sampled from (after temperature, top-p, top-k). With
    inputs="logits", draft_probs and target_probs hold the matching logits instead (already
    temperature-scaled and filtered: -inf where a token is excluded) and no full probability
    tensor is formed.

    validate=True checks shapes, vocabularies, drafted tokens, and every distribution that is
    read: probabilities fully (NaN, negative, rows summing to 1 within 1e-3); logits row by row
    as they are normalised (NaN, +inf, all -inf), so logits past a row's stop, which cannot
    affect the result, are not read at all. validate="full" also scans every logit once.
    validate=False skips the checks; any other value is a ValueError.

    Inputs that require grad are detached: verification samples, it is not differentiable.

    A rule with support="untruncated" measures the drafted tokens against untruncated_probs (the
    verifier's distribution at its temperature, before top-p / top-k; the same `inputs` kind as
    target_probs) at positions 1..B; the bonus still comes from target_probs at B+1.
    """
    check_rule(rule)
    target_probs = _with_support(rule, target_probs, untruncated_probs, draft_tokens)
    if not (validate is True or validate is False or validate == "full"):
        raise ValueError(f"unknown validate {validate!r}: expected True, False or 'full'")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {METHODS}")
    if inputs not in INPUTS:
        raise ValueError(f"unknown inputs {inputs!r}: expected one of {INPUTS}")
    batch, block_len = _check_shapes(draft_tokens, draft_probs, target_probs)
    # Verification is sampling, not a differentiable function: models' outputs taken outside
    # torch.no_grad() are read as plain values (out= kernels refuse tensors that require grad).
    draft_tokens = draft_tokens.detach().long()
    target_probs = target_probs.detach()
    draft_probs = draft_probs.detach() if draft_probs is not None else None
    dtype = compute_dtype(target_probs)
    device = target_probs.device

    target = Distributions(target_probs, inputs, "target_probs", dtype, validate)
    draft = Distributions(draft_probs, inputs, "draft_probs", dtype, validate) if draft_probs is not None else None
    impossible = draft.is_impossible(draft_tokens) if validate and draft is not None else None  # [b, B]
    if impossible is not None and impossible.any():
        row, pos = impossible.nonzero()[0].tolist()
        raise ValueError(
            f"drafted token {draft_tokens[row, pos].item()} at row {row}, position {pos} has proposal "
            "probability 0: it cannot have been drawn from draft_probs"
        )

    uniforms = torch.rand(batch, block_len + 1, generator=generator, device=device, dtype=torch.float64)
    if method == "token":
        # the uniforms of the recovered/bonus draws, taken now: the same stream as taking them after the stop
        draw_u = torch.rand(batch, 1, generator=generator, device=device, dtype=torch.float64)  # [b, 1]
        small = batch * (block_len + 1) * target.shape[-1] <= SMALL_ELEMENTS
        token_verify = _token_verify_dense if small else _token_verify_walk
        num_accepted, accept_prob, next_token = token_verify(target, draft, draft_tokens, rule, uniforms, draw_u)
        tokens = _assemble(draft_tokens, num_accepted, next_token)
        return VerifyResult(num_accepted=num_accepted, tokens=tokens, accept_prob=accept_prob)

    if draft is not None and drafted_token_dependent(rule) and not isinstance(rule, Cactus):
        raise ValueError(f"method='block' with {rule!r} and a real proposal is not defined here: its relaxed target "
                         "depends on the drafted token (only plain Cactus has a fixed one, its emitted C); use "
                         "method='token', or draft_probs=None (point mass)")
    fixed_rows = None  # [b, V]: block + Cactus with a real proposal verifies against C, at each row's stop
    last_rows = None  # the rows of p and q at each row's stop, where already computed
    if isinstance(rule, Cactus) and draft is not None:
        stop = _block_verify_cactus(target, draft, draft_tokens, rule, uniforms)
        last_rows, fixed_rows = _cactus_rows_at_stop(target, draft, stop.num_accepted, rule)
    else:
        stop = _block_verify(target, draft, draft_tokens, rule, uniforms)

    next_token = _sample_next(target, draft, draft_tokens, stop.relax, stop.num_accepted, stop.residual_weight,
                              generator, fixed_rows, last_rows)
    tokens = _assemble(draft_tokens, stop.num_accepted, next_token)
    return VerifyResult(num_accepted=stop.num_accepted, tokens=tokens, accept_prob=stop.weights)


def _with_support(rule, target_probs, untruncated_probs, draft_tokens):
    """The target the rule measures drafts against: target_probs, or with support="untruncated" the
    untruncated rows at positions 1..B beside target_probs' row B+1 (the bonus). [b, B+1, V]."""
    if rule.support == "truncated":
        if untruncated_probs is not None:
            raise ValueError(f"untruncated_probs given, but {rule!r} measures against the truncated target "
                             "(support='truncated')")
        return target_probs
    if untruncated_probs is None:
        raise ValueError(f"{rule!r} has support='untruncated': pass untruncated_probs, the verifier's distribution "
                         "before top-p / top-k, [b, B, V]")
    block_len = draft_tokens.shape[-1] if draft_tokens.dim() == 2 else None
    if (untruncated_probs.dim() != 3 or block_len is None or untruncated_probs.shape[0] != target_probs.shape[0]
            or untruncated_probs.shape[-1] != target_probs.shape[-1] or untruncated_probs.shape[1] < block_len):
        raise ValueError(f"untruncated_probs must be [b, B, V] or [b, B+1, V] like target_probs "
                         f"{tuple(target_probs.shape)}, got {tuple(untruncated_probs.shape)}")
    rows = untruncated_probs[:, :block_len].to(device=target_probs.device, dtype=target_probs.dtype)
    return torch.cat([rows, target_probs[:, block_len:]], dim=1)


def _at_position(p_rows, q_rows, tokens, rule):
    """One drafted position of token verification for n rows: p(y), the relaxation and p~(y)/q(y).

    p_rows, q_rows: [n, V] (q_rows None: point mass on y); tokens: [n, 1]. Returns the
    relaxation's coefficients [n] and the ratio [n]; accept y when u < ratio (Algorithm 1, line 9).
    """
    p_draft = p_rows.gather(-1, tokens).squeeze(-1)  # [n] p(y)
    if q_rows is not None:
        q_draft = q_rows.gather(-1, tokens).squeeze(-1)  # [n] q(y)
        tv = 0.5 * (p_rows - q_rows).abs().sum(dim=-1) if rule.needs_tv else None
    else:  # point mass on y: q(y) = 1 and TV(p, onehot(y)) = 1 - p(y)
        q_draft = torch.ones_like(p_draft)
        tv = 1.0 - p_draft
    stats = row_stats(p_rows) if rule.needs_stats else None  # [n] top-1 mass and entropy of p
    relax = rule.relax(p_draft, q_draft, tv, stats)
    return relax, relax.at_draft(p_draft, q_draft) / q_draft


def _token_verify_dense(target, draft, draft_tokens, rule, uniforms, draw_u):
    """Token verification (Algorithm 1, lines 7-12) with every position read at once, for small
    inputs (b (B+1) V <= SMALL_ELEMENTS), where a left-to-right walk would cost a few small torch
    calls per position. The same arithmetic as _token_verify_walk, so the same draws.

    Returns num_accepted [b], min(1, p~(y)/q(y)) [b, B] (NaN past each row's stop) and the
    recovered or bonus token [b].
    """
    batch, block_len = draft_tokens.shape
    device = draft_tokens.device
    p_all = target.dense(block_len + 1, check=False)  # [b, B+1, V]
    q_all = draft.dense(block_len, check=False) if draft is not None else None  # [b, B, V]
    index = draft_tokens.unsqueeze(-1)  # [b, B, 1]
    relax, ratio = _at_position(p_all[:, :block_len], q_all, index, rule)  # [b, B] each
    kept = uniforms[:, :block_len] < ratio  # [b, B]
    num_accepted = kept.cumprod(dim=1).sum(dim=1)  # [b]: the leading run of accepted drafts
    read = torch.arange(block_len + 1, device=device) <= num_accepted.unsqueeze(1)  # [b, B+1] positions visited
    target.check_read(p_all, read)
    if draft is not None:
        draft.check_read(q_all, read[:, :block_len])
    accept_prob = torch.where(read[:, :block_len], ratio.clamp(max=1.0), float("nan"))
    rows = torch.arange(batch, device=device)
    draft_pos = num_accepted.clamp(max=block_len - 1)
    keep = num_accepted < block_len  # rejected somewhere; else the bonus, from the unrelaxed p_{B+1}
    ones = torch.ones(batch, dtype=p_all.dtype, device=device)
    weights = _residual_weights(
        p_all[rows, num_accepted], None if q_all is None else q_all[rows, draft_pos], draft_tokens[rows, draft_pos].unsqueeze(-1),
        ones, keep.to(ones.dtype), *(torch.where(keep, coef[rows, draft_pos], bonus) for coef, bonus in zip(relax, (1.0, 0.0, 0.0))),
    )
    return num_accepted, accept_prob, sample_categorical(weights, u=draw_u)


def _token_verify_walk(target, draft, draft_tokens, rule, uniforms, draw_u):
    """Token verification (Algorithm 1, lines 7-12), positions left to right, each time only for the
    rows still accepting, in chunks of SCRATCH_ELEMENTS // V rows.

    From logits a row's distributions past its stop are never normalised, and each chunk is
    normalised into the same small scratch buffers (no fresh vocabulary-sized tensors). A row that
    stops draws its recovered token from that chunk's rows at once; rows that accept every draft
    draw the bonus from p_{B+1}. Returns num_accepted [b], min(1, p~(y)/q(y)) [b, B] (NaN where
    not visited) and the recovered or bonus token [b].
    """
    batch, block_len = draft_tokens.shape
    vocab = target.shape[-1]
    dtype, device = target.dtype, draft_tokens.device
    accept_prob = torch.full((batch, block_len), float("nan"), dtype=dtype, device=device)
    num_accepted = torch.zeros(batch, dtype=torch.long, device=device)
    next_token = torch.empty(batch, dtype=torch.long, device=device)
    chunk = max(1, SCRATCH_ELEMENTS // vocab)
    # Where every row fits one chunk, stopped rows are kept (small copies) and drawn in one call at
    # the end; otherwise each chunk draws its own, so that no [b, V] tensor is ever formed.
    deferred = [] if batch <= chunk else None  # (rows, p_rows, q_rows, tokens, relaxation) of stopped rows
    active = torch.arange(batch, device=device)  # rows that accepted every position so far
    for position in range(block_len):
        still = []
        for first in range(0, active.numel(), chunk):
            rows = active[first : first + chunk]  # [n]
            tokens = draft_tokens[rows, position].unsqueeze(-1)  # [n, 1]
            p_rows = target.rows_at(position, rows)  # [n, V] scratch, overwritten by the next chunk
            q_rows = draft.rows_at(position, rows) if draft is not None else None  # [n, V] scratch
            relax, ratio = _at_position(p_rows, q_rows, tokens, rule)  # [n] each
            accept_prob[rows, position] = ratio.clamp(max=1.0)
            kept = uniforms[rows, position] < ratio  # [n] u < p~(y)/q(y): keep the drafted token
            stopped = (~kept).nonzero().squeeze(-1)
            if stopped.numel():
                if stopped.numel() < rows.numel():
                    p_rows, tokens = p_rows.index_select(0, stopped), tokens.index_select(0, stopped)
                    q_rows = q_rows.index_select(0, stopped) if q_rows is not None else None
                    relax = type(relax)(*(coef.index_select(0, stopped) for coef in relax))
                if deferred is not None:
                    deferred.append((rows[stopped], p_rows.clone(), None if q_rows is None else q_rows.clone(),
                                     tokens, relax))
                else:
                    ones = torch.ones(stopped.numel(), dtype=dtype, device=device)
                    weights = _residual_weights(p_rows, q_rows, tokens, ones, ones, *relax)
                    next_token[rows[stopped]] = sample_categorical(weights, u=draw_u[rows[stopped]])
            still.append(rows[kept])
        active = torch.cat(still) if len(still) > 1 else still[0]
        num_accepted[active] += 1
        if active.numel() == 0:
            break
    if deferred:
        rows, p_rows, q_rows, tokens = (None if parts[0] is None else torch.cat(parts) for parts in list(zip(*deferred))[:4])
        relax = type(deferred[0][4])(*(torch.cat(coefs) for coefs in zip(*(part[4] for part in deferred))))
        ones = torch.ones(rows.numel(), dtype=dtype, device=device)
        weights = _residual_weights(p_rows, q_rows, tokens, ones, ones, *relax)
        next_token[rows] = sample_categorical(weights, u=draw_u[rows])
    for first in range(0, active.numel(), chunk):  # every draft accepted: the bonus from the unrelaxed p
        rows = active[first : first + chunk]
        next_token[rows] = sample_categorical(target.rows_at(block_len, rows), u=draw_u[rows])
    return num_accepted, accept_prob, next_token


def _block_verify(target, draft, draft_tokens, rule, uniforms):
    """Block verification (Sun et al. 2025, Algorithm 2) on the relaxed target, every position at once.

    Returns a _BlockStop: tau [b], the relaxation [b, B], the weights p_1..p_B [b, B] and the residual
    weight p_tau [b]. (Cactus with a real proposal: _block_verify_cactus.)
    """
    block_len = draft_tokens.shape[1]
    stats = None
    if draft is None:  # point mass: q = onehot(y), so only p at the drafted tokens is needed
        p_dense = q_dense = None
        p_draft = target.at(draft_tokens, block_len)  # [b, B] p_i(y_i)
        q_draft = torch.ones_like(p_draft)
        tv = 1.0 - p_draft  # TV(p, onehot(y))
        if rule.needs_stats:  # Typical and Gated read whole rows of p
            stats = row_stats(target.dense(block_len))
    else:  # every position's whole distribution, normalised once and shared below
        p_dense = target.dense(block_len)  # [b, B, V]
        q_dense = draft.dense(block_len)  # [b, B, V]
        index = draft_tokens.unsqueeze(-1)
        p_draft = p_dense.gather(-1, index).squeeze(-1)  # [b, B] p_i(y_i)
        q_draft = q_dense.gather(-1, index).squeeze(-1)  # [b, B] q_i(y_i)
        tv = 0.5 * (p_dense - q_dense).abs().sum(dim=-1) if rule.needs_tv else None
        stats = row_stats(p_dense) if rule.needs_stats else None
    relax = rule.relax(p_draft, q_draft, tv, stats)
    relaxed_draft = relax.at_draft(p_draft, q_draft)  # [b, B] p~_i(y_i)
    weights = _block_weights(relaxed_draft / q_draft)  # [b, B+1]: p_0 = 1, p_i
    w = weights[:, :block_len]  # [b, B] p_0..p_{B-1}
    if draft is None:
        # Z_{i+1} with q_{i+1} a point mass on y_{i+1}: p_i (1 - p~_{i+1}(y_{i+1})).
        residual_mass = w * (1.0 - relaxed_draft)
    else:
        relaxed = _relaxed_rows(p_dense, q_dense, draft_tokens, *relax)
        # Z_{i+1} = sum_x max(p_i p~_{i+1}(x) - q_{i+1}(x), 0) for i = 0..B-1
        residual_mass = (w.unsqueeze(-1) * relaxed - q_dense).clamp(min=0).sum(dim=-1)
    num_accepted = _block_stop(weights, residual_mass, uniforms)
    residual_weight = weights.gather(1, num_accepted.unsqueeze(1)).squeeze(1)  # [b] p_tau
    return _BlockStop(num_accepted, relax, weights[:, 1:], residual_weight)


CHUNK_ELEMENTS = 1 << 21  # rows x vocabulary per chunk of _block_verify_cactus (float64 temporaries: 16 MiB each)


def _block_verify_cactus(target, draft, draft_tokens, rule, uniforms):
    """Block verification (Sun et al. 2025, Algorithm 2) with Cactus and a real proposal.

    Cactus's p~ depends on the drafted token; block verification needs a fixed target, so it
    verifies against C, the distribution token-level Cactus emits (docs/verification.md). Positions
    are visited left to right, a chunk of rows at a time: C_i's row (acceptance.cactus_emitted_distribution)
    gives p~_i(y_i) = C_i(y_i), hence the weight p_i = min(1, p_{i-1} C_i(y_i) / q_i(y_i)), and
    Z_i = sum_x max(p_{i-1} C_i(x) - q_i(x), 0) with the weight already known. No [b, B, V] tensor
    is formed; the C row at each row's stop is recomputed for the residual (_cactus_rows_at_stop).
    Returns num_accepted = tau [b], the relaxation [b, B], the weights p_1..p_B [b, B] and p_tau [b].
    """
    batch, block_len = draft_tokens.shape
    vocab = target.shape[-1]
    device = draft_tokens.device
    weights = torch.ones(batch, block_len + 1, dtype=torch.float64, device=device)  # [b, B+1] p_0 = 1, p_i
    residual_mass = torch.zeros(batch, block_len, dtype=torch.float64, device=device)  # [b, B] Z_{i+1}, i = 0..B-1
    p_draft = torch.empty(batch, block_len, dtype=target.dtype, device=device)  # [b, B] p_i(y_i)
    chunk = max(1, CHUNK_ELEMENTS // vocab)
    for position in range(block_len):
        for first in range(0, batch, chunk):
            rows = torch.arange(first, min(batch, first + chunk), device=device)
            tokens = draft_tokens[rows, position].unsqueeze(-1)  # [n, 1]
            p_rows = target.rows_at(position, rows)  # [n, V] scratch
            q_rows = draft.rows_at(position, rows)  # [n, V] scratch
            emitted = cactus_emitted_off_q(p_rows, q_rows, rule)  # [n, V] C_i, or None: C_i = q_i
            q_draft = q_rows.gather(-1, tokens).squeeze(-1).to(torch.float64)  # [n] q_i(y_i) > 0
            previous = weights[rows, position]  # [n] p_{i-1}
            if emitted is None:  # C_i = q_i: Z_i = sum_x max((p_{i-1} - 1) q_i(x), 0) = 0
                c_draft = q_draft
            else:
                c_draft = emitted.gather(-1, tokens).squeeze(-1).to(torch.float64)  # [n] C_i(y_i)
                # Z_i = sum_x max(p_{i-1} C_i(x) - q_i(x), 0), in place: C_i is not needed any more
                emitted.mul_(previous.to(emitted.dtype).unsqueeze(-1)).sub_(q_rows).clamp_(min=0)
                residual_mass[rows, position] = emitted.sum(dim=-1).to(torch.float64)
                del emitted
            weights[rows, position + 1] = torch.clamp(previous * c_draft / q_draft, max=1.0)
            p_draft[rows, position] = p_rows.gather(-1, tokens).squeeze(-1)
    num_accepted = _block_stop(weights, residual_mass, uniforms)
    residual_weight = weights.gather(1, num_accepted.unsqueeze(1)).squeeze(1)  # [b] p_tau
    relax = rule.relax(p_draft, torch.ones_like(p_draft))
    return _BlockStop(num_accepted, relax, weights[:, 1:].to(target.dtype), residual_weight.to(target.dtype))


def _cactus_rows_at_stop(target, draft, num_accepted, rule):
    """For rows that stopped at a draft (tau < B): p_tau, q_tau and C there, [b, V] each, zero on
    bonus rows (_sample_next fills in their p_{B+1}; they sample the unrelaxed target)."""
    block_len = draft.shape[1]
    batch, vocab = num_accepted.shape[0], target.shape[-1]
    p_row = torch.zeros(batch, vocab, dtype=target.dtype, device=num_accepted.device)  # [b, V]
    q_row, fixed = torch.zeros_like(p_row), torch.zeros_like(p_row)  # [b, V] each
    stopped = (num_accepted < block_len).nonzero().squeeze(-1)
    chunk = max(1, CHUNK_ELEMENTS // vocab)
    for first in range(0, stopped.numel(), chunk):
        rows = stopped[first : first + chunk]
        p_row[rows] = target.rows(num_accepted[rows], rows)
        q_row[rows] = draft.rows(num_accepted[rows], rows)
        fixed[rows] = cactus_emitted_distribution(p_row[rows], q_row[rows], rule)
    return (p_row, q_row), fixed


def _block_weights(ratio: torch.Tensor) -> torch.Tensor:
    """Sun et al.'s weights p_0 = 1, p_i = min(1, p_{i-1} * ratio_i), all at once.

    In log space x_i = min(0, x_{i-1} + log ratio_i) with x_0 = 0, which unrolls to
    x_i = S_i - max_{j <= i} S_j for the prefix sums S (S_0 = 0).
    ratio: [b, B]. Returns [b, B+1].
    """
    log_ratio = torch.log(ratio)  # ratio > 0 where it matters; log 0 = -inf stays -inf
    prefix = torch.cat([torch.zeros_like(log_ratio[:, :1]), log_ratio.cumsum(dim=-1)], dim=-1)  # [b, B+1]
    prefix = torch.nan_to_num(prefix, nan=float("-inf"))
    return torch.exp(prefix - prefix.cummax(dim=-1).values).clamp(max=1.0)


def _block_stop(weights: torch.Tensor, residual_mass: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """tau = the largest i in 0..B with eta_i <= h_i (Sun et al., Algorithm 2).

    h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i) for i < B, h_B = p_B; h_0 = 1 since p_0 = 1. Where
    Z_{i+1} + 1 - p_i = 0 (p_i = 1 and nothing left to correct) h_i = 1.
    """
    block_len = residual_mass.shape[1]
    w = weights[:, :block_len]
    denominator = residual_mass + (1.0 - w)
    h = torch.where(denominator > 0, residual_mass / denominator.clamp(min=1e-300), torch.ones_like(w))
    h = torch.cat([h, weights[:, block_len:]], dim=-1)  # [b, B+1]
    h[:, 0] = 1.0
    stops = uniforms <= h  # [b, B+1]
    index = torch.arange(block_len + 1, device=weights.device)
    return torch.where(stops, index, torch.zeros_like(index)).amax(dim=-1)


def _relaxed_rows(p_rows, q_rows, tokens, p_coef, q_coef, onehot_coef) -> torch.Tensor:
    """p~ = p_coef p + q_coef q + onehot_coef onehot(y) on whole rows. rows: [..., V]; rest: [...]."""
    relaxed = p_coef.unsqueeze(-1) * p_rows
    if q_rows is not None:
        relaxed = relaxed + q_coef.unsqueeze(-1) * q_rows
    else:  # point-mass proposal: q = onehot(y)
        onehot_coef = onehot_coef + q_coef
    relaxed = relaxed.scatter_add(-1, tokens.unsqueeze(-1), onehot_coef.unsqueeze(-1).to(relaxed.dtype))
    return relaxed.clamp(min=0.0)


def _sample_next(
    target, draft, draft_tokens, relax, num_accepted, residual_weight, generator, fixed_rows=None, last_rows=None
):
    """The recovered token (stop position k < B) or the bonus token (k = B), one per row.

    Recovered: from norm(max(w p~_k - q_k, 0)), w = 1 for token verification and p_tau for block;
    if that residual is numerically empty, from p~_k. Bonus: from the unrelaxed p_{B+1}.
    fixed_rows [b, V]: block + Cactus's fixed target C at each row's stop, in place of p~_k.
    """
    batch, block_len = draft_tokens.shape
    rows = torch.arange(batch, device=draft_tokens.device)
    stop = num_accepted  # [b] 0..B, index into the B+1 target positions
    is_bonus = stop == block_len  # [b]
    draft_pos = stop.clamp(max=block_len - 1)
    if last_rows is None:
        p_row = target.rows(stop)  # [b, V]
        q_row = draft.rows(draft_pos) if draft is not None else None  # [b, V]
    else:  # rows where token verification stopped are already normalised; bonus rows need p_{B+1}
        p_row, q_row = last_rows
        bonus_rows = is_bonus.nonzero().squeeze(-1)
        if bonus_rows.numel():
            p_row[bonus_rows] = target.rows_at(block_len, bonus_rows)
            if q_row is not None:
                q_row[bonus_rows] = 0.0  # never written for them; it gets weight 0 below
    token_at = draft_tokens[rows, draft_pos].unsqueeze(-1)  # [b, 1]
    keep = ~is_bonus  # bonus rows: p~ = p exactly, and nothing is subtracted
    weight = torch.where(keep, residual_weight, torch.ones_like(residual_weight))  # [b]
    subtract = keep.to(weight.dtype)  # [b]
    p_coef = torch.where(keep, relax.p_coef[rows, draft_pos], 1.0)
    q_coef = torch.where(keep, relax.q_coef[rows, draft_pos], 0.0)
    onehot_coef = torch.where(keep, relax.onehot_coef[rows, draft_pos], 0.0)
    if fixed_rows is not None:
        relaxed = torch.where(keep.unsqueeze(-1), fixed_rows, p_row)
        residual = relaxed * weight.unsqueeze(-1)
        residual.addcmul_(q_row, subtract.unsqueeze(-1), value=-1.0)
        residual.clamp_(min=0.0)
        empty = residual.sum(dim=-1) <= EMPTY_RESIDUAL  # [b]
        if bool(empty.any()):  # C == q up to rounding: fall back to C
            residual[empty] = relaxed[empty]
    else:
        residual = _residual_weights(p_row, q_row, token_at, weight, subtract, p_coef, q_coef, onehot_coef)
    return sample_categorical(residual, generator)


def _residual_weights(p_row, q_row, token_at, weight, subtract, p_coef, q_coef, onehot_coef) -> torch.Tensor:
    """max(w p~ - s q, 0) on whole rows, [n, V], or p~ itself where that is numerically empty.

    p~ = a p + b q + c onehot(y) (acceptance.Relaxation), so w p~ - s q = (w a) p + (w b - s) q +
    (w c) onehot(y). w: 1 for token verification, p_tau for block; s: 1 at a rejection, 0 for the
    bonus (with a, b, c = 1, 0, 0: the unrelaxed p). p_row, q_row: [n, V] (q_row None: point mass
    on y); token_at: [n, 1]; the rest [n].
    """
    residual = p_row * (weight * p_coef).unsqueeze(-1)  # [n, V]
    onehot_part = weight * onehot_coef
    if q_row is not None:
        residual.addcmul_(q_row, (weight * q_coef - subtract).unsqueeze(-1))
    else:  # point mass: q = onehot(y)
        onehot_part = onehot_part + weight * q_coef - subtract
    residual.scatter_add_(-1, token_at, onehot_part.unsqueeze(-1).to(residual.dtype))
    residual.clamp_(min=0.0)
    empty = residual.sum(dim=-1) <= EMPTY_RESIDUAL  # [n]
    if bool(empty.any()):  # p~ == q up to rounding: fall back to the relaxed target
        residual[empty] = _relaxed_rows(p_row[empty], None if q_row is None else q_row[empty], token_at[empty, 0],
                                        p_coef[empty], q_coef[empty], onehot_coef[empty])
    return residual


def sample_categorical(weights: torch.Tensor, generator=None, chunk: int = 2048, u: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row from unnormalised non-negative weights, [b, V], by inverse CDF in float64.

    Two levels, so the whole row is read once: pick a chunk of `chunk` tokens from the chunk
    totals, then a token inside that chunk from its own cumulative sum. u: [b, 1] float64
    uniforms, drawn from `generator` when not given.
    """
    batch, vocab = weights.shape
    if u is None:
        u = torch.rand(batch, 1, generator=generator, device=weights.device, dtype=torch.float64)
    if vocab <= chunk:
        cdf = weights.to(torch.float64).cumsum(dim=-1)  # [b, V]
        index = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
        # right=True skips zero-weight tokens; the clamp guards u * total == total from rounding.
        return index.clamp(max=vocab - 1)
    num_full = vocab // chunk
    # chunk totals in the input precision (at least float32), accumulated across chunks in float64
    totals = weights[:, : num_full * chunk].reshape(batch, num_full, chunk).sum(dim=-1).to(torch.float64)
    if vocab > num_full * chunk:
        tail = weights[:, num_full * chunk :].sum(dim=-1, keepdim=True).to(torch.float64)
        totals = torch.cat([totals, tail], dim=-1)  # [b, num_chunks]
    chunk_cdf = totals.cumsum(dim=-1)
    target_mass = u * chunk_cdf[:, -1:]  # [b, 1]
    chosen = torch.searchsorted(chunk_cdf, target_mass, right=True).clamp(max=totals.shape[-1] - 1)  # [b, 1]
    before = torch.where(chosen > 0, chunk_cdf.gather(-1, (chosen - 1).clamp(min=0)), 0.0)  # mass before the chunk
    offsets = chosen * chunk + torch.arange(chunk, device=weights.device)  # [b, chunk]
    inside = weights.gather(-1, offsets.clamp(max=vocab - 1)).to(torch.float64)
    inside = torch.where(offsets < vocab, inside, 0.0)
    inside_cdf = inside.cumsum(dim=-1)
    position = torch.searchsorted(inside_cdf, (target_mass - before).clamp(min=0), right=True)
    position = torch.minimum(position, _last_positive(inside))
    return (chosen * chunk + position).squeeze(-1)


def _last_positive(values: torch.Tensor) -> torch.Tensor:
    """Index of the last positive entry of each row, [b, 1]: guards rounding at a chunk's end."""
    index = torch.arange(values.shape[-1], device=values.device)
    return torch.where(values > 0, index, 0).amax(dim=-1, keepdim=True)


def _assemble(draft_tokens, num_accepted, next_token) -> torch.Tensor:
    """[b, B+1]: accepted draft tokens, then next_token, then -1."""
    batch, block_len = draft_tokens.shape
    index = torch.arange(block_len + 1, device=draft_tokens.device).unsqueeze(0)  # [1, B+1]
    padded = torch.cat([draft_tokens, draft_tokens.new_full((batch, 1), -1)], dim=1)
    tokens = torch.where(index < num_accepted.unsqueeze(1), padded, torch.full_like(padded, -1))
    return tokens.scatter(1, num_accepted.unsqueeze(1), next_token.unsqueeze(1))


def _check_shapes(draft_tokens, draft_probs, target_probs) -> tuple[int, int]:
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 2:
        raise ValueError(f"draft_tokens must be a [b, B] tensor, got shape {tuple(getattr(draft_tokens, 'shape', ()))}")
    if draft_tokens.is_floating_point() or draft_tokens.is_complex() or draft_tokens.dtype == torch.bool:
        raise ValueError(f"draft_tokens must be an integer tensor (token ids), got {draft_tokens.dtype}")
    batch, block_len = draft_tokens.shape
    if block_len < 1:
        raise ValueError("draft_tokens must hold at least one drafted token per row (B >= 1)")
    if not isinstance(target_probs, torch.Tensor) or target_probs.dim() != 3:
        raise ValueError(f"target_probs must be a [b, B+1, V] tensor, got shape {tuple(getattr(target_probs, 'shape', ()))}")
    if tuple(target_probs.shape[:2]) != (batch, block_len + 1):
        raise ValueError(
            f"target_probs has shape {tuple(target_probs.shape)} but draft_tokens is [{batch}, {block_len}]: "
            f"expected [{batch}, {block_len + 1}, V]"
        )
    if not target_probs.is_floating_point():
        raise ValueError(f"target_probs must be floating point, got {target_probs.dtype}")
    vocab = target_probs.shape[-1]
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or draft_probs.dim() != 3:
            raise ValueError("draft_probs must be a [b, B, V] tensor or None")
        if not draft_probs.is_floating_point():
            raise ValueError(f"draft_probs must be floating point, got {draft_probs.dtype}")
        if tuple(draft_probs.shape[:2]) != (batch, block_len):
            raise ValueError(f"draft_probs has shape {tuple(draft_probs.shape)}, expected [{batch}, {block_len}, V]")
        if draft_probs.shape[-1] != vocab:
            raise ValueError(
                f"draft and target vocabularies differ: draft_probs has V={draft_probs.shape[-1]}, "
                f"target_probs has V={vocab}"
            )
        if draft_probs.device != target_probs.device:
            raise ValueError(f"draft_probs is on {draft_probs.device} but target_probs is on {target_probs.device}")
    if draft_tokens.device != target_probs.device:
        raise ValueError(f"draft_tokens is on {draft_tokens.device} but target_probs is on {target_probs.device}")
    if batch and ((draft_tokens < 0).any() or (draft_tokens >= vocab).any()):
        raise ValueError(f"draft_tokens must lie in [0, {vocab}) (the vocabulary size)")
    return batch, block_len

