"""The project's tokenizer: byte-level BPE with one token per digit and the layout's special tokens.

Digits are split one per token so that an integer is a digit sequence: range automata stay small
and a small model learns numbers digit by digit. The special tokens come first, in a fixed order,
so their ids are the same for every tokenizer this module trains.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from outlines_core import Vocabulary
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from decision.errors import DecisionInputError

MAX_QUESTIONS = 8
PAD, MASK, EOS, DOC = "[PAD]", "[MASK]", "[EOS]", "<doc>"
QUESTION_MARKERS = tuple(f"<q{i}>" for i in range(1, MAX_QUESTIONS + 1))
ANSWER_MARKERS = tuple(f"<a{i}>" for i in range(1, MAX_QUESTIONS + 1))
SPECIAL_TOKENS: tuple[str, ...] = (PAD, MASK, EOS, DOC, *QUESTION_MARKERS, *ANSWER_MARKERS)


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the layout's special tokens in one tokenizer."""

    pad: int
    mask: int
    eos: int
    doc: int
    questions: tuple[int, ...]  # <q1>..<q8>
    answers: tuple[int, ...]  # <a1>..<a8>

    @property
    def all(self) -> frozenset[int]:
        """Every special id (none of them may appear inside an answer)."""
        return frozenset((self.pad, self.mask, self.eos, self.doc, *self.questions, *self.answers))


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE tokenizer on ``texts`` with digits split one per token.

    All 256 byte symbols are in the initial alphabet, so any text encodes; the special tokens
    take ids ``0..len(SPECIAL_TOKENS)-1`` in ``SPECIAL_TOKENS`` order.
    """
    minimum = len(SPECIAL_TOKENS) + 256
    if vocab_size < minimum:
        raise DecisionInputError(
            f"vocab_size {vocab_size} is below {minimum} (specials + 256 bytes)", "vocab_size"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def special_ids(tokenizer: Tokenizer) -> SpecialIds:
    """Look up the layout's special tokens; a tokenizer lacking one is rejected."""

    def get(token: str) -> int:
        token_id = tokenizer.token_to_id(token)
        if token_id is None:
            raise DecisionInputError(f"tokenizer has no special token {token!r}", "tokenizer")
        return token_id

    return SpecialIds(
        pad=get(PAD),
        mask=get(MASK),
        eos=get(EOS),
        doc=get(DOC),
        questions=tuple(get(t) for t in QUESTION_MARKERS),
        answers=tuple(get(t) for t in ANSWER_MARKERS),
    )


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte-to-unicode table used by the ByteLevel pre-tokenizer."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes, strict=True)}


def token_bytes(tokenizer: Tokenizer) -> list[bytes | None]:
    """The exact bytes each token id produces; ``None`` for special (added) tokens."""
    table = _unicode_to_byte()
    # added tokens (ours and any a checkpoint's tokenizer brings) never appear inside answers
    specials = set(SPECIAL_TOKENS) | {
        t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special
    }
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    # by the largest id, not the count: a tokenizer's ids may have gaps (the engine then checks
    # len(...) against the model's embedding rows)
    out: list[bytes | None] = [None] * (max(vocab.values(), default=-1) + 1)
    for token, token_id in vocab.items():
        if token in specials:
            continue
        try:
            out[token_id] = bytes(table[ch] for ch in token)
        except KeyError as exc:
            raise DecisionInputError(
                f"token {token!r} is not a byte-level token", "tokenizer"
            ) from exc
    return out


def build_vocabulary(tokenizer: Tokenizer) -> Vocabulary:
    """outlines-core ``Vocabulary`` of ``tokenizer``: normal tokens by bytes, ``[EOS]`` as eos."""
    mapping: dict[bytes, list[int]] = {}
    for token_id, data in enumerate(token_bytes(tokenizer)):
        if data:
            mapping.setdefault(data, []).append(token_id)
    return Vocabulary(special_ids(tokenizer).eos, mapping)
