"""The testbed tokenizer: a word-level vocabulary in which every digit is its own token.

Built with `tokenizers` and saved as `specdiff/zoo/tokenizer.json`; load it with
`specdiff.zoo.tokenizer()` (a `PreTrainedTokenizerFast`).

Spaces are kept as a `▁` prefix on the following piece (as in SentencePiece), so decoding is an
exact inverse of encoding: `▁Mia ▁has ▁2 4 ▁shells .` decodes to `Mia has 24 shells.`.
Pieces: `####`, a word, one digit, or one other character, each optionally after `▁`.
"""
from __future__ import annotations

from pathlib import Path

BOS, EOS, PAD, MASK, UNK = "<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>", "<|unk|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, MASK, UNK]  # ids 0..4
SPACE = "\u2581"  # ▁
PIECE_PATTERN = f"{SPACE}?####|{SPACE}?[A-Za-z]+|{SPACE}?[0-9]|{SPACE}?[^A-Za-z0-9{SPACE}]|{SPACE}"
TOKENIZER_PATH = Path(__file__).parent / "tokenizer.json"


def _pieces_model():
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    def configure(tokenizer: Tokenizer) -> Tokenizer:
        tokenizer.normalizer = normalizers.Replace(" ", SPACE)
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated")
        tokenizer.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.Fuse()])
        return tokenizer

    return Tokenizer, WordLevel, processors, configure


def training_corpus(n_per_split: int = 5_000) -> list[str]:
    """Texts whose pieces form the vocabulary: problems from every split, plus every word the
    generator can emit in every position (so no test problem meets an unknown piece)."""
    from specdiff.eval import tasks

    texts = []
    for split in tasks.SPLITS:
        for problem in tasks.arith_problems(split, n_per_split, seed=0):
            texts += [problem.prompt, problem.answer]
    words = (list(tasks.NAMES) + list(tasks.NAMES.values()) + tasks.OBJECTS + tasks.CONTAINERS
             + tasks.BUY + tasks.LOSE + list(tasks.SHARE_GROUPS))
    texts += [" ".join(words), "\n".join(words), " ".join(w.lower() for w in words)]
    texts += [" 0 1 2 3 4 5 6 7 8 9", "0123456789", " + - * / = , . ? ! : ; ( ) $ # % \\ { }", "+-*/=,.?!:;()$#%\\{}"]
    return texts


def build_tokenizer(path: Path | str = TOKENIZER_PATH):
    """Builds the word-level tokenizer from `training_corpus()` and saves it to `path`."""
    Tokenizer, WordLevel, processors, configure = _pieces_model()
    probe = configure(Tokenizer(WordLevel({UNK: 0}, unk_token=UNK)))
    pieces = set()
    for text in training_corpus():
        normalized = probe.normalizer.normalize_str(text)
        pieces.update(piece for piece, _ in probe.pre_tokenizer.pre_tokenize_str(normalized))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for piece in sorted(pieces):
        vocab.setdefault(piece, len(vocab))
    tokenizer = configure(Tokenizer(WordLevel(vocab, unk_token=UNK)))
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])])
    tokenizer.save(str(path))
    return tokenizer


def load_tokenizer(path: Path | str = TOKENIZER_PATH):
    """The saved tokenizer as a `transformers.PreTrainedTokenizerFast` (adds bos when asked to add
    special tokens; decode with `skip_special_tokens=True` to get the text back)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(path), bos_token=BOS, eos_token=EOS, pad_token=PAD, mask_token=MASK,
        unk_token=UNK, clean_up_tokenization_spaces=False, padding_side="left")
