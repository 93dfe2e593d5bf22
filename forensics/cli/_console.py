"""How ``hsf`` talks to a terminal: text folded to its width, verdict words in colour, progress on stderr,
every error in one format on stderr.

Colour and progress use ``rich``, imported only when they are shown (``hsf --help`` stays instant). Colour is
on only when stdout is a terminal and ``NO_COLOR`` is unset (https://no-color.org; ``FORCE_COLOR`` forces
it); ``--json`` output is never coloured. Progress goes to stderr, only when stderr is a terminal and
``--quiet`` is off, and is erased when done, so a piped or redirected run prints exactly its result.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from forensics.errors import escape
from forensics.views.format import TEXT_WIDTH, fit

# verdict words the views put in capitals; coloured where they stand (lower-case prose stays plain)
STYLES = {"FAIL": "bold red", "MISMATCH": "bold red", "ERROR": "bold red", "NO": "red",
          "WARN": "bold yellow", "CANNOT TELL": "bold yellow",
          "PASS": "bold green", "MATCH": "bold green", "OK": "green", "INFO": "cyan"}
_WORDS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, STYLES), key=len, reverse=True)) + r")\b")


def printable(text: str) -> str:
    """``text`` with every control character but the newline escaped (``\\x1b``, ``\\r``): a file name, slot
    name or token from the data may hold a terminal escape sequence that recolours, moves the cursor or erases a
    line (a FAIL row above it), and the views put none of their own in."""
    return "\n".join(escape(line) for line in str(text).split("\n"))


def width() -> int:
    """Columns to fill: ``$COLUMNS``, else the terminal's, else ``TEXT_WIDTH`` (a pipe or a file)."""
    return max(40, shutil.get_terminal_size((TEXT_WIDTH, 24)).columns)


def _env_on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def colour_on(stream: Any = None) -> bool:
    stream = sys.stdout if stream is None else stream
    if _env_on("NO_COLOR"):
        return False
    if _env_on("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


class Out:
    """One command's output: ``text()`` for results, ``note()`` for lines only a terminal needs, ``error()``,
    ``progress()`` and ``status()`` for work over about two seconds."""

    def __init__(self, command: str, quiet: bool = False, verbose: bool = False, json: bool = False):
        self.command, self.quiet, self.verbose, self.json = command, quiet, verbose, json
        self.width = width()

    # ---------------------------------------------------------------- results (stdout)
    def text(self, text: str) -> None:
        """Print a result, folded to the width, verdict words coloured on a terminal."""
        text = fit(printable(text), self.width)
        if self.json or not colour_on():
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            return
        from rich.console import Console
        from rich.text import Text

        t = Text(text)
        for m in _WORDS.finditer(text):
            t.stylize(STYLES[m.group(1)], m.start(), m.end())
        Console(force_terminal=True, soft_wrap=True, highlight=False).print(t)

    # ---------------------------------------------------------------- stderr
    def error(self, message: str) -> None:
        """``hsf COMMAND: error: MESSAGE`` on stderr (the one error format of every command)."""
        say(self.command, message)

    def note(self, message: str, wrap: bool = True) -> None:
        """A line for the person at the terminal (stderr; silenced by ``--quiet``); ``wrap=False``: one line
        whatever its length (a note naming a file, which a script may grep like an error line)."""
        if not self.quiet:
            line = printable(f"hsf {self.command}: {message}")
            sys.stderr.write((fit(line, self.width) if wrap else line) + "\n")

    def _live(self) -> bool:
        return not self.quiet and bool(getattr(sys.stderr, "isatty", lambda: False)())

    @contextmanager
    def progress(self, what: str, total: int | None = None) -> Iterator[Any]:
        """A bar on stderr: ``with out.progress("fingerprint", n) as step: step("file.pt")`` after each item, or
        ``step(done=k, total=n)`` from a library callback. Without a total yet the bar pulses (loading)."""
        if not self._live():
            yield lambda *a, **k: None
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn(f"hsf {self.command}: {what}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("{task.description}"),
                      console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("", total=total)

            def step(desc: str | None = None, advance: int = 1, done: int | None = None,
                     total: int | None = None) -> None:
                kw: dict[str, Any] = {} if desc is None else {"description": desc[-40:]}
                if done is None:
                    bar.update(task, advance=advance, **kw)
                else:
                    bar.update(task, completed=done, total=total, **kw)

            yield step

    @contextmanager
    def status(self, what: str) -> Iterator[None]:
        """A spinner on stderr while one long call runs (model loading, a whole probe)."""
        if not self._live():
            yield
            return
        from rich.console import Console

        with Console(stderr=True).status(f"hsf {self.command}: {what}"):
            yield


def say(command: str, message: str) -> None:
    sys.stderr.write(f"hsf {command}: error: {escape(message)}\n")
    sys.stderr.flush()
