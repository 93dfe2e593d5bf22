"""Stamps read by default (issue 33): every command that reads a stamped capture checks the stamp in the same read.

Ground truth: copies of the committed real SmolLM2 captures, stamped here, then edited here the way issue 33
describes (same shape, another layer's rows written over 10 rows of one slot): the edited slot is known, so the
finding must name it; the untouched copy must stay clean. A stamped file without a sidecar must be checked
against the stamp's r list (it said NO CLAIM before).
"""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest
import torch

from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.scan.core import scan
from forensics.analysis.stamp import stamp
from forensics.cli import main
from forensics.io import stamp_store as store
from forensics.io.formats import load

FILES = {"speculators": "hidden_states/hs_0.safetensors", "speculators_v1": "data_0.pt",
         "specforge": "rows_0-2000/data_0.ckpt"}
EDITED_SLOT, SOURCE_SLOT, FIRST_ROW = 1, 2, 20  # slot 1's rows 20..29 overwritten with slot 2's


def _edit_rows(path, dst: int, src: int, first: int, rows: int = 10) -> None:
    """Overwrite rows [first, first + rows) of slot ``dst`` with slot ``src``'s rows, in place, same shape and
    dtype (a safetensors file byte-patched in its data section; a torch file re-saved with the same keys)."""
    path = str(path)
    if store.is_safetensors(path):  # speculators: one [seq, k, H] stack under hidden_states
        h = store.safetensors_header(path)["hidden_states"]
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
        lo, hi = h["data_offsets"]
        assert h["dtype"] == "BF16"
        stack = np.memmap(path, dtype="<i2", mode="r+", offset=8 + n + lo, shape=tuple(h["shape"]))
        view = stack[0] if stack.ndim == 4 else stack
        view[first:first + rows, dst] = view[first:first + rows, src]
        stack.flush()
        return
    obj = torch.load(path, weights_only=True)
    key = "hidden_states" if "hidden_states" in obj else "aux_hidden_state"
    if key == "hidden_states":
        hs = obj[key]
        hs[dst][first:first + rows] = hs[src][first:first + rows]
    else:  # specforge: aux [1, T, k·H] then the post-norm final state
        H = obj["hidden_state"].shape[-1]
        aux = obj[key]
        aux[0, first:first + rows, dst * H:(dst + 1) * H] = aux[0, first:first + rows, src * H:(src + 1) * H]
    torch.save(obj, path)


@pytest.fixture
def stamped(sample_data, tmp_path):
    """``(clean file, edited file)`` of one format, both stamped before the edit."""
    def make(name: str):
        out = []
        for which in ("clean", "edited"):
            dst = tmp_path / which / name
            shutil.copytree(sample_data / name, dst)
            res = stamp(dst, num_layers=30)
            assert res.ok
            out.append(dst / FILES[name])
        _edit_rows(out[1], EDITED_SLOT, SOURCE_SLOT, FIRST_ROW)
        before, after = load(out[0]), load(out[1])
        assert not torch.equal(before.slots[EDITED_SLOT].tensor(), after.slots[EDITED_SLOT].tensor())
        for i in set(range(len(before.slots))) - {EDITED_SLOT}:
            assert torch.equal(before.slots[i].tensor(), after.slots[i].tensor())
        return out
    return make


@pytest.mark.parametrize("name", list(FILES))
def test_fingerprint_fails_an_edited_stamped_file_and_names_the_stamp(stamped, name, capsys):
    clean, edited = stamped(name)
    fp = fingerprint(str(edited))
    drift = [f for f in fp.findings if f.kind == "stamp_drift"]
    assert len(drift) == 1 and drift[0].severity.value == "fail" and drift[0].slots == [EDITED_SLOT]
    assert "its stamp (hsf" in drift[0].message and fp.verdict.value == "fail"
    assert not any(f.kind.startswith("stamp") for f in fingerprint(str(clean)).findings)
    assert main(["fingerprint", str(edited)]) == 1
    out = capsys.readouterr().out
    assert "stamp_drift" in out and "its stamp" in out
    # --no-stamp-check: the edit goes unseen, exactly as before (only the stamp saw it)
    assert not any(f.kind == "stamp_drift" for f in fingerprint(str(edited), stamp_check=False).findings)
    main(["fingerprint", str(edited), "--no-stamp-check", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert not any(f["kind"] == "stamp_drift" for e in doc["files"] for f in e["findings"])


@pytest.mark.parametrize("name", list(FILES))
def test_scan_fails_an_edited_stamped_file_with_or_without_a_fingerprint(stamped, name):
    clean, edited = stamped(name)
    for fp in ("all", "none"):
        bad = scan(str(edited), workers=0, fingerprint=fp)
        kinds = [a.kind for a in bad.anomalies]
        assert "stamp_drift" in kinds and bad.exit_code() == 1, (fp, kinds)
        good = scan(str(clean), workers=0, fingerprint=fp)
        assert not any(a.kind.startswith("stamp") for a in good.anomalies)
        assert not any(a.kind.startswith("stamp")
                       for a in scan(str(edited), workers=0, fingerprint=fp, stamp_check=False).anomalies)


def test_a_stamped_file_without_a_sidecar_is_checked_against_the_stamps_layers(sample_data, tmp_path):
    """Issue 33: ``hsf fingerprint`` of a freshly stamped file said NO CLAIM. The stamp's r list is the claim when
    the user gives none; the user's list still wins."""
    src = sample_data / "ladder"
    shutil.copy(src / "capture_0.safetensors", tmp_path / "capture_0.safetensors")
    path = tmp_path / "capture_0.safetensors"
    ladder = json.loads((src / "capture.json").read_text())["r"]
    assert fingerprint(str(path)).claims is None  # no sidecar, no stamp: nothing claimed
    assert stamp(path, layers=",".join(map(str, ladder)), num_layers=30).ok
    fp = fingerprint(str(path))
    assert fp.claims is not None and fp.claims.source.value == "stamp" and fp.claims.rs == ladder
    assert fingerprint(str(path), layers=[0] * len(ladder)).claims.source.value == "user"
    assert not any(f.kind.startswith("stamp") for f in fp.findings)


def test_a_malformed_stamp_is_a_finding_not_an_unreadable_file(sample_data, tmp_path):
    shutil.copytree(sample_data / "speculators_v1", tmp_path / "d")
    path = tmp_path / "d" / "data_0.pt"
    (tmp_path / "d" / "stamps.jsonl").write_text(json.dumps({"path": "data_0.pt", "stamp": {"version": 2,
                                                                                         "slots": "x"}}) + "\n")
    fp = fingerprint(str(path))
    assert [f.kind for f in fp.findings if f.kind.startswith("stamp")] == ["stamp_unreadable"]


@pytest.mark.parametrize("command", ["inspect", "probe", "audit", "report"])
def test_every_reading_command_fails_an_edited_stamped_file(stamped, sample_data, tmp_path, command, capsys):
    """inspect, probe, audit and the report check the stamp too (a FAIL naming it, exit 1); the untouched copy
    gets no stamp finding; ``--no-stamp-check`` skips it."""
    clean, edited = stamped("speculators_v1")
    draft = str(sample_data / "draft_eagle3")

    def argv(path):
        folder = str(path.parent)
        return {"inspect": ["inspect", str(path)],
                "probe": ["probe", "--draft", draft, "--data", folder],
                "audit": ["audit", "--data", str(path), "--draft", draft, "--trainer", "speculators-v1"],
                "report": ["report", str(path), "-o", str(tmp_path / f"{path.parent.parent.name}.html")]}[command]

    def stamp_kinds(args) -> tuple[int, list]:
        rc = main([*args, "--json"])
        doc = json.loads(capsys.readouterr().out)
        if command == "report":  # the JSON is a summary; the HTML lists each file's findings and its stamp cell
            html = open(doc["output"], encoding="utf-8").read()
            return rc, ["stamp_drift"] if "CHANGED SINCE STAMPING" in html and "stamp_drift" in html else []
        found = doc.get("findings") or []
        for e in [x for x in doc.get("files") or [] if isinstance(x, dict)]:
            found = found + (e.get("findings") or [])
        return rc, sorted(f["kind"] for f in found if f["kind"].startswith("stamp"))

    rc, kinds = stamp_kinds(argv(edited))
    assert kinds == ["stamp_drift"] and rc == 1, (rc, kinds)
    assert stamp_kinds(argv(clean))[1] == []
    assert stamp_kinds([*argv(edited), "--no-stamp-check"])[1] == []


@pytest.mark.parametrize("name", list(FILES))
def test_the_checksums_ride_on_the_norm_pass_and_equal_the_whole_slot_ones(stamped, name):
    """``StampReader`` computes each slot's checksum on the statistics' row blocks (no second read); every digest
    must equal the one ``hsf stamp`` recorded from the whole slot, and a slot edited after stamping must differ."""
    from forensics.analysis.stamp import StampReader
    from forensics.analysis.stats import summarize

    clean, edited = stamped(name)
    for path, bad in ((clean, set()), (edited, {EDITED_SLOT})):
        cap = load(path)
        reader = StampReader(cap)
        assert reader.feeds
        summarize(cap, taps=reader.taps)
        got = {i: b.digest() for i, b in reader.sums.items()}
        want = [x["checksum"] for x in store.read_stamp(str(path))["slots"]]
        assert all(v is not None for v in got.values())
        assert {i for i in got if got[i] != want[i]} == bad
        assert [f.slots for f in reader.check().findings] == ([[EDITED_SLOT]] if bad else [])


def _edit_slot(path, slot: int, edit) -> None:
    """Apply ``edit`` (a function of the slot's [T, H] tensor, changing it in place) to a speculators-v1 file."""
    obj = torch.load(str(path), weights_only=True)
    edit(obj["hidden_states"][slot])
    torch.save(obj, str(path))


def _one_ulp(h):  # one value moved to its bf16 neighbour
    h.view(torch.int16)[37, 5] += 1


def _swap_rows(h):  # two rows reordered
    h[[40, 41]] = h[[41, 40]]


def _sign_of_one(h):  # one value's sign flipped
    h[12, 100] = -h[12, 100]


def _sign_of_row(h):  # a whole row's signs flipped (its norm unchanged)
    h[30] = -h[30]


@pytest.mark.parametrize("edit", [_one_ulp, _swap_rows, _sign_of_one, _sign_of_row])
def test_small_edits_of_a_stamped_file_fail_in_the_read(sample_data, tmp_path, edit):
    """A changed value (one ulp), two rows reordered, a sign flipped (one value, or a whole row, which keeps every
    norm): the stamp check inside the fingerprint's and the statistics' own read fails the edited slot, and only
    that slot; ``hsf verify`` fails it too."""
    from forensics.analysis.stamp import StampReader, verify
    from forensics.analysis.stats import summarize

    dst = tmp_path / "speculators_v1"
    shutil.copytree(sample_data / "speculators_v1", dst)
    assert stamp(dst, num_layers=30).ok
    path = dst / FILES["speculators_v1"]
    before = load(path).slots[EDITED_SLOT].tensor().clone()
    _edit_slot(path, EDITED_SLOT, edit)
    assert not torch.equal(before, load(path).slots[EDITED_SLOT].tensor())
    drift = [f for f in fingerprint(str(path)).findings if f.kind == "stamp_drift"]
    assert len(drift) == 1 and drift[0].slots == [EDITED_SLOT]
    cap = load(path)
    reader = StampReader(cap)
    summarize(cap, taps=reader.taps)
    assert [f.slots for f in reader.check().findings] == [[EDITED_SLOT]]
    assert not verify(dst).ok
