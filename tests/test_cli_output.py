"""What ``hsf`` prints: every command's text fits ``$COLUMNS``, the verdict comes first, colour only on a terminal
(never with ``NO_COLOR`` or ``--json``), progress only on stderr, every error one ``hsf CMD: error:`` line."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from forensics.cli import main

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WIDTH = 100


@pytest.fixture
def run(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)

    def call(*argv: str) -> tuple[int, str, str]:
        rc = main([str(a) for a in argv])
        cap = capsys.readouterr()
        return rc, cap.out, cap.err

    return call


def _commands(sd) -> dict[str, list]:
    v1 = sd / "speculators_v1"
    draft = sd / "draft_eagle3"
    return {
        "inspect": ["inspect", sd],
        "fingerprint": ["fingerprint", sd],
        "fingerprint -v": ["fingerprint", v1 / "data_0.pt", sd / "ladder", "-v"],
        "audit -v": ["audit", "--data", v1, "--draft", draft, "--engine", "sglang", "-v"],
        "probe": ["probe", "--draft", draft, "--data", v1 / "data_0.pt", "--candidates", "embed,L3,L16;L3,L16,L28"],
        "scan": ["scan", sd, "--workers", "0"],
        "report": ["report", v1 / "data_0.pt", sd / "ladder", "--draft", draft, "--engine", "sglang", "-o", None],
        "verify": ["verify", v1],
        "conventions": ["conventions"],
        "error": ["fingerprint", sd / "no-such-file.pt"],
    }


def test_every_command_fits_100_columns(run, sample_data, tmp_path):
    seen = {}
    for name, argv in _commands(sample_data).items():
        argv = [tmp_path / "r.html" if a is None else a for a in argv]
        rc, out, err = run(*argv)
        assert out or err, name
        for line in (out + err).splitlines():
            assert len(line) <= WIDTH, f"hsf {name}: {len(line)} columns: {line!r}"
        assert not ANSI.search(out + err), f"hsf {name}: colour codes in a pipe"
        seen[name] = (rc, out, err)
    # the verdict is the first line
    assert re.match(r"2 files: \d (FAIL|CANNOT TELL|PASS)", seen["fingerprint -v"][1])
    assert seen["audit -v"][1].startswith("hsf audit: FAIL (wiring MISMATCH): served ['L2', 'L15', 'L27']")
    assert seen["probe"][1].startswith("probe: ")
    assert seen["report"][1].splitlines()[0].startswith("FAIL: ")
    # the evidence only behind -v
    assert "evidence:" in seen["fingerprint -v"][1] and "evidence" not in seen["fingerprint"][1]
    # errors: one line on stderr, nothing on stdout
    rc, out, err = seen["error"]
    assert rc == 2 and out == "" and err.startswith("hsf fingerprint: error: ") and len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["inspect", "fingerprint", "audit", "probe", "report", "scan", "capture", "stamp",
                                     "verify", "conventions"])
def test_every_help_fits_100_columns(monkeypatch, capsys, command):
    """argparse folds help text but not a ``{a,b,c}`` choices metavar: long choice lists go into the help text."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    try:
        main([command, "--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    wide = [line for line in out.splitlines() if len(line) > WIDTH]
    assert out.startswith("usage: hsf ") and not wide, wide


def test_colour_on_a_terminal_only_and_never_with_no_color_or_json(run, sample_data, monkeypatch):
    argv = ["audit", "--data", sample_data / "speculators_v1" / "data_0.pt", "--draft",
            sample_data / "draft_eagle3", "--engine", "sglang"]
    monkeypatch.setenv("FORCE_COLOR", "1")  # what a terminal gets
    rc, out, _ = run(*argv)
    assert rc == 1 and "\x1b[1;31mMISMATCH\x1b[0m" in out
    monkeypatch.setenv("NO_COLOR", "1")
    _, out, _ = run(*argv)
    assert not ANSI.search(out) and "MISMATCH" in out
    monkeypatch.delenv("NO_COLOR")
    _, out, _ = run(*argv, "--json")
    assert not ANSI.search(out) and json.loads(out)["verdict"] == "fail" and json.loads(out)["wiring"] == "mismatch"


def test_progress_on_a_terminal_goes_to_stderr_and_quiet_silences_it(run, sample_data, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    rc, out, err = run("fingerprint", sample_data / "speculators_v1")
    assert "hsf fingerprint: fingerprint" in ANSI.sub("", err)
    assert "hsf fingerprint: fingerprint" not in out and out.startswith("5 files: ")
    rc_quiet, out, err = run("fingerprint", sample_data / "speculators_v1", "--quiet")
    assert rc_quiet == rc and err == ""


def test_help_imports_neither_rich_nor_torch():
    """``hsf --help`` stays instant: rich and torch are imported only by the commands that print or compute."""
    import subprocess

    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "forensics.cli", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "COMMAND" in p.stdout
    mods = {line.split("|")[-1].strip().split(".")[0] for line in p.stderr.splitlines() if "|" in line}
    assert not mods & {"rich", "torch", "numpy", "matplotlib"}, mods & {"rich", "torch", "numpy", "matplotlib"}


@pytest.mark.model
def test_loading_the_model_prints_no_library_progress_bar(sample_data):
    """``--model default`` loads SmolLM2 through transformers; its "Loading weights" bar is not hsf's output:
    stderr holds hsf's own lines only (here: none)."""
    import subprocess

    p = subprocess.run([sys.executable, "-m", "forensics.cli", "fingerprint", "--model", "default",
                        str(sample_data / "speculators_v1" / "data_0.pt")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode in (0, 1, 3), p.stderr
    assert "Loading weights" not in p.stderr and "it/s" not in p.stderr, p.stderr[-500:]


@pytest.mark.model
def test_export_model_from_the_gguf_writes_a_plain_folder_and_no_progress_bar(tmp_path, monkeypatch, capfd):
    """``hsf export-model`` on the packaged GGUF with no fp32 cache: transformers refuses ``save_pretrained`` of a
    GGUF-loaded model ("quantized with gguf and is not serializable"), and its GGUF reader draws a plain tqdm bar
    on stderr. The folder is written from the dequantized weights, loads back with the same config, and stderr
    stays empty."""
    from forensics.models import target

    monkeypatch.setattr(target, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(target, "_write_cache", lambda *a: None)  # the GGUF is read every time
    monkeypatch.setattr(target, "_LOADED", {})
    out = target.export_model("default", tmp_path / "hf")
    assert sorted(p for p in os.listdir(out) if not p.endswith(".jinja")) == \
        ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 30 and cfg["hidden_size"] == 576 and "quantization_config" not in cfg
    err = capfd.readouterr().err
    assert "it/s" not in err and "GGUF" not in err, err[-300:]
    model, _ = target.load_model(out)
    assert model.config.hidden_size == 576
