"""The one exception type of the toolkit: every message names the file (and slot) and what was wrong."""

from __future__ import annotations

import re

# C0/C1 control characters, line/paragraph separators, the bidirectional-text controls (Unicode's UAX #9: an
# override U+202E shows "x\u202egnp.pt" as "xtp.png", the "Trojan Source" trick, CVE-2021-42574), and the
# lone surrogates that stand for the undecodable bytes of a non-UTF-8 file name (PEP 383 surrogateescape): none
# may reach a one-line message raw.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape_char(m: re.Match) -> str:
    o = ord(m.group())
    if 0xDC80 <= o <= 0xDCFF:  # surrogateescape of byte o - 0xDC00: show the byte, as the shell would
        return f"\\x{o - 0xDC00:02x}"
    return repr(m.group())[1:-1]


def escape(text: object) -> str:
    """``text`` with control characters and undecodable file-name bytes written as Python escapes.

    Example:
        >>> escape("bad\\nname\\udcff.pt")
        'bad\\\\nname\\\\xff.pt'
    """
    return _UNPRINTABLE.sub(_escape_char, str(text))


def one_line(text: object) -> str:
    """Multi-line text (a library's exception) joined into one line; remaining control characters escaped."""
    return escape(" ".join(part.strip() for part in str(text).splitlines() if part.strip()))


class ForensicsError(Exception):
    """Bad input or an impossible request.

    The message restates the input: the file, the slot when there is one, what was expected and what
    was found.

    Example:
        >>> raise ForensicsError("expected key 'hidden_states'", path="data_0.pt")
        Traceback (most recent call last):
        ...
        forensics.errors.ForensicsError: data_0.pt: expected key 'hidden_states'
    """

    def __init__(self, message: str, path: str | None = None, slot: str | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.slot = slot
        super().__init__(str(self))

    def __str__(self) -> str:
        where = escape(self.path or "")
        if self.slot is not None:
            where = f"{where} [slot {escape(self.slot)}]" if where else f"slot {escape(self.slot)}"
        message = one_line(self.message)
        return f"{where}: {message}" if where else message


class ModelMismatch(ForensicsError):
    """A capture and the model it is checked against (``--model``) disagree on a size the model fixes: hidden
    size, vocabulary or layer count. The likeliest exact-mode mistake is the wrong ``--model``: one line naming
    both numbers and the file (exit 2), never a traceback deep in a comparison.

    Example:
        >>> raise ModelMismatch("hidden size 768 ≠ the model's 576", path="capture.pt")
        Traceback (most recent call last):
        ...
        forensics.errors.ModelMismatch: capture.pt: hidden size 768 ≠ the model's 576
    """
