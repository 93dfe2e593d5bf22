"""The capture-format registry: one interface per format module, one ordered registry, every writer round-trips.

Each format that ``hsf capture`` can write is written with random states of a known shape and read back through
``forensics.load``: the format detected, the slot count and every slot's values (bit for bit), the ids and the
loss mask (where the format stores one) must be what was written.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil

import pytest
import torch

import forensics
import forensics.io.formats as formats
from forensics.errors import ForensicsError
from forensics.io.formats.base import CONTAINERS, CaptureFormat, Sample
from forensics.layers import FINAL_POST

MODULES = sorted(m.name for m in pkgutil.iter_modules(formats.__path__) if not m.name.startswith("_")
                 and m.name != "base")
WRITTEN = [f for f in formats.REGISTRY if f.writer is not None]


def test_every_format_module_exposes_one_registered_format():
    assert MODULES, "no format modules found"
    for name in MODULES:
        mod = importlib.import_module(f"forensics.io.formats.{name}")
        fmt = getattr(mod, "FORMAT", None)
        assert isinstance(fmt, CaptureFormat), f"{name} has no FORMAT"
        assert fmt in formats.REGISTRY, f"{name}.FORMAT is not registered"
        assert fmt.name == mod.NAME
        assert fmt.containers and set(fmt.containers) <= set(CONTAINERS)
        assert len(inspect.signature(fmt.read).parameters) == 2  # read(content, request), alike for all
    assert len({f.name for f in formats.REGISTRY}) == len(formats.REGISTRY) == len(MODULES)
    assert formats.REGISTRY[-1].name == "generic"  # the fallback of every container is tried last


def test_load_is_short():
    """``load`` sniffs, matches and reads: a handful of branches, no per-format code."""
    tree = ast.parse(inspect.getsource(formats.load))
    branches = [n for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp, ast.For, ast.While, ast.Try,
                                                            ast.BoolOp, ast.comprehension))]
    assert len(branches) <= 8
    names = {f.name for f in formats.REGISTRY} | {m for m in MODULES}
    src = inspect.getsource(formats.load)
    assert not any(f'"{n}"' in src or f"{n}." in src for n in names)


def test_the_recorder_names_no_format():
    import forensics.models.recorder as recorder

    src = inspect.getsource(recorder)
    names = {f.name for f in formats.REGISTRY} | set(formats.WRITERS)
    found = sorted(n for n in names if f'"{n}"' in src or f"'{n}'" in src)
    assert found == []


def test_trainers_are_registry_data():
    """The trainer each format's data is for (the audit's default --trainer, the report's training files)."""
    assert {f.name: f.trainer for f in formats.REGISTRY if f.trainer} == {
        "speculators-v1": "speculators-v1", "speculators": "speculators", "specforge": "specforge"}
    assert formats.format_of_trainer("specforge") == "specforge"
    assert formats.format_of_trainer("speculators-legacy", "speculators-v1") == "speculators-v1"
    assert formats.format_of_trainer(None) is None and formats.format_of_trainer("eagle") is None


def test_the_trainer_of_a_format_is_said_once_in_its_module(monkeypatch):
    """One source of truth: the trainer ↔ format pairing the conventions registry uses (``System.data_format``,
    ``of_format``: the audit's and the report's training files) is the one the format modules declare, so a format
    that declared another trainer would change it there too."""
    import importlib

    from forensics.models import conventions as cv

    sysmod = importlib.import_module("forensics.models.conventions.system")  # the module, not its system()

    import dataclasses

    declared = tuple(dataclasses.replace(f, trainer="eagle") if f.name == "specforge" else f for f in formats.REGISTRY)
    monkeypatch.setattr(formats, "REGISTRY", declared)  # pretend the SpecForge module declared EAGLE's data
    sysmod._data_format.cache_clear()
    try:
        assert cv.system("eagle").data_format == "specforge" and cv.system("specforge").data_format is None
        assert cv.of_format("specforge") == cv.system("eagle")
    finally:
        monkeypatch.undo()
        sysmod._data_format.cache_clear()
    assert cv.system("specforge").data_format == "specforge"


def test_command_help_imports_no_format_module():
    """``hsf --help`` and a command's ``--help`` (which lists the trainers) load no capture format module: the
    pairing is read from the format registry only when a trainer's format is asked."""
    import subprocess
    import sys

    for argv in (["--help"], ["audit", "--help"], ["fingerprint", "--help"]):
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "forensics.cli", *argv], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-500:]
        mods = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
        assert not {m for m in mods if m.startswith("forensics.io.formats")}, argv


def test_writer_names_and_errors():
    assert formats.WRITERS == ("speculators-v1", "speculators", "specforge", "safetensors")
    with pytest.raises(ForensicsError, match="unknown format 'nope'"):
        formats.writer("nope")


@pytest.mark.parametrize("fmt", WRITTEN, ids=[f.name for f in WRITTEN])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_writer_round_trips(fmt: CaptureFormat, dtype, tmp_path):
    w = fmt.writer
    assert w is not None
    L, T, H = 8, 11, 16
    rs = w.default_r(L)
    assert w.check_r(rs, L) is not None  # the default is a list the format holds
    g = torch.Generator().manual_seed(len(fmt.name))
    states = [torch.randn(T, H, generator=g).to(dtype) for _ in rs]
    ids = torch.randint(0, 1000, (T,), generator=g)
    mask = (torch.arange(T) % 3 != 0).long()
    for i in (0, 2001):  # a later sample: SpecForge groups files by 2000
        path = tmp_path / w.sample_path(i)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            w.write(f, Sample(ids, mask, states, rs, {"x": "1"} if w.header_metadata else None))
        cap = forensics.load(path)
        assert cap.format == fmt.name
        assert len(cap.slots) == len(states)
        for s, want in zip(cap.slots, states, strict=True):
            got = s.tensor()
            assert got.dtype == dtype and tuple(got.shape) == (T, H)
            assert torch.equal(got, want)
        assert cap.input_ids is not None and cap.input_ids.tolist() == ids.tolist()
        if cap.loss_mask is not None:
            assert cap.loss_mask.tolist() == mask.tolist()
    assert os.path.basename(w.sample_path(2001)) != os.path.basename(w.sample_path(0))


def test_layer_ids_follow_each_convention():
    """The ids each format's own metadata states, by each system's numbering (r = id + 1 for the speculators
    legacy generator and SpecForge's aux ids; r = id for vLLM; none for hsf's own safetensors)."""
    rs = [0, 3, 16, 28]
    assert formats.writer("speculators-v1").layer_ids(rs) == [-1, 2, 15, 27]
    assert formats.writer("speculators").layer_ids(rs) == [0, 3, 16, 28]
    assert formats.writer("specforge").layer_ids([2, 15, 27, FINAL_POST]) == [1, 14, 26]
    assert formats.writer("safetensors").layer_ids(rs) is None
    with pytest.raises(ForensicsError, match="exactly 3 aux"):
        formats.writer("specforge").check_r([2, 15], 30)


def test_no_format_matches_gives_one_error(tmp_path):
    p = tmp_path / "x.pt"
    torch.save({"weights": "not a tensor"}, p)
    with pytest.raises(ForensicsError, match="no reader recognises this content"):
        forensics.load(p)
    j = tmp_path / "x.json"
    j.write_text('{"a": 1}')
    with pytest.raises(ForensicsError, match="JSON file without hidden-state rows"):
        forensics.load(j)
