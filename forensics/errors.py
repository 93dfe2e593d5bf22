"""The one exception type of the toolkit: every message names the file (and slot) and what was wrong."""

from __future__ import annotations


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
        where = self.path or ""
        if self.slot is not None:
            where = f"{where} [slot {self.slot}]" if where else f"slot {self.slot}"
        return f"{where}: {self.message}" if where else self.message
