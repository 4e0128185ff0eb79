"""specdiff's rules inside vLLM's rejection sampling, on vLLM's flattened layout (pure torch, no vLLM).

vLLM verifies a batch of requests whose drafts have different lengths, flattened: request r has
n_r = num_draft_tokens[r] drafted tokens, at rows cu[r-1]..cu[r]-1 of the [N, V] tensors, N = sum n_r.
`relaxed_rejection_sample` redoes the rows of the requests whose rule is not Lossless with
`specdiff.verify` (the first paper's Algorithm 1, lines 7-12, on the relaxed target of Theorem 1 /
Appendix E; or Sun et al.'s block verification on it), and leaves every other row exactly as vLLM
sampled it:

- p, the target, is what vLLM samples from: softmax of its processed target logits (temperature,
  top-k, top-p, penalties applied); a greedy request's target is the point mass on their argmax;
- q, the draft, is vLLM's draft probabilities where the method records them (draft_model and
  EAGLE with draft_sample_method="probabilistic"), and a point mass on the drafted token
  otherwise (greedy drafting, ngram, DFlash, custom proposers, and every greedy request);
- the relaxed target p~ of the rule feeds both the acceptance ratio min(1, p~(y)/q(y)) and the
  residual norm([p~ - q]+) of the recovered token;
- the bonus token, after a fully accepted draft, is the one vLLM already drew from the unrelaxed
  p (`bonus_token_ids`); it is handed to `verify` as a point-mass (B+1)-th target row, so that
  verify's own bonus draw returns it.

Rows are grouped by (rule, n_r) and verified in one batched call per group; a request with its own
seeded torch.Generator is verified alone with it, the others with `default_generator` (the plugin
passes a generator of its own, so that lenient rows never move torch's global generator, from which
vLLM draws its unseeded rows). A request whose drafts hold vLLM's placeholder -1 (drafts vLLM marks
for rejection) keeps vLLM's own result.
"""
from __future__ import annotations

import torch

from specdiff.verify import verify

PLACEHOLDER = -1  # vLLM's PLACEHOLDER_TOKEN_ID, and verify's padding


def relaxed_rejection_sample(
    output: torch.Tensor,  # [b, max_spec_len + 1] int: vLLM's result, overwritten in place for lenient rows
    draft_token_ids: torch.Tensor,  # [N] int
    num_draft_tokens: list[int],  # [b]
    draft_probs: torch.Tensor | None,  # [N, V] q, or None: point mass on each drafted token
    target: torch.Tensor,  # [N, V] processed target logits (inputs="logits") or probabilities
    bonus_token_ids: torch.Tensor,  # [b] or [b, 1] int: vLLM's bonus draws from the unrelaxed p
    rules: list,  # [b] specdiff.acceptance rules; None or a lossless rule: the row is left as it is
    greedy: torch.Tensor | None = None,  # [b] bool: requests at temperature 0; None: none
    method: str = "token",  # or "block"
    generators: dict | None = None,  # {row: torch.Generator} seeded requests
    inputs: str = "logits",
    default_generator: torch.Generator | None = None,  # every other lenient row's; None: torch's global one
) -> torch.Tensor:
    """Overwrite the lenient requests' rows of vLLM's rejection-sampling output; returns `output`.

    Each overwritten row holds its accepted drafted tokens, then one recovered or bonus token, then
    PLACEHOLDER padding, as vLLM's own rows do."""
    generators = generators or {}
    starts = [0]
    for n in num_draft_tokens:
        starts.append(starts[-1] + int(n))
    bonus = bonus_token_ids.reshape(-1)
    groups: dict = {}  # (rule, n, greedy, seed row or None) -> rows
    padded = (draft_token_ids < 0).tolist()  # vLLM's -1: a placeholder draft that must be rejected
    for row, (rule, n) in enumerate(zip(rules, num_draft_tokens)):
        if rule is None or rule.lossless or n == 0:
            continue
        if any(padded[starts[row] : starts[row] + int(n)]):
            continue  # a placeholder draft (a request still in its prefill, an invalid draft): vLLM's result
        is_greedy = bool(greedy[row]) if greedy is not None else False
        alone = row if (row in generators and not is_greedy) else None
        groups.setdefault((rule, int(n), is_greedy, alone), []).append(row)
    for (rule, n, is_greedy, alone), rows in groups.items():
        flat = torch.cat([torch.arange(starts[r], starts[r] + n) for r in rows]).to(target.device)  # [g n]
        tokens = draft_token_ids[flat].long().view(len(rows), n)  # [g, n]
        vocab = target.shape[-1]
        if is_greedy:  # p: the point mass on the argmax of the target logits; q: the drafted token
            p = torch.zeros(len(rows) * n, vocab, dtype=torch.float32, device=target.device)
            p.scatter_(-1, target[flat].argmax(dim=-1, keepdim=True), 1.0)
            rows_inputs, q = "probs", None
        else:
            p = target[flat].float()
            rows_inputs = inputs
            q = draft_probs[flat].float().view(len(rows), n, vocab) if draft_probs is not None else None
            if q is not None and rows_inputs == "logits":
                q = q.clamp(min=0).log()  # verify reads both in one form
        p = p.view(len(rows), n, vocab)
        bonus_row = _point_mass(bonus[rows].long(), vocab, p.device)  # [g, 1, V]
        if rows_inputs == "logits":
            bonus_row = bonus_row.log()
        p = torch.cat([p, bonus_row.to(p.dtype)], dim=1)  # [g, n + 1, V]
        generator = generators.get(alone) if alone is not None else default_generator
        result = verify(tokens, q, p, rule=rule, method=method, generator=generator, inputs=rows_inputs,
                        validate=False)
        index = torch.tensor(rows, device=output.device)
        output[index] = PLACEHOLDER
        output[index, : n + 1] = result.tokens.to(output.device, output.dtype)
    return output


def _point_mass(tokens: torch.Tensor, vocab: int, device) -> torch.Tensor:
    """[g] token ids -> [g, 1, V] one-hot rows."""
    onehot = torch.zeros(tokens.shape[0], 1, vocab, dtype=torch.float32, device=device)
    return onehot.scatter_(-1, tokens.view(-1, 1, 1).to(device), 1.0)


def accepted_counts(output: torch.Tensor, num_draft_tokens: list[int]) -> torch.Tensor:
    """[b]: how many drafted tokens each row of a rejection-sampling output accepted."""
    emitted = (output != PLACEHOLDER).sum(dim=1)  # accepted + 1 where any draft
    drafted = torch.tensor(num_draft_tokens, device=output.device)
    return torch.where(drafted > 0, emitted - 1, torch.zeros_like(emitted))
