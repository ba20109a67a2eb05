"""Bound a user regex before compiling it, so a schema can never hang or exhaust memory.

The regex is parsed with Python's own parser (the syntax outlines-core accepts is a close
superset for the constructs allowed here); features a DFA cannot express (look-around,
back-references, anchors) are rejected, and the size of the regex after expanding every counted
repetition (``a{1000}`` is 1000 copies of ``a`` for a DFA builder) is bounded.
"""

from __future__ import annotations

import re
import re._constants as sre_constants
import re._parser as sre_parse
import warnings
from collections.abc import Iterator

from decision.errors import SchemaError

MAX_EXPANDED_SIZE = 5_000
_UNBOUNDED = sre_constants.MAXREPEAT
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT)
_FORBIDDEN = {
    sre_constants.ASSERT: "look-around",
    sre_constants.ASSERT_NOT: "look-around",
    sre_constants.GROUPREF: "back-references",
    sre_constants.GROUPREF_EXISTS: "conditional groups",
    sre_constants.AT: "anchors (^, $, \\b); the whole answer is matched anyway",
}


def _size(pattern: sre_parse.SubPattern | list, field: str) -> int:
    total = 0
    for op, arg in pattern:
        if op in _FORBIDDEN:
            raise SchemaError(f"regex uses {_FORBIDDEN[op]}, which is not supported", field)
        if op in _REPEATS:
            low, high, sub = arg
            copies = low + 1 if high == _UNBOUNDED else high
            total += max(copies, 1) * _size(sub, field)
        elif op == sre_constants.SUBPATTERN:
            total += _size(arg[-1], field)
        elif op == sre_constants.ATOMIC_GROUP:
            total += _size(arg, field)
        elif op == sre_constants.BRANCH:
            total += sum(_size(branch, field) for branch in arg[1])
        else:
            total += 1
        if total > MAX_EXPANDED_SIZE:
            break
    return total


# a counted repetition as Rust's regex reads it, which allows whitespace inside the braces
_RUST_REPEAT = re.compile(r"\{\s*[0-9]+\s*(?:,\s*[0-9]*\s*)?\}")


# inline flags: (?x) to the end of the enclosing group, (?x:...) for the group; off with -x
_FLAG_GROUP = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")


def _unescaped(regex: str) -> Iterator[tuple[int, str, bool, bool]]:
    """Each character of ``regex`` that is not escaped (``\\x`` is skipped whole) nor a
    class's own brackets, its index, whether it stands in a character class (a ``]`` first in a
    class, also after ``^``, is a character) and whether verbose mode is on there. Verbose mode
    is tracked as both Python and Rust scope it: on after ``(?x)`` to the end of the enclosing
    group, inside ``(?x:...)``, off inside ``(?-x:...)``; where it is on, a ``#`` outside a
    class and the rest of its line are skipped (a comment for both). Until 2026-12 the whole
    regex was read as verbose when a flag turned it on anywhere, so a literal ``#`` before a
    ``(?x:...)`` group hid the group from the checks below."""
    i, in_class, verbose = 0, False, False
    enclosing: list[bool] = []  # verbose mode outside each open group
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            i += 2
            continue
        if not in_class and ch == "[":
            in_class = True
            i += 1
            i += regex.startswith("^", i)
            i += regex.startswith("]", i)  # a "]" first in a class is a character
            continue
        if in_class:
            if ch == "]":
                in_class = False
            else:
                yield i, ch, True, verbose
            i += 1
            continue
        if verbose and ch == "#":  # a comment to the end of the line
            end = regex.find("\n", i)
            i = len(regex) if end < 0 else end
            continue
        flags = _FLAG_GROUP.match(regex, i) if ch == "(" else None
        if flags is not None:
            on = (verbose or "x" in flags[1]) and "x" not in (flags[2] or "")
            if flags[3] == ":":
                enclosing.append(verbose)
            verbose = on
            i = flags.end()  # flag letters: no space, brace or "#" to check
            continue
        if ch == "(":
            enclosing.append(verbose)
        elif ch == ")" and enclosing:
            verbose = enclosing.pop()
        yield i, ch, False, verbose
        i += 1


def _spaced_repeat(regex: str) -> str | None:
    """The first counted repetition holding whitespace (``a{ 3 }``, ``a{2, 5}``) outside a
    character class and a verbose-mode comment: Rust's regex reads it as a repetition, Python's
    parser as text, so the expanded size would miss it (``(a{ 1000 }){ 1000 }`` counted 17
    units)."""
    for i, ch, in_class, _ in _unescaped(regex):
        if ch == "{" and not in_class:
            match = _RUST_REPEAT.match(regex, i)
            if match and any(c.isspace() for c in match.group()):
                return match.group()
    return None


# inline flags turning verbose mode on: (?x), (?ix), (?x-i); as a group too, (?x:...)
VERBOSE_FLAGS = r"\(\?[a-zA-Z]*x[a-zA-Z]*(?:-[a-zA-Z]*)?"
_VERBOSE_FLAG = re.compile(VERBOSE_FLAGS + "[:)]")
# whitespace as Rust's verbose mode skips it (Unicode White_Space) and as Python's does
_RUST_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(chr(c) for c in range(0x2000, 0x200B)))
_PYTHON_SPACE = frozenset(" \t\n\r\v\f")


def _verbose_space(regex: str) -> str | None:
    """Where verbose mode is on, the first unescaped character Rust reads otherwise than
    Python: whitespace Rust skips but Python reads as text (a non-ASCII space, U+00A0, U+3000...,
    anywhere; any space inside a character class), or a ``#`` inside a class, where Rust starts
    a comment and Python reads a character. Rust's answer to ``(?x)a`` U+3000 ``b`` was ``ab``,
    which Python's reading (a U+3000 b) does not match, ``(?x)[ a]b`` never gave the space
    Python allows, and ``(?x)[a#]`` newline ``]`` (Rust: the class [a]) answered ``a``, which
    Python's reading ([a#] then ``]``) does not match."""
    if not _VERBOSE_FLAG.search(regex):
        return None
    for _, ch, in_class, verbose in _unescaped(regex):
        if verbose and (ch in _RUST_SPACE and (in_class or ch not in _PYTHON_SPACE)
                        or in_class and ch == "#"):
            return ch
    return None


def check_regex(regex: str, field: str) -> int:
    """Validate ``regex`` and return its expanded size; raise ``SchemaError`` when unusable."""
    if not regex:
        raise SchemaError("regex is empty", field)
    spaced = _spaced_repeat(regex)
    if spaced is not None:
        raise SchemaError(
            f"regex has a counted repetition with whitespace ({spaced!r}), which outlines-core "
            "reads as a repetition and Python as text; write it without spaces ({3}, {2,5}), "
            "or escape the brace (\\{) for text",
            field,
        )
    space = _verbose_space(regex)
    if space == "#":
        raise SchemaError(
            "regex in verbose mode (x flag) has '#' in a character class: outlines-core reads "
            "it as the start of a comment, Python as text; escape it (\\#) or leave verbose "
            "mode",
            field,
        )
    if space is not None:
        raise SchemaError(
            f"regex in verbose mode (x flag) has the whitespace {space!r} in a character class "
            "or outside the ASCII spaces: outlines-core skips it, Python reads it as text; "
            "escape it by its code (\\u3000, \\x20) or leave verbose mode",
            field,
        )
    try:
        with warnings.catch_warnings():
            # "Possible nested set" for Rust classes such as [[:digit:]] (docs/decoding.md,
            # Known limits): Python's parser is only screening here, its warning would reach
            # the service's log once per process
            warnings.simplefilter("ignore", FutureWarning)
            parsed = sre_parse.parse(regex)
    except (re.error, RecursionError, OverflowError) as exc:
        raise SchemaError(f"invalid regex: {exc}", field) from exc
    size = _size(parsed, field)
    if size > MAX_EXPANDED_SIZE:
        raise SchemaError(
            f"regex expands to more than {MAX_EXPANDED_SIZE} units (counted repetitions); "
            "simplify it or lower its repetition counts",
            field,
        )
    return size
