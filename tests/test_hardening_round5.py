"""Hardening round 5: bounded files and options, silent semantics, outputs after a kill, the display registry.

Each class is tried with variants: bad input is one line naming the file and exit 2 (never a traceback, a hang
or a changed input); data that is readable but wrong is a finding that names it, or a pairing that the data
itself supports (never a confident pairing by guess).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from cli_tools import one_line, run_cli

import forensics
from forensics.errors import ForensicsError
from forensics.findings import FindingKind

pytestmark = pytest.mark.timeout(300)
ROOT = str(pathlib.Path(forensics.__file__).parents[1])
SAMPLE = pathlib.Path(ROOT) / "sample_data"


def v1(path: pathlib.Path, t: int = 32, h: int = 16, k: int = 3) -> pathlib.Path:
    g = torch.Generator().manual_seed(0)
    torch.save({"hidden_states": [torch.randn(t, h, generator=g) * (i + 1) for i in range(k)],
                "input_ids": torch.arange(t)}, path)
    return path


# ---- --ids / --text: regular files only, bounded, one line on any content ----------------------------------------


@pytest.mark.parametrize("content", ["9" * 5000, "1 2 " + "9" * 19, "1, 2, three", "\x00\x01\x02", "[1, 2, [3]]x",
                                     "-" * 10])
def test_ids_text_of_any_content_is_one_line(tmp_path, capsys, content):
    cap = v1(tmp_path / "data_0.pt")
    ids = tmp_path / "ids.txt"
    ids.write_text(content)
    code, _, err = run_cli(["inspect", cap, "--ids", ids], capsys)
    one_line(code, err, "ids.txt")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "dir"])
@pytest.mark.parametrize("option", ["--ids", "--text"])
def test_ids_and_text_from_a_fifo_device_or_folder_never_block(tmp_path, capsys, special, option):
    cap = v1(tmp_path / "data_0.pt")
    if special == "fifo":
        src = tmp_path / "fifo"
        os.mkfifo(src)
    elif special == "dir":
        src = tmp_path / "folder"
        src.mkdir()
    else:
        src = pathlib.Path(special)
    t0 = time.monotonic()
    if option == "--ids":
        code, _, err = run_cli(["inspect", cap, option, src], capsys)
        one_line(code, err, os.path.basename(str(src)))
    else:  # the text is read before the model's tokenizer is looked up
        with pytest.raises(ForensicsError) as e:
            text_ids(src)
        assert os.path.basename(str(src)) in str(e.value)
    assert time.monotonic() - t0 < 60


def text_ids(path) -> object:
    import argparse

    from forensics.cli._common import ids_of

    return ids_of(argparse.Namespace(ids=None, text=str(path), model="unused", paths=None))


def test_text_larger_than_the_bound_is_one_line_before_the_tokenizer(tmp_path):
    from forensics.io.limits import MAX_TEXT_BYTES

    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ForensicsError, match="larger than") as e:
        text_ids(big)
    assert "big.txt" in str(e.value)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ForensicsError, match="UTF-8"):
        text_ids(bad)


def test_ids_in_a_checkpoint_with_a_huge_integer_is_one_line(tmp_path, capsys):
    cap = v1(tmp_path / "data_0.pt")
    torch.save([10**40, 2], tmp_path / "ids.pt")
    code, _, err = run_cli(["inspect", cap, "--ids", tmp_path / "ids.pt"], capsys)
    one_line(code, err, "ids.pt")


# ---- hsf probe options: one line, exit 2, before any file is read ------------------------------------------------


@pytest.mark.parametrize("opts", [["--candidates", "a;b"], ["--candidates", ";"], ["--candidates", "0,3,x"],
                                  ["--candidates", ";".join(["0,3,16"] * 65)],
                                  ["--engine", "vllm", "--engine-version", "99.1"],
                                  ["--engine", "sglang", "--engine-version", "banana"], ["--engine-version", "post-1"],
                                  ["--steps", "0"], ["--steps", "17"], ["--steps", "x"], ["--draft-cost", "nan"],
                                  ["--draft-cost", "-1"], ["--draft-cost", "inf"], ["--topk", "0"], ["--samples", "0"]])
def test_probe_options_are_one_line_at_once(tmp_path, capsys, monkeypatch, opts):
    import forensics.analysis.probe as probe

    monkeypatch.setattr(probe, "load_draft", lambda *a, **k: pytest.fail("read the draft before the options"))
    t0 = time.monotonic()
    code, _, err = run_cli(["probe", "--draft", SAMPLE / "draft_eagle3", "--data", SAMPLE / "speculators_v1", *opts],
                           capsys)
    assert code == 2 and len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "Traceback" not in err, err
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("command", ["audit", "report"])
def test_engine_version_without_engine_or_unknown_is_one_line_in_every_command(tmp_path, capsys, command):
    extra = ["--data", SAMPLE / "speculators_v1"] if command == "audit" else [SAMPLE / "speculators_v1", "-o",
                                                                              tmp_path / "r.html"]
    for opts in (["--engine-version", "post-25454"], ["--engine", "sglang", "--engine-version", "9.9.9"]):
        code, _, err = run_cli([command, "--draft", SAMPLE / "draft_eagle3", *extra, *opts], capsys)
        assert code == 2 and "version" in err and "Traceback" not in err, err
    assert not (tmp_path / "r.html").exists()


# ---- silent semantics -------------------------------------------------------------------------------------------


def sglang_response(p: int, rows: int, out: int | None = None, cached: int | None = None, h: int = 8) -> dict:
    g = torch.Generator().manual_seed(p * 1000 + rows)
    r = {"text": "x", "input_ids": list(range(100, 100 + p)),
         "meta_info": {"hidden_states": [torch.randn(rows, h, generator=g).tolist()]}}
    if out is not None:
        r["output_ids"] = list(range(500, 500 + out))
    if cached is not None:
        r["meta_info"]["cached_tokens"] = cached
    return r


@pytest.mark.parametrize(("p", "rows", "out", "cached", "want"), [
    (64, 64, None, None, list(range(100, 164))),                      # the whole prompt
    (64, 24, None, 40, list(range(140, 164))),                        # prefix cache: the last 24 prompt tokens
    (64, 28, 5, 40, list(range(140, 164)) + list(range(500, 504))),   # ... and 4 generated rows
    (64, 68, 5, None, list(range(100, 164)) + list(range(500, 504))),  # the last generated token has no row
    (64, 64, 5, 0, list(range(100, 164))),                            # prompt rows only
])
def test_sglang_rows_are_paired_with_their_own_ids(tmp_path, p, rows, out, cached, want):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(sglang_response(p, rows, out, cached)))
    cap = forensics.load(str(path))
    assert cap.num_tokens == rows and cap.input_ids.tolist() == want


@pytest.mark.parametrize(("rows", "cached"), [(24, None), (24, 7), (10, 40)])
def test_sglang_rows_missing_without_a_cache_count_that_explains_them_are_reported(tmp_path, capsys, rows, cached):
    """Never ``ids[:rows]`` (tokens 0-23 beside the rows of 40-63): every id kept, the mismatch a FAIL finding."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(sglang_response(64, rows, None, cached)))
    cap = forensics.load(str(path))
    assert cap.input_ids.numel() == 64 and not cap.ids_match_rows
    code, out, _ = run_cli(["fingerprint", "--json", path], capsys)
    assert code == 1 and "row_count" in out


@pytest.mark.parametrize("container", ["pt", "safetensors-generic", "safetensors-stack"])
def test_ids_stored_twice_that_disagree_are_one_line(tmp_path, capsys, container):
    from safetensors.torch import save_file

    h = [torch.randn(16, 8) for _ in range(3)]
    a, b = torch.arange(16), torch.arange(16).flip(0)
    if container == "pt":
        path = tmp_path / "d.pt"
        torch.save({"hidden_states": h, "input_ids": a, "token_ids": b}, path)
    elif container == "safetensors-generic":
        path = tmp_path / "d.safetensors"
        save_file({"x": h[0], "y": h[1], "input_ids": a, "ids": b}, str(path))
    else:
        path = tmp_path / "d.safetensors"
        save_file({"hidden_states": torch.stack(h, 1).contiguous(), "token_ids": a, "input_ids": b}, str(path))
    with pytest.raises(ForensicsError, match="disagree"):
        forensics.load(str(path))
    code, _, err = run_cli(["inspect", path], capsys)
    assert "input_ids" in one_line(code, err, path.name)
    torch.save({"hidden_states": h, "input_ids": a, "token_ids": a.clone()}, tmp_path / "same.pt")
    assert forensics.load(str(tmp_path / "same.pt")).input_ids.tolist() == a.tolist()  # agreeing: read


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_slot_constant_across_tokens_is_named_not_reordered(which):
    g = torch.Generator().manual_seed(1)
    T, H = 96, 64
    ids = torch.randint(0, 500, (T,), generator=g)
    table = torch.randn(500, H, generator=g) * 0.05
    emb = table[ids]
    layers = [emb + torch.randn(T, H, generator=g) * s for s in (1.0, 3.0, 9.0)]
    layers[which] = layers[which][7:8].expand(T, H).clone()
    fp = forensics.fingerprint([emb, *layers], input_ids=ids, layers="embed,L3,L16,L28")
    const = [f for f in fp.findings if f.kind == FindingKind.CONSTANT]
    assert len(const) == 1 and const[0].slots == [which + 1] and const[0].is_fail
    assert f"hidden_states[{which + 1}]" in const[0].message or f"slot {which + 1}" in const[0].message
    assert not any(f.kind == FindingKind.REORDERED and f.is_fail for f in fp.findings), fp.findings
    assert fp.slots[which + 1].label is None


def test_tokens_with_bit_identical_embeddings_are_not_foreign_rows():
    """Reserved/untrained ids share one embedding row: a clean capture with several of them is no foreign row."""
    from forensics.analysis.rows import check_rows

    g = torch.Generator().manual_seed(2)
    V, T, H = 300, 128, 32
    table = torch.randn(V, H, generator=g)
    table[250:260] = table[250]  # ten reserved ids, one shared untrained row
    ids = torch.randint(0, 200, (T,), generator=g)
    ids[10], ids[50], ids[51], ids[52], ids[90], ids[91] = 250, 251, 252, 253, 250, 254
    emb = table[ids]
    h1 = emb + torch.randn(T, H, generator=g)
    h2 = h1 + torch.randn(T, H, generator=g) * 2
    cap = forensics.io.formats.as_capture([emb, h1, h2], input_ids=ids)
    rep = check_rows(cap)
    assert not [f for f in rep.findings if f.kind == FindingKind.FOREIGN_ROWS], rep.findings


# ---- amplification: token text and slot names cut with a count -------------------------------------------------


def test_a_huge_token_and_huge_slot_names_are_cut_with_a_count(tmp_path, capsys):
    ds = tmp_path / "ds"
    (ds / "tokenizer").mkdir(parents=True)
    big = "x" * 1_000_000
    json.dump({"version": "1.0", "model": {"type": "WordLevel", "vocab": {big: 0, "a": 1, "[UNK]": 2},
                                           "unk_token": "[UNK]"},
               "pre_tokenizer": {"type": "Whitespace"}, "added_tokens": [], "normalizer": None,
               "post_processor": None, "decoder": None, "truncation": None, "padding": None},
              open(ds / "tokenizer" / "tokenizer.json", "w"))
    g = torch.Generator().manual_seed(0)
    torch.save({("s" * 1_000_000) + str(k): torch.randn(200, 32, generator=g) * (k + 1) for k in range(3)}
               | {"input_ids": torch.zeros(200, dtype=torch.long)}, ds / "data_0.pt")
    json.dump({"tokenizer": "tokenizer"}, open(ds / "capture.json", "w"))
    code, out, err = run_cli(["inspect", ds / "data_0.pt"], capsys)
    assert code in (0, 1) and len(out) + len(err) < 20_000 and "chars)" in out
    code, _, err = run_cli(["report", ds, "-o", tmp_path / "r.html"], capsys)
    assert code in (0, 1, 3) and "Traceback" not in err
    html = (tmp_path / "r.html").read_text()
    from forensics.io.tokenizer import MAX_TOKEN_TEXT_CHARS as CUT
    from forensics.io.tokenizer import decode_tokens, load_tokenizer

    assert len(html) < 3_000_000 and f"(+{1_000_000 - CUT:,} chars)" in html
    tok, _ = load_tokenizer(str(ds / "tokenizer"), confined=False)
    assert decode_tokens(tok, [0, 1]) == ["x" * CUT + f"…(+{1_000_000 - CUT:,} chars)", "a"]


# ---- outputs: one line on a read-only or full filesystem, temporaries cleaned after a kill ------------------------


def _mount(where: pathlib.Path, *opts: str) -> bool:
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(opts), "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_temporaries_of_a_killed_run_are_named_and_cleaned_by_the_next_write(tmp_path):
    from forensics.io.output import atomic_output
    from forensics.io.tempfiles import clean_stale, temp_path

    out = tmp_path / "report.html"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = pathlib.Path(temp_path(str(out)).replace(f"-{os.getpid()}-", f"-{dead.pid}-"))
    stale.write_text("half a report")
    alive = pathlib.Path(temp_path(str(out)))  # this process's: still running, kept
    alive.write_text("mine")
    other = tmp_path / ".other.html.hsf-tmp-1-0000abcd"  # another target's: not this write's business
    other.write_text("x")
    with atomic_output(str(out)) as f:
        f.write("<html>")
    assert out.read_text() == "<html>" and not stale.exists() and alive.exists() and other.exists()
    assert ".report.html.hsf-tmp-" in stale.name  # the name says which target it was for
    alive.unlink()
    assert clean_stale(str(out)) == []


@pytest.mark.model
def test_export_model_killed_then_run_again_leaves_no_hidden_folder(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = tmp_path / "m"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from forensics.cli import main; sys.exit(main())",
                             "export-model", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not [n for n in os.listdir(tmp_path) if ".hsf-tmp-" in n]:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = [n for n in os.listdir(tmp_path) if n.startswith(".m.hsf-tmp-")]
    assert left and str(proc.pid) in left[0]  # named for its target and process
    done = subprocess.run([sys.executable, "-c", "import sys; from forensics.cli import main; sys.exit(main())",
                           "export-model", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done
    assert sorted(os.listdir(tmp_path)) == ["m"]


@pytest.mark.parametrize("how", ["read-only", "efbig"])
def test_export_model_on_a_read_only_folder_or_over_a_size_limit_is_one_line(tmp_path, how):
    env = dict(os.environ, PYTHONPATH=ROOT)
    if how == "read-only":
        if not _mount(tmp_path / "ro", "ro", "size=1m"):
            pytest.skip("cannot mount a tmpfs here")
        out, pre = tmp_path / "ro" / "m", []
    else:
        out, pre = tmp_path / "m", ["prlimit", "--fsize=100000"]
    try:
        t0 = time.monotonic()
        proc = subprocess.run([*pre, sys.executable, "-c", "import sys; from forensics.cli import main; "
                               "sys.exit(main())", "export-model", str(out), "--model", str(tmp_path / "none.gguf")]
                              if how == "read-only" else
                              [*pre, sys.executable, "-c", textwrap.dedent("""
                                  import sys, torch
                                  from transformers import LlamaConfig, LlamaForCausalLM
                                  import forensics.models.target as t
                                  m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2,
                                      intermediate_size=64, num_attention_heads=2, num_key_value_heads=2))
                                  t.resolve_model = lambda spec: "x"
                                  t.load_model = lambda path: (m, None)
                                  from forensics.cli import main
                                  sys.exit(main(["export-model", sys.argv[1]]))"""), str(out)],
                              capture_output=True, text=True, timeout=300, env=env)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc
        assert "cannot write" in lines[0] or how == "read-only" and "none.gguf" in lines[0], lines
        assert not [n for n in os.listdir(out.parent) if ".hsf-tmp-" in n]
        if how == "read-only":
            assert time.monotonic() - t0 < 60
    finally:
        if how == "read-only":
            subprocess.run(["umount", "-l", str(tmp_path / "ro")], capture_output=True)


# ---- the display registry ---------------------------------------------------------------------------------------


def test_a_notebook_folder_with_its_own_renderers_module_cannot_shadow_the_registry(tmp_path):
    """``display`` imports ``forensics.views.renderers`` by its full name: a ``renderers.py`` or ``views.py`` in the
    notebook's folder (first on ``sys.path``) is never run, and every result renders without the extras
    (matplotlib, rich, anywidget, pyarrow, IPython blocked)."""
    for name in ("renderers.py", "views.py", "display.py"):
        (tmp_path / name).write_text(f"open({str(tmp_path / 'SHADOWED')!r}, 'w').write('x')\n")
    (tmp_path / "run.py").write_text(textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("matplotlib", "rich", "anywidget", "pyarrow", "ipywidgets", "IPython"):
                    raise ImportError(name)
        sys.meta_path.insert(0, Block())
        import torch, forensics
        hs = [torch.randn(64, 32, generator=torch.Generator().manual_seed(k)) * (k + 1) for k in range(4)]
        for r in (forensics.summarize(hs, input_ids=torch.arange(64)),
                  forensics.fingerprint(hs, input_ids=torch.arange(64))):
            assert repr(r) and r._repr_html_() and "Traceback" not in r._repr_html_()
        print("rendered")
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env=env)
    assert proc.returncode == 0 and "rendered" in proc.stdout, proc
    assert not (tmp_path / "SHADOWED").exists()


# ---- degenerate shapes: bounded time --------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "h", "n_ids"), [(300_000, 2, 10), (5_000, 16, 6_000_000), (1_000_000, 1, None)])
def test_degenerate_shapes_are_inspected_and_fingerprinted_in_bounded_time(tmp_path, capsys, rows, h, n_ids):
    g = torch.Generator().manual_seed(0)
    doc = {"hidden_states": [torch.randn(rows, h, generator=g) * (k + 1) for k in range(3)]}
    if n_ids is not None:
        doc["input_ids"] = torch.arange(n_ids)
    torch.save(doc, tmp_path / "d.pt")
    for command in ("inspect", "fingerprint"):
        t0 = time.monotonic()
        code, _, err = run_cli([command, tmp_path / "d.pt"], capsys)
        assert code in (0, 1, 3) and "Traceback" not in err, err
        assert time.monotonic() - t0 < 120, command
