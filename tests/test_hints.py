"""A command never recommends an option it does not take (issue 31: ``hsf report`` told the user 63 times to pass
``--ids``/``--text``, then rejected ``--ids``).

Two walks. Every ``--option`` named in any string of the package (docstrings aside) must be an option of some
``hsf`` command (or one of the few other programs' flags listed below, with why). And every ``--option`` that
``report``, ``fingerprint``, ``inspect``, ``scan`` and ``audit`` print (text, ``--json``, stderr, and the report's
HTML) on inputs that make them give hints (a capture saved without token ids, short captures without claims, the
demo's data with a draft) must be one of that command's own options.
"""

from __future__ import annotations

import ast
import html
import json
import pathlib
import re

import pytest

from forensics.cli import COMMANDS, build_parser, main

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
OTHER_PROGRAMS = {
    "--aux-layers": "a trainer's own flag, quoted from its launch command (models/conventions/rules.py)",
    "--no-deps": "pip's, in the install line of the packaged model",
}


def command_options() -> dict[str, set[str]]:
    """Each ``hsf`` command → every option string its parser accepts."""
    parser = build_parser(list(COMMANDS))
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: set(sp._option_string_actions) for name, sp in sub.choices.items()}


def test_every_option_the_package_names_exists():
    known = set().union(*command_options().values()) | {"--version"} | set(OTHER_PROGRAMS)
    unknown: dict[str, set[str]] = {}
    for f in (ROOT / "forensics").rglob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # docstrings: for maintainers
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for opt in OPTION.findall(node.value):
                    if opt not in known:
                        unknown.setdefault(opt, set()).add(str(f.relative_to(ROOT)))
    assert unknown == {}


NAMED = re.compile(r"\bhsf ([a-z][a-z-]*)")
CLAUSE = re.compile(r"[;(]|\.\s")


def _options_in(text: str, options: dict[str, set[str]]) -> set[str]:
    """The options a reader is told to pass to the command that printed ``text``: every ``--option`` in the text of a
    page (without its stylesheet and script: CSS custom properties such as ``--fail-bg`` are no advice) or of plain
    output, except one in a clause that names the command it is for (``hsf fingerprint/hsf report --ids FILE``):
    that one must be an option of a command it names (returned as ``hsf CMD --option`` when it is not)."""
    text = re.sub(r"<(style|script)\b.*?</\1>", " ", text, flags=re.S | re.I)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    out = set()
    for m in OPTION.finditer(text):
        start = max([c.end() for c in CLAUSE.finditer(text, max(0, m.start() - 120), m.start())] or
                    [max(0, m.start() - 120)])
        named = [c for c in NAMED.findall(text, start, m.start()) if c in options]
        if not named:
            out.add(m.group())
        elif not any(m.group() in options[c] for c in named):
            out.add(f"hsf {'/'.join(named)} {m.group()}")
    return out


@pytest.fixture(scope="module")
def hinting(tmp_path_factory):
    """Inputs that make the commands give hints: a capture saved without token ids whose stack's axes only the
    ids could tell apart, and short captures without claims in the README's plain-transformers layout."""
    import torch

    from forensics import load

    if not SAMPLE.is_dir():
        pytest.skip("sample_data/ is not in this checkout")
    t = tmp_path_factory.mktemp("hints")
    lad = load(SAMPLE / "ladder" / "capture_0.safetensors")
    by_r = dict(zip(lad.declared_r, lad.slots, strict=True))
    own = t / "own"
    own.mkdir()
    for k in range(2):
        hs = torch.stack([by_r[r].tensor()[1 + 10 * k:11 + 10 * k].clone() for r in (0, 3, 16, 28)])
        torch.save({"input_ids": lad.input_ids[1 + 10 * k:11 + 10 * k].clone(), "hidden_states": hs},
                   own / f"capture_{k}.pt")
    noids = t / "noids.pt"  # [4, 6, H] without ids: either axis could be the layers' (the ids tell them apart)
    torch.save(torch.stack([by_r[r].tensor()[:6].clone() for r in (0, 3, 16, 28)]), noids)
    return {"own": str(own), "noids": str(noids), "out": t}


def _strings(doc) -> list[str]:
    """Every string in a JSON document (its messages), each read as its own text."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _strings(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _strings(v)]
    return []


CASES = [
    ("report", ["{noids}"]),
    ("report", ["{own}"]),
    ("report", ["{sample}", "--draft", "{sample}/draft_eagle3", "--engine", "sglang", "--trainer", "speculators-v1"]),
    ("fingerprint", ["{noids}"]),
    ("fingerprint", ["{own}"]),
    ("inspect", ["{noids}"]),
    ("inspect", ["{own}"]),
    ("scan", ["{own}"]),
    ("scan", ["{noids}"]),
    ("audit", ["--data", "{sample}/speculators_v1/data_0.pt", "--draft", "{sample}/draft_eagle3", "--engine",
               "sglang", "--trainer", "speculators-v1"]),
    ("audit", ["--data", "{noids}", "--draft", "{sample}/draft_eagle3", "--engine", "sglang"]),
]


@pytest.mark.parametrize(("command", "argv"), CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_a_command_recommends_only_its_own_options(command, argv, hinting, capsys, tmp_path):
    args = [a.format(sample=SAMPLE, **hinting) for a in argv]
    options = command_options()
    takes = options[command]
    said = set()
    for extra in ([["--json"]] if command == "report" else [[], ["--json"]]):  # the report: its HTML, JSON, stderr
        out = ["-o", str(tmp_path / "r.html")] if command == "report" else []
        if command == "scan":
            out = ["--out", str(tmp_path / f"scan{len(extra)}")] if "--out" in takes else []
        main([command, *args, *out, *extra])
        cap = capsys.readouterr()
        said |= _options_in(cap.out + "\n" + cap.err, options)
        if command == "report" and (tmp_path / "r.html").is_file():
            said |= _options_in((tmp_path / "r.html").read_text(encoding="utf-8"), options)
        if "--json" in extra and cap.out.strip():
            said |= _options_in(". ".join(_strings(json.loads(cap.out))), options)
    assert said - takes == set(), f"hsf {command} recommends {sorted(said - takes)}, which it does not take"


def test_report_takes_the_ids_it_asks_for(hinting, capsys, tmp_path):
    """``hsf report FILE --ids IDS``: the capture whose axes only its ids tell apart is unreadable without them (exit
    2, the error names --ids), read with them (no unreadable file, 4 slots), and the regenerating command carries
    ``--ids``; several files with one file's ids are refused (exit 2, one line)."""
    import torch

    ids = tmp_path / "ids.pt"
    torch.save(torch.arange(5, 11), ids)
    out = str(tmp_path / "r.html")
    assert main(["report", hinting["noids"], "-o", out, "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["unreadable"] == 1
    code = main(["report", hinting["noids"], "--ids", str(ids), "-o", out, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code != 2 and doc["unreadable"] == 0 and sum(doc["verdicts"].values()) == 4
    assert doc["command"].endswith(f"--ids {ids} -o {out}")
    assert main(["report", hinting["own"], "--ids", str(ids), "-o", out]) == 2
    assert "exactly one file" in capsys.readouterr().err
