"""One module per ``hsf`` command: ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from forensics.jsonable import json_safe


def print_json(doc: Any) -> None:
    json.dump(json_safe(doc), sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")




def for_each_file(paths: Iterable[str], fn: Callable[[str], Any], out: Any = None,
                  what: str = "reading") -> tuple[list[dict], int]:
    """Run ``fn`` on every capture file under ``paths``; an unreadable file becomes an error entry.

    Returns ``(entries, exit_code)``: exit 2 when any file was unreadable, else 0. With ``out`` (the command's
    :class:`~forensics.cli._console.Out`), a progress bar on stderr counts the files.
    """
    from forensics.errors import ForensicsError
    from forensics.io.formats import expand_paths
    from forensics.views.format import shown_name

    todo, bad = expand_paths(paths)
    entries: list[dict] = [error_entry(e.path or "", e) for e in bad]
    code = 2 if bad else 0
    if out is None or len(todo) < 2:
        steps: Any = None
    else:
        steps = out.progress(what, len(todo))
    step = steps.__enter__() if steps is not None else (lambda *a, **k: None)
    try:
        for f in todo:
            try:
                got = fn(f)  # one entry, or one per record of a many-sample file
                entries.extend(got if isinstance(got, list) else [got])
            except ForensicsError as e:
                entries.append(error_entry(f, e))
                code = 2
            step(shown_name(os.path.basename(f)))  # the bar is one line whatever the file's name
    finally:
        if steps is not None:
            steps.__exit__(None, None, None)
    return entries, code


def error_entry(path: str, e: Exception) -> dict:
    """A file that was not read, as a command's JSON lists it: its ``error`` and the outcome word every view gives
    it (``unreadable``: no fail of the data; the command exits 2)."""
    from forensics.findings import UNREADABLE

    return {"path": str(path), "format": None, "num_tokens": None, "hidden_size": None, "error": str(e),
            "outcome": UNREADABLE, "slots": []}


def positive_int(text: str) -> int:
    """argparse type for L and H: a whole number >= 1 (0 or -5 were taken as 'unknown' or as L = -5)."""
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    from forensics.io.limits import MAX_HIDDEN_SIZE

    if v > MAX_HIDDEN_SIZE:
        raise argparse.ArgumentTypeError(f"{v} is not plausible (at most {MAX_HIDDEN_SIZE})")
    return v


def layer_count(text: str) -> int:
    """argparse type for L: a whole number from 1 to ``MAX_NUM_LAYERS`` (10^12 once filled the machine)."""
    import argparse

    from forensics.io.limits import MAX_NUM_LAYERS

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= v <= MAX_NUM_LAYERS:
        raise argparse.ArgumentTypeError(f"{v} is not plausible (expected 1 to {MAX_NUM_LAYERS})")
    return v


def add_trainer_argument(p, help_: str = "the trainer that consumed the data") -> None:
    """``--trainer``, with the one vocabulary every command shares (``forensics.analysis.claims.TRAINERS``)."""
    from forensics.analysis.claims import TRAINERS

    # the choices go into the help text, which argparse folds to the terminal (a {a,b,...} metavar cannot fold)
    p.add_argument("--trainer", choices=TRAINERS, metavar="NAME", help=f"{help_}: {', '.join(TRAINERS)}")


def add_engine_arguments(p, help_: str = "the serving engine") -> None:
    """``--engine`` (``forensics.analysis.claims.ENGINES``) and ``--engine-version``, the same in every command."""
    from forensics.analysis.claims import ENGINES

    p.add_argument("--engine", choices=ENGINES, metavar="NAME", help=f"{help_}: {', '.join(ENGINES)}")
    p.add_argument("--engine-version", metavar="V",
                   help="sglang: pre-25454 | post-25454 (default); vllm: pre-36063 | post-36063 | post-40727 | "
                        "post-46973 (default); llama.cpp: pre-25794 | post-25794 (default) | post-27040; tokenspeed: "
                        "pre-526 | post-526 (default); atlas: pre-394 | post-394 (default). Also written "
                        "sglang<25454, >=25454, latest")


def exit_code_of(entries: list[dict], unreadable: bool, fail_on: str = "fail") -> int:
    """The exit code of a command over per-file JSON entries (their ``findings`` and ``verdict``)."""
    from forensics.findings import exit_code

    findings = [f for e in entries for f in e.get("findings") or []]
    return exit_code(findings, [e.get("verdict") for e in entries], unreadable=unreadable, fail_on=fail_on)


def verdict_of(entries: list[dict], fail_on: str = "fail") -> str:
    """The command's one verdict over per-file JSON entries (``forensics.findings.decide``: the exit code's rule
    over what was read; an unreadable file is its ``error`` entry and exit 2, and keeps the verdict from "pass")."""
    from forensics.findings import decide

    findings = [f for e in entries for f in e.get("findings") or []]
    return decide(findings, [e.get("verdict") for e in entries], fail_on=fail_on,
                  unreadable=any(e.get("error") for e in entries)).value


def add_model_arguments(p, help: str) -> None:
    """``--model`` plus the options of running it: ``--max-memory`` and ``--tokens`` (every verb that takes a
    model gets the same three)."""
    p.add_argument("--model", metavar="PATH", help=help)
    p.add_argument("--max-memory", metavar="SIZE",
                   help="memory budget for the model, e.g. 1GB (default: half the available RAM); a model "
                        "that does not fit runs block by block from its safetensors shards")
    p.add_argument("--tokens", type=positive_int, metavar="T",
                   help="exact mode runs the model on the first T tokens of each sample (default 128)")


def target_of(args) -> Any:
    """``--model``/``--max-memory``/``--tokens`` → a ``forensics.models.target.Target`` (None without --model);
    the per-block progress bar is on when stderr is a terminal and --json is not given."""
    if getattr(args, "model", None) is None:
        return None
    from forensics.models.target import open_target

    return open_target(args.model, max_memory=args.max_memory, tokens=args.tokens,
                       progress=not getattr(args, "json", False) and sys.stderr.isatty())



def add_ids_arguments(p) -> None:
    """``--ids FILE`` / ``--text FILE``: the token ids of a capture saved without them (exact mode needs them)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ids", metavar="FILE", help="token ids of a capture saved without them: a .pt/.npy tensor "
                                                  "or list, or a text file of integers")
    g.add_argument("--text", metavar="FILE", help="the text the capture was made from, tokenised by --model's "
                                                   "tokenizer (exactly as the capture tokenised it)")


def ids_of(args) -> Any:
    """The ``--ids``/``--text`` token ids as a 1-D int64 tensor, or None; they are one capture's tokens, so the
    command must name exactly one file (``args.paths``)."""
    from forensics.errors import ForensicsError

    ids = _ids_of(args)
    paths = getattr(args, "paths", None)
    if ids is not None and paths is not None and (len(paths) != 1 or os.path.isdir(paths[0])):
        raise ForensicsError("--ids/--text give the tokens of one capture file; pass exactly one file", path=paths[0])
    return ids


def _ids_of(args) -> Any:
    from forensics.errors import ForensicsError

    if getattr(args, "ids", None):
        from forensics.io.formats import read_ids

        return read_ids(args.ids)
    text_file = getattr(args, "text", None)
    if not text_file:
        return None
    if getattr(args, "model", None) is None:
        raise ForensicsError("--text needs --model (its tokenizer turns the text into token ids)", path=text_file)
    from forensics.io.limits import MAX_TEXT_BYTES, read_bounded

    raw = read_bounded(text_file, MAX_TEXT_BYTES, "the text")  # a regular file only: a FIFO never blocks
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ForensicsError(f"the text is not UTF-8 ({e.reason} at byte {e.start})", path=text_file) from None
    from forensics.models.target import tokenize

    return tokenize(args.model, text)


def add_stamp_argument(p) -> None:
    """``--no-stamp-check``: every command that reads a capture's values checks its stamp (``hsf stamp``) in the
    same read; this skips it."""
    p.add_argument("--no-stamp-check", dest="stamp_check", action="store_false",
                   help="do not check the files' stamps (hsf stamp) against the values read (default: a file "
                        "changed since it was stamped is a stamp_drift FAIL, and the stamp's layers are its "
                        "claim when none is given)")
