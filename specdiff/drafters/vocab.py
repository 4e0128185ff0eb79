"""Fitting a drafter's vocabulary to its verifier's, before any generation (issue 12, item 8).

Real pairs can differ in embedding size: Dream-7B has 152,064 output rows and Qwen3-8B 151,936
(both pad their tokenizers' ~151,670 tokens to a multiple of 128 or 256). `fit_vocabulary`:
- refuses a drafter whose mask token id is outside its own embedding table;
- with both tokenizers, refuses a pair whose tokenizers disagree on an id both define (the mask
  token included: a mask id that is a regular token of the verifier would be read as a mask
  whenever the verifier emits it);
- drops a larger drafter's extra output rows with a warning (`drafter.output_vocab`), but only when
  the tokenizers agree: the dropped rows are ids the verifier cannot emit; without tokenizers that
  cannot be checked and the pair is refused;
- refuses a drafter smaller than the verifier: the verifier could emit ids the drafter cannot read;
- a drafter with a reduced draft vocabulary (`Drafter.draft_to_target`, d2t) reads every verifier id but
  proposes only V_d of them: its index must hold distinct ids of the verifier; it is then told the
  verifier's size (`drafter.target_vocab`), and its q is 0 outside the index.
"""
from __future__ import annotations

import warnings


class VocabularyMismatch(ValueError):
    """A drafter's vocabulary or mask token does not fit its verifier's."""


def fit_vocabulary(drafter, verifier, drafter_tokenizer=None, verifier_tokenizer=None) -> None:
    """Checks (and where allowed trims) `drafter` for `verifier` (an `sd.Verifier` or a model); raises
    VocabularyMismatch otherwise. Idempotent."""
    verifier_vocab = int(getattr(verifier, "vocab_size", None) or verifier.config.vocab_size)
    drafter_vocab = drafter.model_vocab_size
    mask = getattr(drafter, "mask_token_id", None)
    if mask is not None and not 0 <= mask < drafter_vocab:
        raise VocabularyMismatch(f"the drafter's mask token id {mask} is outside its embedding table "
                                 f"[0, {drafter_vocab})")
    if drafter_vocab < verifier_vocab:
        raise VocabularyMismatch(f"the drafter's vocabulary ({drafter_vocab} rows) is smaller than the verifier's "
                                 f"({verifier_vocab}): the verifier could emit tokens the drafter cannot read (a "
                                 "drafter trained with another tokenizer does not fit this verifier)")
    d2t = getattr(drafter, "draft_to_target", None)
    if d2t is not None:
        _check_draft_index(d2t, verifier_vocab)
        drafter.target_vocab, drafter.output_vocab = verifier_vocab, None
    both = drafter_tokenizer is not None and verifier_tokenizer is not None
    if both:
        _check_tokenizers(drafter_tokenizer, verifier_tokenizer, mask)
    if drafter_vocab == verifier_vocab or d2t is not None:
        drafter.output_vocab = None
        return
    if not both:
        raise VocabularyMismatch(f"the drafter has {drafter_vocab} output rows and the verifier {verifier_vocab}: "
                                 "pass both tokenizers so that specdiff can check they agree on the shared ids "
                                 "before dropping the drafter's extra rows")
    warnings.warn(f"dropping the drafter's output rows {verifier_vocab}..{drafter_vocab - 1} (the verifier has "
                  f"{verifier_vocab}; both tokenizers agree on every shared id)", stacklevel=2)
    drafter.output_vocab = verifier_vocab


def _check_draft_index(d2t, verifier_vocab: int) -> None:
    if d2t.ndim != 1 or d2t.numel() == 0:
        raise VocabularyMismatch(f"the drafter's draft-to-target index must be a non-empty 1-D list of ids, got shape "
                                 f"{tuple(d2t.shape)}")
    low, high = int(d2t.min()), int(d2t.max())
    if low < 0 or high >= verifier_vocab:
        raise VocabularyMismatch(f"the drafter's draft-to-target index names id {high if high >= verifier_vocab else low}, "
                                 f"outside the verifier's vocabulary [0, {verifier_vocab}): it was built for another "
                                 "verifier")
    if d2t.unique().numel() != d2t.numel():
        raise VocabularyMismatch("the drafter's draft-to-target index names some verifier id twice: two draft rows "
                                 "would share one token's probability")


def _check_tokenizers(drafter_tokenizer, verifier_tokenizer, mask: int | None) -> None:
    ours, theirs = _id_to_token(drafter_tokenizer), _id_to_token(verifier_tokenizer)
    shared = sorted(set(ours) & set(theirs))
    differ = [i for i in shared if ours[i] != theirs[i]]
    if mask is not None and mask in differ:
        raise VocabularyMismatch(f"the drafter's mask token id {mask} ({ours[mask]!r}) is the verifier's token "
                                 f"{theirs[mask]!r}: the drafter would read it as a mask whenever the verifier "
                                 "emits it")
    if differ:
        shown = ", ".join(f"{i}: {ours[i]!r} vs {theirs[i]!r}" for i in differ[:5])
        raise VocabularyMismatch(f"the drafter's and the verifier's tokenizers disagree on {len(differ)} shared ids "
                                 f"({shown}{', ...' if len(differ) > 5 else ''}): they cannot share drafts")


def _id_to_token(tokenizer) -> dict[int, str]:
    return {int(i): token for token, i in tokenizer.get_vocab().items()}
