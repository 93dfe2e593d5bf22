"""``hsf``: the command-line view. Each command lives in ``forensics/cli/<name>.py`` with
``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only when their command runs, so
``hsf --help`` stays instant (no torch, no rich import).

Every command takes ``--json`` (one JSON document on stdout), ``-v/--explain`` (the evidence behind each
verdict) and ``-q/--quiet`` (no progress, no notes); text output leads with the verdict and its findings,
fits the terminal (``$COLUMNS``), and every error is one ``hsf COMMAND: error: …`` line on stderr.

Exit codes, the same for every command (``forensics.findings.exit_code``): 0 no fail, 1 a fail (a finding of
severity fail, a FAIL verdict, an audit mismatch), 2 unreadable input or bad arguments, 3 cannot tell.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

# libgomp (torch's OpenMP) waits actively by default: a thread at a barrier spins while its partner is
# descheduled, so on cores shared with other work each parallel region can cost a time slice. Waiting
# passively measured 9.1 → 5.1 s CPU, 14.3 → 8.4 s wall for `hsf probe --model default` (load 3.5, 2 cores)
# and 8.2–8.8 → 6.2–6.6 s CPU for the `make demo` report (load 3), same answers. libgomp reads it once, when
# torch loads it, so main() sets it before any command imports torch; a value the user set wins.
OMP_WAIT_POLICY = "PASSIVE"

# name -> one-line help (kept here so --help needs no command module import)
COMMANDS = {
    "inspect": "per-slot norm statistics and the detected format of capture files",
    "fingerprint": "which tensor is which: role, depth order and label of every slot, with evidence",
    "audit": "does serving feed the EAGLE-3 draft what training fed it? verdict, slices, fix",
    "capture": "capture hidden states from a real model (default: packaged SmolLM2) in any format",
    "scan": "scan a whole dataset: every file checked, anomalies found, resumable, parallel",
    "probe": "run a trained draft on capture data under candidate wirings and rank them",
    "report": "write one offline HTML report (verdicts first, evidence below)",
    "stamp": "write each file's layer identity and value fingerprint into the data (safetensors header / capture.json)",
    "verify": "check every file's values against its stamp; name each drifted slot",
    "conventions": "what each engine's and trainer's layer ids mean, per drafter family and version, with sources",
    "export-model": "write the packaged SmolLM2 (or any --model) as a plain HF folder to capture with transformers",
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``hsf report: error: argument --engine: invalid choice: …``), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(with_commands: list[str] | None = None) -> argparse.ArgumentParser:
    from forensics import __version__
    from forensics.findings import EXIT_BAD_INPUT, EXIT_CANNOT_TELL, EXIT_FAIL, EXIT_OK

    p = _Parser(
        prog="hsf",
        description="hidden-state forensics: tell which captured LLM hidden-state tensor is which, and "
                    "whether an EAGLE-3 draft is served what it was trained on. Layers are named in r: "
                    "r=0 embedding output, r=k output of block k (= HF hidden_states[k]), r=L last block "
                    "pre-norm, final_post after the final norm.",
        epilog=f"exit codes, every command: {EXIT_OK} nothing failed; {EXIT_FAIL} a fail (the data contradicts a "
               f"claim or is broken); {EXIT_BAD_INPUT} unreadable input or bad arguments; {EXIT_CANNOT_TELL} cannot "
               "tell (a claim could not be decided). 'hsf COMMAND --help' lists a command's options.")
    p.add_argument("--version", action="version", version=f"hsf {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_ in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if with_commands is not None and name in with_commands:
            mod = _module(name)
            if mod is not None:
                mod.add_arguments(sp)
        sp.add_argument("--json", action="store_true", help="print one JSON document instead of text")
        sp.add_argument("-v", "--explain", "--verbose", dest="explain", action="store_true",
                        help="also print the evidence behind each verdict")
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no notes on stderr")
    return p


def _module(name: str):
    try:
        return importlib.import_module(f"forensics.cli.{name.replace('-', '_')}")
    except ModuleNotFoundError as e:
        if e.name == f"forensics.cli.{name.replace('-', '_')}":
            return None
        raise


def _one_line_streams() -> None:
    """Write undecodable file-name bytes (PEP 383 surrogates) as ``\\xNN`` instead of failing to print."""
    from forensics.io.output import TEXT_ERRORS

    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=TEXT_ERRORS)
            except (ValueError, OSError):  # a stream that cannot change: leave it
                pass


def _venv_bytecode() -> None:
    """Read compiled bytecode from the install's own cache, ``<venv>/pycache``, when no cache folder is set.

    ``make`` installs with ``--no-compile`` (compiling all of torch cost 49 s instead of 16 s) and compiles what
    ``hsf`` imports into ``<venv>/pycache`` (``PYTHONPYCACHEPREFIX``). From a plain shell that prefix is unset, and
    where ``PYTHONDONTWRITEBYTECODE=1`` is set (many container images) nothing is ever cached beside the sources
    either, so every run compiled its ~2,500 modules again: 2-3x slower. Pointing at the venv's cache reads what
    the install compiled; whether bytecode is *written* stays the user's choice (``sys.dont_write_bytecode``). A
    prefix the user set wins; an install without that folder (pip outside make) is left as it is."""
    if sys.pycache_prefix is None:
        cache = os.path.join(sys.prefix, "pycache")
        if os.path.isdir(cache):
            sys.pycache_prefix = cache
            os.environ["PYTHONPYCACHEPREFIX"] = cache  # the scan's worker processes read it too


def _resolve_names(args) -> None:
    """``--engine`` and ``--trainer`` resolved once, here, for every command: ``args.engine_system`` and
    ``args.trainer_system`` (a ``forensics.models.conventions.System``, or None) are what a command passes on
    (``args.engine``/``args.trainer`` stay the words the user typed). ``--engine-version`` is checked against its
    ``--engine`` before any work (an unknown one was taken as if known, and one without ``--engine`` ignored)."""
    given = {opt: getattr(args, opt, None) for opt in ("engine", "trainer")}
    if any(v is not None for v in given.values()):
        from forensics.models.conventions import system

        for opt, name in given.items():
            setattr(args, f"{opt}_system", None if name is None else system(name))
    else:
        args.engine_system = args.trainer_system = None
    version = getattr(args, "engine_version", None)
    if version is None:
        return
    if args.engine_system is None:
        from forensics.errors import ForensicsError

        raise ForensicsError("--engine-version needs --engine (sglang or vllm)")
    args.engine_system.version(version)


def main(argv: list[str] | None = None) -> int:
    _venv_bytecode()  # before any command module (or torch) is imported
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        parser = build_parser()
        args = parser.parse_args(argv)  # prints help / version / errors and exits
        parser.print_help()
        return 2
    from forensics.cli._console import Out, say

    mod = _module(command)
    if mod is None:
        say(command, "not available in this installation")
        return 2
    try:
        args = build_parser([command]).parse_args(argv)
    except SystemExit as e:  # --help (0) or a bad argument (2, one line on stderr): a return code, not a raise
        return e.code if isinstance(e.code, int) else 2
    args.console = Out(command, quiet=args.quiet, verbose=args.explain, json=args.json)
    from forensics.errors import ForensicsError

    _one_line_streams()
    from forensics.io.sigbus import install

    install(f"hsf {command}")  # a mapped file truncated under us: one line, exit 2, never a SIGBUS death
    try:
        _resolve_names(args)
        with warnings.catch_warnings():
            # library warnings (torch's pickle-protocol note, matplotlib layout, numpy all-NaN slices) are not
            # the user's business; what matters reaches them as findings or one-line errors
            warnings.simplefilter("ignore")
            return int(mod.run(args) or 0)
    except ForensicsError as e:
        say(command, str(e))
        return 2
    except MemoryError:  # what no bound foresaw: one line naming the inputs, never a traceback
        inputs = " ".join(str(a) for a in argv if not str(a).startswith("-"))[:200]
        say(command, f"out of memory while working on {inputs}")
        return 2
    except KeyboardInterrupt:
        say(command, "interrupted")
        return 130
    except BrokenPipeError:  # `hsf … | head`: the reader left; stop quietly, no traceback at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


