"""Variants of the known defect classes on the surfaces added since: chat templates, draft id lists, batch masks,
loss masks, names in text output, byte orders, records (FILE#i), probe wirings, shared pickles, safetensors
layouts, meta/sparse tensors.

Each test fails on the code before its fix: bad input is one line naming the file and exit 2 (never a traceback,
a hang or a confident verdict on garbage); data that is readable but wrong is a finding that names it.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time

import pytest
import torch
from cli_tools import one_line, run_cli

import forensics

pytestmark = pytest.mark.timeout(180)
ROOT = pathlib.Path(forensics.__file__).parents[1]
SAMPLE = ROOT / "sample_data"

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
BOMBS = {
    "nested loops (10^10 iterations)": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                                       "{% endfor %}",
    "a 10 GB string": "{{ 'x' * 10000000000 }}",
    "a 3 GB centred string": "{{ 'x'.center(3000000000) }}",
}


# ---- a chat template is code from the dataset: bounded time and memory ---------------------------------------


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_chat_template_bomb_is_bounded(bomb):
    from forensics.io.chat import chat_markers_from

    t0 = time.monotonic()
    assert chat_markers_from(BOMBS[bomb] + CHATML, lambda s: list(s.encode())) is None
    assert time.monotonic() - t0 < 60
    # the bound does not touch a real template
    m = chat_markers_from(CHATML, lambda s: list(s.encode()))
    assert m is not None and bytes(m.assistant_header).decode() == "<|im_start|>assistant\n"


def _chat_dataset(root: pathlib.Path, template: str) -> pathlib.Path:
    ds = root / "ds"
    (ds / "tok").mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SAMPLE / "tokenizer" / name, ds / "tok" / name)
    (ds / "tok" / "chat_template.jinja").write_text(template)
    shutil.copy(SAMPLE / "speculators_v1" / "data_0.pt", ds / "data_0.pt")
    (ds / "capture.json").write_text(json.dumps({"tokenizer": "tok"}))
    return ds


def test_fingerprint_of_a_dataset_with_a_template_bomb_finishes(tmp_path, capsys):
    real = (SAMPLE / "tokenizer" / "chat_template.jinja").read_text()
    ds = _chat_dataset(tmp_path, BOMBS["nested loops (10^10 iterations)"] + real)
    t0 = time.monotonic()
    code, out, err = run_cli(["fingerprint", ds / "data_0.pt"], capsys)
    assert time.monotonic() - t0 < 120 and "Traceback" not in err
    assert code in (0, 1, 3), (code, err)


# ---- a draft config's layer-id lists: integers or one line (was: a traceback, or a FAIL on garbage) ---------


def _draft(root: pathlib.Path, key_value: dict) -> pathlib.Path:
    cfg = json.loads((SAMPLE / "draft_eagle3" / "config.json").read_text())
    cfg.update(key_value)
    d = root / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    os.symlink(SAMPLE / "draft_eagle3" / "model.safetensors", d / "model.safetensors")
    return d


@pytest.mark.parametrize("ids", [[[0], [3], [16]], ["0", "3", "16"], [0.5, 3, 16], [True, False, True], [None, 3, 16],
                                 "0,3,16", {"a": 1}, list(range(20000))])
@pytest.mark.parametrize("where", ["top", "nested", "dflash"])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_draft_id_list_of_the_wrong_type_is_one_line(tmp_path, capsys, ids, where, engine):
    kv = {"top": {"eagle_aux_hidden_state_layer_ids": ids},
          "nested": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}},
          "dflash": {"dflash_config": {"target_layer_ids": ids}}}[where]
    d = _draft(tmp_path, kv)
    code, _, err = run_cli(["audit", "--engine", engine, "--trained-layout", "embed,L3,L16", "--num-layers", "30",
                            "--draft", d], capsys)
    line = one_line(code, err, "config.json")
    assert "layer ids" in line or "ids, more than" in line


def test_draft_id_list_of_integers_still_audits(tmp_path, capsys):
    d = _draft(tmp_path, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 15]}})
    code, out, err = run_cli(["audit", "--engine", "sglang", "--trained-layout", "embed,L3,L16", "--num-layers", "30",
                              "--draft", d], capsys)
    assert code in (0, 1) and "Traceback" not in err and "error" not in err, (code, out, err)


# ---- an attention mask is 0/1: an additive mask (0 keep, -inf pad) read as != 0 kept the pads ----------------


def _batch(mask) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])
    return {"hidden_states": torch.randn(3, 2, 6, 16, generator=g), "input_ids": ids, "attention_mask": mask}


REAL = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
MASKS = {
    "additive -inf": torch.where(REAL.bool(), 0.0, float("-inf")),
    "additive float32 min": torch.where(REAL.bool(), 0.0, torch.finfo(torch.float32).min),
    "NaN for pads": torch.where(REAL.bool(), 1.0, float("nan")),
    "2 for real tokens": REAL * 2,
    "-1 for pads": REAL * 2 - 1,
}


@pytest.mark.parametrize("mask", list(MASKS))
def test_attention_mask_that_is_not_0_1_is_refused(tmp_path, capsys, mask):
    from forensics.errors import ForensicsError
    from forensics.io.formats import as_captures

    with pytest.raises(ForensicsError, match="other than 0 and 1"):
        as_captures(_batch(MASKS[mask]))
    f = tmp_path / "batch.pt"
    torch.save(_batch(MASKS[mask]), f)
    code, _, err = run_cli(["inspect", f], capsys)
    assert "other than 0 and 1" in one_line(code, err, "batch.pt")


@pytest.mark.parametrize("mask", [REAL, REAL.bool(), REAL.float()])
def test_a_0_1_attention_mask_cuts_the_pads(mask):
    from forensics.io.formats import as_captures

    caps = as_captures(_batch(mask))
    assert [c.num_tokens for c in caps] == [4, 6]
    assert caps[0].input_ids.tolist() == [5, 6, 7, 8]


def test_attention_mask_with_holes_is_not_called_padding():
    from forensics.io.formats import as_captures

    caps = as_captures(_batch(torch.tensor([[1, 0, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1]])))
    assert caps[0].num_tokens == 4
    note = next(n for n in caps[0].provenance.notes if "attention_mask" in n)
    assert "between real tokens" in note and "right padding" not in note, note


# ---- a loss mask of another length than the tokens was said nothing about -----------------------------------


def _masked(path: pathlib.Path, n_mask: int, t: int = 32) -> pathlib.Path:
    g = torch.Generator().manual_seed(0)
    torch.save({"hidden_states": [torch.randn(t, 16, generator=g) * (i + 1) for i in range(3)],
                "input_ids": torch.arange(t), "loss_mask": torch.ones(n_mask, dtype=torch.long)}, path)
    return path


@pytest.mark.parametrize("n_mask", [3, 31, 33, 64])
def test_loss_mask_of_another_length_is_a_finding(tmp_path, n_mask):
    from forensics.findings import FindingKind, Severity

    res = forensics.fingerprint(str(_masked(tmp_path / "data_0.pt", n_mask)))
    found = [f for f in res.findings if f.kind == FindingKind.LOSS_MASK]
    assert len(found) == 1 and found[0].severity == Severity.FAIL, res.findings
    assert found[0].evidence["mask_entries"] == n_mask and found[0].evidence["tokens"] == 32


@pytest.mark.parametrize("cmd", ["inspect", "scan"])
def test_loss_mask_length_in_inspect_and_scan(tmp_path, capsys, cmd):
    f = _masked(tmp_path / "data_0.pt", 3)
    args = [cmd, f, "--json"] if cmd == "inspect" else [cmd, tmp_path, "-o", tmp_path / "s.jsonl", "--no-progress"]
    code, out, err = run_cli(args, capsys)
    assert code == 1 and "Traceback" not in err, (code, err)
    text = out if cmd == "inspect" else (tmp_path / "s.jsonl").read_text()
    assert '"loss_mask"' in text and "3 entries for 32 tokens" in text


def test_loss_mask_of_the_right_length_is_not_a_length_finding(tmp_path):
    res = forensics.fingerprint(str(_masked(tmp_path / "data_0.pt", 32)))
    assert not [f for f in res.findings if f.evidence.get("problem") == "length"]


# ---- names from the data reach the terminal: escape sequences in them are shown, never obeyed ------------------

EVIL_NAMES = ["esc\x1b[2K\x1b[1Ared.pt", "cr\rFAIL.pt", "bell\x07\x9b31m.pt"]


@pytest.mark.parametrize("cmd", ["inspect", "fingerprint", "verify", "scan"])
def test_terminal_escapes_in_names_are_escaped(tmp_path, capsys, cmd):
    src = SAMPLE / "speculators_v1" / "data_0.pt"
    for n in EVIL_NAMES:
        shutil.copy(src, tmp_path / n)
    g = torch.Generator().manual_seed(0)
    torch.save({"input_ids": torch.arange(32), "slot\x1b]0;title\x07": torch.randn(32, 16, generator=g),
                "b": torch.randn(32, 16, generator=g)}, tmp_path / "keys.pt")
    args = [cmd, tmp_path] + (["-o", tmp_path.parent / "s.jsonl", "--no-progress"] if cmd == "scan" else [])
    code, out, err = run_cli(args, capsys)
    assert "Traceback" not in err
    for stream in (out, err):
        assert not any(c in stream for c in "\x1b\r\x07\x9b"), stream
    assert "\\x1b" in out + err


# ---- numpy files in big-endian byte order were refused (torch.from_numpy takes native order only) --------------


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_big_endian_numpy_reads_the_same_values(tmp_path, suffix):
    import numpy as np

    rng = np.random.default_rng(0)
    h = rng.standard_normal((3, 24, 16)).astype(np.float32)
    ids = np.arange(24)
    f = tmp_path / f"be{suffix}"
    if suffix == ".npy":
        np.save(f, h.astype(">f4"))
        cap = forensics.load(str(f), input_ids=ids)
    else:
        np.savez(f, hidden_states=h.astype(">f4"), input_ids=ids.astype(">i8"))
        cap = forensics.load(str(f))
        assert cap.input_ids.tolist() == ids.tolist()
    assert [s.tensor().numpy().tolist() for s in cap.slots] == [x.tolist() for x in h]


# ---- verify FILE#i: the record syntax every reading command takes was "cannot read" (a FAIL on an intact sample) -


def _stamped_batch(tmp_path, capsys) -> pathlib.Path:
    g = torch.Generator().manual_seed(0)
    f = tmp_path / "batch.pt"
    torch.save({"hidden_states": torch.randn(3, 3, 24, 16, generator=g), "input_ids": torch.arange(72).reshape(3, 24)},
               f)
    code, _, err = run_cli(["stamp", f], capsys)
    assert code == 0, err
    return f


def test_verify_one_record_of_a_stamped_batch(tmp_path, capsys):
    f = _stamped_batch(tmp_path, capsys)
    for i in range(3):
        code, out, err = run_cli(["verify", f"{f}#{i}"], capsys)
        assert code == 0 and "ok" in out and f"batch.pt#{i}" in out, (i, code, out, err)
    d = torch.load(f)
    d["hidden_states"][1, 2, 5, 3] += 1.0  # slot 1 of sample 2
    torch.save(d, f)
    verdicts = {i: run_cli(["verify", f"{f}#{i}"], capsys)[0] for i in range(3)}
    assert verdicts == {0: 0, 1: 0, 2: 1}, verdicts


def test_stamp_of_one_record_is_refused_in_one_line(tmp_path, capsys):
    f = _stamped_batch(tmp_path, capsys)
    before = f.read_bytes()
    code, out, err = run_cli(["stamp", f"{f}#1"], capsys)
    assert code == 2 and "stamp the whole file" in out + err and "No such file" not in out + err
    assert f.read_bytes() == before


def test_scan_of_one_record_scans_its_file(tmp_path, capsys):
    f = _stamped_batch(tmp_path, capsys)
    out = tmp_path / "s.jsonl"
    code, _, err = run_cli(["scan", f"{f}#1", "-o", out, "--no-progress"], capsys)
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert code == 0 and "No such file" not in err, (code, err)
    assert [r["path"] for r in rows] == [str(f)] and not rows[0].get("error")


# ---- probe: a wiring that scored no position is no measurement (was: acceptance 1.00, 'clearly below', FAIL) ----


def _probe_data(root: pathlib.Path, mutate) -> pathlib.Path:
    d = torch.load(SAMPLE / "speculators_v1" / "data_0.pt")
    mutate(d)
    ds = root / "ds"
    ds.mkdir()
    torch.save(d, ds / "data_0.pt")
    for name in ("capture.json", "data_config.json"):
        shutil.copy(SAMPLE / "speculators_v1" / name, ds / name)
    cfg = json.loads((ds / "capture.json").read_text())
    cfg.pop("tokenizer", None)
    cfg["samples"] = cfg["samples"][:1]
    (ds / "capture.json").write_text(json.dumps(cfg))
    return ds


def test_probe_with_a_non_finite_declared_slot_cannot_tell(tmp_path):
    from forensics.findings import Verdict

    def inf_slot(d):
        d["hidden_states"][1] = torch.full_like(d["hidden_states"][1], float("inf"))

    res = forensics.probe(SAMPLE / "draft_eagle3", _probe_data(tmp_path, inf_slot))
    declared = next(r for r in res.rows if "declared" in r.tags)
    assert declared.n == 0
    assert res.verdict is Verdict.CANNOT_TELL, [f.message for f in res.findings]
    assert any("scored no position" in f.message for f in res.findings)
    assert not any(f.kind.value in ("probe_declared_beaten", "draft_collapsed") for f in res.findings)


def test_probe_names_a_short_loss_mask(tmp_path):
    from forensics.errors import ForensicsError

    def short(d):
        d["loss_mask"] = d["loss_mask"][:5]

    with pytest.raises(ForensicsError, match="loss mask of 5 entries for 93 tokens"):
        forensics.probe(SAMPLE / "draft_eagle3", _probe_data(tmp_path, short))


def test_capture_chat_template_that_never_ends_is_one_error(tmp_path):
    """``hsf capture`` renders the model's own template (a model folder is data too): bounded like the dataset's."""
    from forensics.errors import ForensicsError
    from forensics.models.recorder import tokenize

    class Endless:
        chat_template = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            return ImmutableSandboxedEnvironment().from_string(self.chat_template).render(messages=messages)

    text = tmp_path / "chat.json"
    text.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]))
    t0 = time.monotonic()
    with pytest.raises(ForensicsError, match="chat template ran past its time limit"):
        tokenize(Endless(), str(text), True, 64)
    assert time.monotonic() - t0 < 60


# ---- a pickle that shares one list under itself 40 times ("billion laughs", 11 KB): walked once, not 2^40 times ----


def test_shared_structure_pickle_is_walked_once(tmp_path):
    import subprocess
    import sys

    t = torch.randn(16, 32)
    laughs: list = [t]
    for _ in range(40):
        laughs = [laughs, laughs]
    f = tmp_path / "laughs.pt"
    torch.save({"hidden_states": [t, t * 2, t * 3], "input_ids": torch.arange(16), "junk": {"deep": laughs}}, f)
    assert f.stat().st_size < 64_000
    code = ("import resource, forensics; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            f"c = forensics.load({str(f)!r}); print(len(c.slots))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and p.stdout.strip() == "3", p.stderr[-2000:]


# ---- a safetensors header the safetensors library refuses (overlap, hole, trailing bytes, non-string metadata) ----


def _st(path: pathlib.Path, header: dict, data_len: int) -> pathlib.Path:
    import struct

    b = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(b)) + b + bytes(data_len))
    return path


F44 = {"dtype": "F32", "shape": [4, 4]}
LIARS = {
    "two tensors over the same bytes": ({"a": {**F44, "data_offsets": [0, 64]}, "b": {**F44, "data_offsets": [0, 64]}},
                                        64, "overlaps"),
    "a hole before a tensor": ({"a": {**F44, "data_offsets": [0, 64]}, "b": {**F44, "data_offsets": [96, 160]}},
                               160, "hole"),
    "trailing bytes": ({"a": {**F44, "data_offsets": [0, 64]}, "b": {**F44, "data_offsets": [64, 128]}}, 4096,
                       "trailing"),
    "metadata that is not strings": ({"__metadata__": {"x": [1]}, "a": {**F44, "data_offsets": [0, 64]},
                                      "b": {**F44, "data_offsets": [64, 128]}}, 128, "metadata"),
}


@pytest.mark.parametrize("case", list(LIARS))
def test_safetensors_the_library_refuses_is_refused(tmp_path, capsys, case):
    from safetensors import SafetensorError, safe_open

    header, n, word = LIARS[case]
    f = _st(tmp_path / "x.safetensors", header, n)
    with pytest.raises(SafetensorError), safe_open(str(f), "pt") as g:  # the reference refuses it
        list(g.keys())
    code, _, err = run_cli(["inspect", f], capsys)
    assert word in one_line(code, err, "x.safetensors")


def test_safetensors_the_library_reads_is_read(tmp_path, capsys):
    header = {"__metadata__": {"k": "v"}, "a": {**F44, "data_offsets": [0, 64]},
              "b": {**F44, "data_offsets": [64, 128]},
              "input_ids": {"dtype": "I64", "shape": [4], "data_offsets": [128, 160]}}
    f = _st(tmp_path / "x.safetensors", header, 160)
    code, out, err = run_cli(["inspect", f], capsys)
    assert code in (0, 1) and "error" not in err, (code, err)


# ---- tensors a notebook holds that have no plain CPU values: one error, not a TypeError/NotImplementedError ------


@pytest.mark.parametrize("kind", ["meta", "sparse", "meta ids"])
def test_meta_and_sparse_tensors_are_one_error(kind):
    from forensics.errors import ForensicsError

    t = torch.randn(3, 32, 16)
    ids = torch.arange(32)
    if kind == "meta":
        t = torch.empty(3, 32, 16, device="meta")
    elif kind == "sparse":
        t = t[0].to_sparse()
    else:
        ids = torch.empty(32, dtype=torch.long, device="meta")
    with pytest.raises(ForensicsError, match="meta device|sparse"):
        forensics.fingerprint(t, input_ids=ids)


def test_sparse_tensor_in_a_file_is_named(tmp_path, capsys):
    f = tmp_path / "sparse.pt"
    torch.save({"hidden_states": [torch.randn(8, 16).to_sparse()] * 2}, f)
    code, _, err = run_cli(["inspect", f], capsys)
    assert "sparse" in one_line(code, err, "sparse.pt")


# ---- a zip checkpoint whose records are deflated (torch.save never writes one): refused, never inflated ---------


@pytest.mark.parametrize("name", ["bomb.pt", "bomb.safetensors"])
def test_deflated_checkpoint_is_refused_not_inflated(tmp_path, capsys, name):
    import zipfile

    plain = tmp_path / "plain.pt"
    torch.save({"hidden_states": [torch.zeros(1024, 8192), torch.zeros(1024, 8192)]}, plain)  # 64 MB of zeros
    f = tmp_path / name
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    plain.unlink()
    assert f.stat().st_size < 1 << 20
    code, _, err = run_cli(["inspect", f], capsys)
    assert "compressed" in one_line(code, err, name)


# ---- how many slots and samples one file may hold: a 3 MB [4, 200000] aux or 200 000 shared records -------------


def test_too_many_slots_is_one_line_in_inspect_too(tmp_path, capsys):
    f = tmp_path / "wide.pt"
    torch.save([{"input_ids": torch.arange(4), "hidden_state": torch.randn(4, 1),
                 "aux_hidden_states": torch.randn(4, 5000)}], f)  # TensorRT-LLM: 5000 one-wide slots
    t0 = time.monotonic()
    code, _, err = run_cli(["inspect", f], capsys)
    assert "MAX_SLOTS_PER_FILE" in one_line(code, err, "wide.pt")
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("kind", ["trtllm", "sglang", "batch"])
def test_too_many_samples_is_one_line(tmp_path, capsys, kind, monkeypatch):
    from forensics.io import limits

    monkeypatch.setattr(limits, "MAX_RECORDS_PER_FILE", 100)  # the bound, not its size, is under test
    n = 101
    if kind == "trtllm":
        f = tmp_path / "recs.pt"
        rec = {"input_ids": torch.arange(4), "hidden_state": torch.randn(4, 2)}
        torch.save([rec] * n, f)  # one record shared n times: a small pickle
    elif kind == "sglang":
        f = tmp_path / "recs.json"
        f.write_text(json.dumps([{"meta_info": {"hidden_states": [[[0.5, 1.0]] * 4]}, "input_ids": [1, 2, 3, 4]}] * n))
    else:
        f = tmp_path / "batch.pt"
        torch.save({"hidden_states": torch.randn(2, n, 4, 8), "input_ids": torch.arange(4 * n).reshape(n, 4)}, f)
    code, _, err = run_cli(["inspect", f], capsys)
    assert "MAX_RECORDS_PER_FILE" in one_line(code, err, f.name)
