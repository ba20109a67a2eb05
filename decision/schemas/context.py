"""The tokenizer's byte view that compilation needs (``TokenizerContext``), computed once.

Its own module because everything downstream, the automata and the decoder, reads a tokenizer
through it: each token's bytes, the tokens of each byte string, the canonical encoding of an
answer, a fingerprint that keys the compile cache. ``tokenizer_context`` also refuses a
tokenizer whose encoding does not spell a text's own bytes (the automata spell answers byte for
byte).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from outlines_core import Vocabulary
from tokenizers import Tokenizer

from decision.errors import DecisionInputError
from decision.tokenizer import SpecialIds, build_vocabulary, special_ids, token_bytes


@dataclass
class TokenizerContext:
    """What compilation needs from one tokenizer, computed once."""

    tokenizer: Tokenizer
    special: SpecialIds
    vocabulary: Vocabulary
    pieces: list[bytes | None]
    by_bytes: dict[bytes, list[int]]
    fingerprint: str
    vocab_size: int
    max_piece: int = field(default=1)
    plain: Tokenizer | None = None  # a copy that reads special-token text as ordinary text

    def canonical_ids(self, text: str) -> list[int]:
        """``text`` in the tokenizer's own (canonical) encoding, as an answer: text such as
        ``[EOS]`` or ``<a1>`` is its bytes' tokens, never a special token (answers hold none)."""
        return (self.plain or self.tokenizer).encode(text, add_special_tokens=False).ids

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in its canonical encoding (``canonical_ids``)."""
        return len(self.canonical_ids(text))

    def text(self, ids: list[int]) -> str:
        """The text of answer token ids (``[EOS]`` padding dropped)."""
        data = b"".join(self.pieces[i] or b"" for i in ids if i != self.special.eos)
        return data.decode("utf-8", errors="strict")


_contexts: dict[int, tuple[Tokenizer, TokenizerContext]] = {}
_lock = threading.Lock()


# Texts a tokenizer must encode back to exactly their bytes: the first starts with a letter (a
# pre-tokenizer that adds a prefix space adds it there), the second with and ends in spaces (a
# normaliser that strips them), both hold case, digits, composed and decomposed accents,
# compatibility characters NFKC folds, CJK, emoji, a character outside the BMP, NUL and CR/LF.
_EXACT_PROBES = (
    "Yes no 12 \u00e9 e\u0301 \u00df \ufb01 \u2460 \uff21 \u4e2d\u6587 \U0001f600 \U00010348"
    " [EOS] <a1> \x00\t\r\n",
    "  x \u0130  ",
)


def _check_exact(plain: Tokenizer, pieces: list[bytes | None]) -> None:
    """Refuse a tokenizer whose encoding does not spell a text's own bytes (a normaliser, NFKC
    or lowercasing, or a pre-tokenizer adding a prefix space): answers are spelled byte for byte
    by the automata, and budgets and scored options count the canonical encoding, so an option
    "\ufb01" counted as "fi" got a slot too short for its own bytes. Every byte must be a token
    (integer budgets count characters; a BPE lacking a byte drops it from the text)."""
    if plain.normalizer is not None:
        raise DecisionInputError(
            "tokenizer has a normalizer: answers are spelled byte for byte, and a normalised "
            "encoding spells another text", "tokenizer",
        )
    single = {p for p in pieces if p is not None and len(p) == 1}
    missing = [b for b in range(256) if bytes([b]) not in single]
    if missing:  # a BPE without the byte drops it from the text silently
        raise DecisionInputError(
            f"tokenizer has no token for {len(missing)} of the 256 bytes (first "
            f"0x{missing[0]:02x}): some texts cannot be spelled", "tokenizer",
        )
    # a non-special added token's text is matched before the byte-level model: one whose text
    # is also a byte's symbol ("\u00fc" is byte 0xFC's) read "\u00fc" as that lone byte
    added = tuple(t.content for t in plain.get_added_tokens_decoder().values() if not t.special)
    for text in (*_EXACT_PROBES, *added):
        ids = plain.encode(text, add_special_tokens=False).ids
        spelled = b"".join(pieces[i] or b"" for i in ids if i < len(pieces))
        if spelled != text.encode("utf-8"):
            raise DecisionInputError(
                f"tokenizer does not encode text as its own bytes ({text!r} comes back as "
                f"{spelled!r}): answers are spelled byte for byte", "tokenizer",
            )


def tokenizer_context(tokenizer: Tokenizer) -> TokenizerContext:
    """The (cached) compilation context of ``tokenizer``."""
    with _lock:
        hit = _contexts.get(id(tokenizer))
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
    pieces = token_bytes(tokenizer)
    by_bytes: dict[bytes, list[int]] = {}
    for token_id, data in enumerate(pieces):
        if data:
            by_bytes.setdefault(data, []).append(token_id)
    serialized = tokenizer.to_str()
    plain = Tokenizer.from_str(serialized)
    plain.encode_special_tokens = True
    _check_exact(plain, pieces)
    ctx = TokenizerContext(
        tokenizer=tokenizer,
        special=special_ids(tokenizer),
        vocabulary=build_vocabulary(tokenizer),
        pieces=pieces,
        by_bytes=by_bytes,
        fingerprint=hashlib.sha1(serialized.encode()).hexdigest(),
        vocab_size=len(pieces),
        max_piece=max(len(p) for p in by_bytes),
        plain=plain,
    )
    with _lock:
        _contexts[id(tokenizer)] = (tokenizer, ctx)
    return ctx
