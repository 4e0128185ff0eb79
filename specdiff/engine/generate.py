"""Speculative generation: the first paper's Algorithm 1, batched.

    while some row has not emitted EOS (nor reached max_new_tokens):
        y_1..y_B, q_1..q_B = drafter.propose(h)                  # DiffusionDraft (line 4)
        p_1..p_{B+1}       = verifier.score([last of h, y_1..y_B])  # VerifierForward, one call (line 5)
        k, next token      = verify(y, q, p, rule, method)        # RelaxTarget + lines 7-12
        h                  = h + y_1..y_k + next token            # Append (line 13)

Terms are those of `specdiff.verify` (accepted, correction, bonus) and of the drafter contract in
`specdiff.drafters.base`. Rows are independent: each row is verified with its own uniforms and
its own stop, and leaves the batch when it finishes, so its output distribution does not depend
on the other rows.

Exactness (`SequenceStats.exact`): the configuration is lossless when the rule is Lossless and
either proposal="point_mass" (verification with a point mass on each drafted token, exact for any
drafter) or the drafter's q is its exact marginal (`drafter.exact_marginal`: autoregressive,
K = 1, or strictly left-to-right unmasking). Everything else is the paper's method, approximate.

Controllers (`specdiff.engine.controllers`): with `controller=`, each round's DiffusionDraft follows
the controller's per-row plan (draft length B_r <= block_size, steps K_r, a confidence floor), made
from the row's past only; drafts then differ in length L_r. The verifier scores the ragged chunk in
one forward, right-padded to max L_r + 1 columns: it is causal, so a row's scores at its own columns
do not see its padding, and `commit` keeps at most L_r + 1 of them. Verification then stops each row
at L_r (`_verify_ragged`): a row that accepted all L_r of its tokens gets its bonus from p_{L_r+1}.
The controller changes which proposal is made, never the rule applied to it, so exactness is that of
the proposal (docs/engine.md, "Controllers").
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdiff.acceptance import Lossless, check_rule
from specdiff.engine.controllers import parse_controller
from specdiff.engine.stats import SequenceStats, Summary, summarize
from specdiff.lm.cache import compaction_index, gather_columns
from specdiff.lm.masks import left_pad
from specdiff.lm.sampling import NonFiniteLogits, eos_token_ids, sample_rows  # noqa: F401  (eos_token_ids: re-exported)
from specdiff.progress import progress as progress_bar
from specdiff.verify import METHODS, VerifyResult, verify

PROPOSALS = ("marginal", "point_mass")


@dataclass
class GenerationOutput:
    texts: list[str] | None  # decoded generations (None without a tokenizer)
    token_ids: list[list[int]]  # generated ids per row, without the prompt, ending with EOS if emitted
    stats: list[SequenceStats]  # one per row
    summary: Summary


class SpeculativeGenerator:
    """Drafts with `drafter`, verifies with `verifier` (an `sd.Verifier`) under `rule` and `method`.

    controller: None (every row drafts block_size tokens at the drafter's effort each round), a
    `specdiff.engine.controllers.Controller`, or its name ("confidence", "acceptance", "effort",
    joined with "+", parameters after ":"): per row and round, the draft length (at most block_size),
    the steps and a confidence floor, chosen from the row's past and the drafter's confidence.

    tree_budget: draft trees of at most this many nodes and depth block_size instead of chains
    (`specdiff.engine.tree`: one row at a time, the lossless rule, no controller)."""

    def __init__(self, drafter, verifier, block_size: int = 8, rule=Lossless(), method: str = "token",
                 proposal: str = "marginal", tokenizer=None, eos_token_id: int | list[int] | None = None,
                 batch_size: int = 64, drafter_tokenizer=None, controller=None, tree_budget: int | None = None):
        check_rule(rule)
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}: expected one of {METHODS}")
        if proposal not in PROPOSALS:
            raise ValueError(f"unknown proposal {proposal!r}: expected one of {PROPOSALS}")
        _check_count("block_size (B)", block_size)
        _check_count("batch_size", batch_size)
        if drafter.vocab_size is None:  # a model-free drafter (prompt lookup) drafts ids it read: any vocabulary
            drafter.adopt_vocabulary(verifier.vocab_size)
        elif drafter.vocab_size != verifier.vocab_size or (getattr(drafter, "draft_to_target", None) is not None
                                                            and drafter.target_vocab is None):
            _fit_vocabulary(drafter, verifier, drafter_tokenizer, tokenizer)
        self.drafter, self.verifier, self.block_size = drafter, verifier, int(block_size)
        # a deterministic drafter (prompt lookup) is always verified with a point mass: its exact law
        proposal = "point_mass" if getattr(drafter, "point_mass", False) else proposal
        self.rule, self.method, self.proposal, self.tokenizer = rule, method, proposal, tokenizer
        self.batch_size = int(batch_size)
        self.eos_token_ids = eos_token_ids(verifier.model, eos_token_id)
        self.controller = parse_controller(controller)
        planned = {} if self.controller is None else dict(steps_vary=self.controller.sets_steps,
                                                            reorders=self.controller.reorders)
        # exact: a lossless rule against the sampled (truncated) target, and a proposal that is exact
        self.exact = rule.lossless and (proposal == "point_mass" or drafter.exact_marginal_with(**planned))
        self.tree = None
        if tree_budget is not None:
            from specdiff.engine.tree import TreeGenerator

            if not (rule.lossless and rule.support == "truncated") or self.controller is not None or method != "token":
                raise ValueError("draft trees take the lossless rule, token verification and no controller")
            self.tree = TreeGenerator(drafter, verifier, depth=block_size, budget=tree_budget, eos_token_id=eos_token_id)
            self.exact = True  # the tree rule: draws from the verifier along the accepted path

    def generate(self, prompts, max_new_tokens: int = 256, generator: torch.Generator | None = None,
                 progress: bool = False, on_round=None, on_tokens=None, on_verify=None) -> GenerationOutput:
        """prompts: strings (needs a tokenizer), lists of token ids, or conversations (lists of {"role",
        "content"} messages, put through the tokenizer's chat template with the assistant's turn opened);
        any number, any lengths. on_round(round_index, live_rows), if given, is called after every round
        (instrumentation); on_tokens(prompt_index, new_ids), after every round for each row that emitted
        tokens (streaming); on_verify(draft, target_logits [b, W+1, V], result), after every verification
        (diagnostics of what the rule saw; its work counts in the round's time: untimed runs only)."""
        _check_count("max_new_tokens", max_new_tokens)
        rows = self._tokenize(prompts)
        budgets = self._budgets(rows, int(max_new_tokens))
        if self.tree is not None:
            return self._generate_trees(rows, budgets, generator)
        token_ids, stats, totals = [], [], {"draft_s": 0.0, "verify_s": 0.0, "forward_s": 0.0, "wall_s": 0.0,
                                            "prefill_s": 0.0}
        rollback = {}
        batches = range(0, len(rows), self.batch_size)
        batches = progress_bar(batches, desc="batches", enabled=progress and len(batches) > 1)
        for start in batches:
            end = start + self.batch_size
            stream = None if on_tokens is None else (lambda row, new, start=start: on_tokens(start + row, new))
            ids, batch_stats, batch_totals = self._generate_batch(rows[start:end], budgets[start:end], generator,
                                                                  on_round, stream, on_verify)
            token_ids += ids
            stats += batch_stats
            for key in totals:
                totals[key] += batch_totals[key]
            _add_rollback(rollback, "verifier", getattr(self.verifier, "rollback_stats", None))
            _add_rollback(rollback, "drafter", getattr(getattr(self.drafter, "cache", None), "stats", None))
        texts = None
        if self.tokenizer is not None:
            texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in token_ids]
        summary = summarize(stats, **totals)
        summary.state_rollback = rollback or None
        return GenerationOutput(texts=texts, token_ids=token_ids, stats=stats, summary=summary)

    def _generate_trees(self, rows: list[list[int]], budgets: list[int], generator) -> GenerationOutput:
        """Draft trees, one row at a time (`specdiff.engine.tree`)."""
        token_ids, stats = [], []
        for row, budget in zip(rows, budgets):
            ids, row_stats = self.tree.generate(row, budget, generator)
            token_ids.append(ids)
            stats.append(row_stats)
        texts = None if self.tokenizer is None else [self.tokenizer.decode(i, skip_special_tokens=True)
                                                     for i in token_ids]
        summary = summarize(stats, wall_s=sum(s.wall_s for s in stats), draft_s=sum(s.draft_s for s in stats),
                            verify_s=sum(s.verify_s for s in stats), forward_s=sum(s.verify_s for s in stats))
        return GenerationOutput(texts=texts, token_ids=token_ids, stats=stats, summary=summary)

    @torch.inference_mode()
    def _generate_batch(self, rows: list[list[int]], budgets: list[int], generator, on_round=None, on_tokens=None,
                        on_verify=None):
        drafter, verifier, block = self.drafter, self.verifier, self.block_size
        begin = time.perf_counter()
        ids, key_mask = left_pad(rows, _pad_id(verifier.model), device=verifier.device)  # [b, P]
        if hasattr(verifier, "reserve"):  # a static cache (`engine.compiled`) is sized once: the longest row + a chunk
            verifier.reserve(max(len(row) + budget for row, budget in zip(rows, budgets)) + block + 1)
        layers = drafter.verifier_hidden_layers
        drafter.start(ids, key_mask, verifier.start(ids, key_mask, layers))
        sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
        sync()
        prefilled = time.perf_counter()
        controller = self.controller
        if controller is not None:
            controller.start(len(rows), block)
        outputs = [[] for _ in rows]
        stats = [SequenceStats(exact=self.exact, block_size=block) for _ in rows]
        live = list(range(len(rows)))  # original index of each row still in the batch
        totals = {"draft_s": 0.0, "verify_s": 0.0, "forward_s": 0.0, "prefill_s": prefilled - begin}
        round_index = 0
        while live:
            round_index += 1
            round_start = time.perf_counter()
            try:
                if controller is None:
                    draft = drafter.propose(ids, key_mask, block, generator)  # tokens [b, B], probs [b, B, V]
                    if draft.lengths is not None:  # a drafter that ends some drafts early (prompt lookup)
                        draft = _ragged(draft)
                else:
                    draft = _ragged(drafter.propose_planned(ids, key_mask, controller.plan(), generator))
            except NonFiniteLogits as error:
                raise NonFiniteLogits(error.who, error.kind, round_index) from None
            sync()
            drafted = time.perf_counter()
            if draft.probs is None and self.proposal == "marginal" and not getattr(drafter, "free_point_masses", False):
                raise ValueError("the drafter returned no probabilities: use proposal='point_mass'")
            width = draft.tokens.shape[1]  # B, or max L_r with a controller or ragged drafts (0: none drafted)
            chunk = torch.cat([ids[:, -1:], draft.tokens], dim=1)  # [b, W+1]: last committed, y_1..y_W
            target_logits, hidden = verifier.score(chunk, layers)  # [b, W+1, V]
            sync()
            scored = time.perf_counter()
            # q: None is a point mass on each drafted token (point-mass mode; a hybrid's round of free drafts)
            draft_logits = None if self.proposal == "point_mass" or draft.probs is None else draft.probs.log()
            # support="untruncated": drafts are measured against p before top-p / top-k, [b, W, V]
            untruncated = verifier.untruncated_logits()[:, :-1] if self.rule.support == "untruncated" else None
            if draft.lengths is None:
                result = verify(draft.tokens, draft_logits, target_logits, rule=self.rule, method=self.method,
                                generator=generator, inputs="logits", untruncated_probs=untruncated)
                lengths = [width] * len(live)
            else:
                result = _verify_ragged(draft, draft_logits, target_logits, untruncated, self.rule, self.method,
                                        generator)
                lengths = draft.lengths.tolist()
            if on_verify is not None:
                on_verify(draft, target_logits, result)
            accepted = result.num_accepted.tolist()  # per-row bookkeeping happens on the host
            if controller is not None:
                controller.observe(lengths, accepted)
            checked = time.perf_counter()
            verifier.commit(result.num_accepted + 1)  # last committed + accepted drafted tokens stay cached
            drafter.commit(result.num_accepted, hidden)
            ids, key_mask = _append(ids, key_mask, result.tokens)
            emitted = result.tokens.tolist()
            now = time.perf_counter()
            draft_s, verify_s = drafted - round_start, checked - drafted
            totals["draft_s"] += draft_s
            totals["verify_s"] += verify_s
            totals["forward_s"] += scored - drafted
            keep = []
            for position, row in enumerate(live):
                new = emitted[position][: accepted[position] + 1]
                done = False
                for i, token in enumerate(new):
                    if token in self.eos_token_ids:
                        new, done = new[: i + 1], True
                        break
                room = budgets[row] - len(outputs[row])
                if len(new) >= room:
                    new, done = new[:room], True
                outputs[row] += new
                if on_tokens is not None and new:
                    on_tokens(row, new)
                s = stats[row]
                s.rounds += 1
                # statistics stop where the generation stops: drafted tokens past an EOS or the token budget
                # were never emitted, so a finishing round counts only the positions it emitted
                s.accepted.append(min(accepted[position], len(new)))
                s.drafted.append(min(lengths[position], len(new)) if done else lengths[position])
                s.new_tokens = len(outputs[row])
                s.draft_s += draft_s
                s.verify_s += verify_s
                if done:
                    s.wall_s = now - begin
                else:
                    keep.append(position)
            if len(keep) < len(live):
                live = [live[position] for position in keep]
                if not live:
                    break
                selected = torch.tensor(keep, device=ids.device)
                ids, key_mask = _select(ids, key_mask, selected)
                verifier.select(selected)
                drafter.select(selected)
                if controller is not None:
                    controller.select(keep)
            if on_round is not None:
                on_round(round_index, len(live))
        totals["wall_s"] = time.perf_counter() - begin
        return outputs, stats, totals

    def _tokenize(self, prompts) -> list[list[int]]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], (int, dict))):
            prompts = [prompts]  # one prompt: a string, token ids or a conversation
        if not prompts:
            raise ValueError("no prompts given")
        rows = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], dict):
                prompt = chat_ids(self.tokenizer, prompt, i)
            elif isinstance(prompt, str):
                if self.tokenizer is None:
                    raise ValueError("string prompts need a tokenizer: SpeculativeGenerator(..., tokenizer=tok)")
                prompt = self.tokenizer(prompt).input_ids
            prompt = [int(t) for t in (prompt.tolist() if torch.is_tensor(prompt) else prompt)]
            if not prompt:
                raise ValueError(f"prompt {i} is empty")
            if min(prompt) < 0 or max(prompt) >= self.verifier.vocab_size:
                raise ValueError(f"prompt {i} holds a token id outside the vocabulary [0, {self.verifier.vocab_size})")
            rows.append(prompt)
        return rows

    def _budgets(self, rows: list[list[int]], max_new_tokens: int) -> list[int]:
        """Per row: max_new_tokens, or less where a round would run past either model's context."""
        limits = [m for m in (self.verifier.max_length, self.drafter.max_length) if m]
        context = min(limits) if limits else None
        budgets = []
        for i, row in enumerate(rows):
            budget = max_new_tokens
            if context is not None:
                room = context - self.block_size - len(row)  # a round holds the prefix and B + 1 new tokens
                if room < 1:
                    raise ValueError(f"prompt {i} has {len(row)} tokens: with block_size {self.block_size} it does not "
                                     f"fit the models' context of {context} tokens")
                budget = min(budget, room)
            budgets.append(budget)
        return budgets


def _ragged(draft):
    """A controller's draft, cut to its longest row: tokens [b, W], probs [b, W, V], W = max L_r. Positions
    past a row's length (never verified) get the most likely token of their q, so that every drafted
    token is one its q can have drawn."""
    lengths = draft.lengths
    width = int(lengths.max())
    tokens = draft.tokens[:, :width]
    probs = None if draft.probs is None else draft.probs[:, :width]
    if int(lengths.min()) < width:
        past = torch.arange(width, device=tokens.device)[None, :] >= lengths[:, None]  # [b, W]
        filler = probs.argmax(-1) if probs is not None else torch.zeros_like(tokens)
        tokens = torch.where(past, filler, tokens)
    draft.tokens, draft.probs = tokens, probs
    return draft


def _verify_ragged(draft, draft_logits, target_logits, untruncated, rule, method, generator) -> VerifyResult:
    """Verification of drafts of lengths L_r (draft.lengths [b]) padded to W: row r is verified on its first
    L_r tokens against p_1..p_{L_r+1} only. Token verification decides each position from its own uniform,
    so one call over W positions gives every row's decisions at positions <= L_r; a row that accepted all
    L_r of them then gets its bonus from the unrelaxed p_{L_r+1} instead of what followed. Block
    verification is not position by position: rows are verified in groups of equal length."""
    lengths, tokens = draft.lengths, draft.tokens  # [b], [b, W]
    batch, width = tokens.shape
    if width == 0:  # no row drafted: the forward gave p_1 only, and each row's token is its bonus from it
        bonus = sample_rows(torch.softmax(target_logits[:, 0].float(), dim=-1), generator)  # [b]
        return VerifyResult(num_accepted=torch.zeros_like(lengths), tokens=bonus[:, None], accept_prob=None)
    if method == "token":
        result = verify(tokens, draft_logits, target_logits, rule=rule, method=method, generator=generator,
                        inputs="logits", untruncated_probs=untruncated)
        full = result.num_accepted >= lengths  # [b]: row r accepted its whole draft
        if not bool(full.any()):
            return result
        rows = full.nonzero().squeeze(-1)
        bonus = sample_rows(torch.softmax(target_logits[rows, lengths[rows]].float(), dim=-1), generator)  # [n]
        num_accepted = torch.where(full, lengths, result.num_accepted)
        out = result.tokens.clone()  # [b, W+1]
        columns = torch.arange(width + 1, device=out.device)[None, :]
        out[rows] = torch.where(columns < lengths[rows, None], out[rows], -1)
        out[rows, lengths[rows]] = bonus
        return VerifyResult(num_accepted=num_accepted, tokens=out, accept_prob=result.accept_prob)
    num_accepted = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    out = torch.full((batch, width + 1), -1, dtype=torch.long, device=tokens.device)
    for length in sorted(set(lengths.tolist())):
        rows = (lengths == length).nonzero().squeeze(-1)
        part = verify(tokens[rows, :length], None if draft_logits is None else draft_logits[rows, :length],
                      target_logits[rows, :length + 1], rule=rule, method=method, generator=generator,
                      inputs="logits", untruncated_probs=None if untruncated is None else untruncated[rows, :length])
        num_accepted[rows] = part.num_accepted
        out[rows, :length + 1] = part.tokens
    return VerifyResult(num_accepted=num_accepted, tokens=out, accept_prob=None)


def chat_ids(tokenizer, messages, index: int = 0) -> list[int]:
    """A conversation ([{"role", "content"}, ...] with at least one user turn) through the tokenizer's chat
    template, the assistant's turn opened: the token ids the model continues."""
    if tokenizer is None:
        raise ValueError("conversations need a tokenizer: SpeculativeGenerator(..., tokenizer=tok)")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("this tokenizer has no chat template: give the prompt as a string instead")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or \
                not isinstance(message.get("content"), str):
            raise ValueError(f"conversation {index}: each message needs string 'role' and 'content', got {message!r}")
    if not any(m["role"] == "user" for m in messages):
        raise ValueError(f"conversation {index} has no user turn (roles: {[m['role'] for m in messages]})")
    encoded = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                            return_dict=True)
    return list(encoded["input_ids"])


def _add_rollback(totals: dict, who: str, counts: dict | None) -> None:
    """Sums one batch's state-rollback counts (`specdiff.lm.state`) into totals[who]."""
    if isinstance(counts, dict) and "rewinds" in counts:
        mine = totals.setdefault(who, {})
        for key, value in counts.items():
            mine[key] = mine.get(key, 0) + value


def _fit_vocabulary(drafter, verifier, drafter_tokenizer, verifier_tokenizer) -> None:
    """Drops a larger drafter's extra output rows (with a warning) when both tokenizers are known and agree
    on every shared id; refuses the pair otherwise (`specdiff.drafters.vocab.fit_vocabulary`)."""
    from specdiff.drafters.vocab import VocabularyMismatch, fit_vocabulary

    drafter_tokenizer = drafter_tokenizer if drafter_tokenizer is not None else getattr(drafter, "tokenizer", None)
    try:
        fit_vocabulary(drafter, verifier, drafter_tokenizer, verifier_tokenizer)
    except VocabularyMismatch as error:
        raise VocabularyMismatch(f"the drafter's vocabulary ({drafter.vocab_size} tokens) does not fit the "
                                 f"verifier's ({verifier.vocab_size}): {error}") from None


def _append(ids: torch.Tensor, key_mask: torch.Tensor, tokens: torch.Tensor):
    """Appends each row's emitted tokens (tokens [b, B+1], -1 padded) to left-padded ids [b, L]."""
    keep = torch.cat([key_mask, tokens >= 0], dim=1)  # [b, L + B + 1]
    joined = torch.cat([ids, tokens.clamp(min=0)], dim=1)
    if keep.shape[0] == 1:
        return joined[:, keep[0]], keep[:, keep[0]]
    index, new_mask = compaction_index(keep)
    return gather_columns(joined, index, dim=1), new_mask


def _select(ids: torch.Tensor, key_mask: torch.Tensor, rows: torch.Tensor):
    """Keeps batch rows `rows` and drops columns that are padding in every remaining row."""
    ids, key_mask = ids[rows], key_mask[rows]
    first = int(key_mask.any(0).long().argmax())
    return ids[:, first:], key_mask[:, first:]


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _pad_id(model) -> int:
    pad = getattr(model.config, "pad_token_id", None)
    return 0 if pad is None else int(pad)
