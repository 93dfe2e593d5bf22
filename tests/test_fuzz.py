"""Property tests over generated hostile captures: safetensors headers, speculators/SpecForge dicts (shapes,
dtypes, strides, sizes, nesting, names) and sidecars, fed to ``forensics.load``/``summarize`` and the CLI.

The property: a result, a finding, or a ``ForensicsError`` naming the file — never another exception, never a
write to an input, and bounded memory (generated claims reach 10^12 elements; nothing may allocate for them).

Profiles: ``short`` (default, a few seconds per test, part of the normal test run) and ``long`` (``make fuzz``,
``HSF_FUZZ=long``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import struct
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import forensics
from forensics.cli import main as hsf_main
from forensics.errors import ForensicsError, escape

settings.register_profile("short", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("long", max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HSF_FUZZ", "short"))

pytestmark = pytest.mark.timeout(300)

# Peak RSS may grow by at most this much over the whole module: every generated tensor is < 1 MB, while the
# generated *claims* reach 10^12 elements, so an allocation for a claim would exceed it by orders of magnitude.
RSS_GROWTH_LIMIT_BYTES = 1 << 30

NAMES = st.one_of(
    st.sampled_from(["hidden_states", "hidden_state", "aux_hidden_state", "target", "input_ids", "token_ids",
                     "loss_mask", "x", "__metadata__", ""]),
    st.text(min_size=0, max_size=12),
)
SIZES = st.one_of(st.integers(0, 6), st.sampled_from([-1, 2**31, 2**32 + 1, 10**12, 2**63 - 1]))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
JSON = st.recursive(JSON_LEAF, lambda c: st.one_of(st.lists(c, max_size=4),
                                                  st.dictionaries(st.text(max_size=6), c, max_size=4)),
                    max_leaves=20)
ST_DTYPES = ["F32", "F16", "BF16", "F64", "I64", "I32", "U8", "BOOL", "F8_E4M3", "F8_E5M2", "C64", "", "f32"]


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_property(path: str) -> None:
    """load + summarize give a result or a ForensicsError naming the file; the file is unchanged."""
    before = _digest(path)
    try:
        forensics.summarize(forensics.load(path))
    except ForensicsError as e:
        assert e.path == path and str(e).startswith(escape(path)), str(e)  # names the file, escaped
        assert "\n" not in str(e) and "\x1b" not in str(e), repr(str(e))  # one printable line
    assert _digest(path) == before


@pytest.fixture(scope="module", autouse=True)
def rss_bound():
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    yield
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start
    assert grown < RSS_GROWTH_LIMIT_BYTES, f"peak RSS grew by {grown / 2**20:.0f} MiB"


# --------------------------------------------------------------------------------------- safetensors headers
@st.composite
def safetensors_file(draw) -> bytes:
    n = draw(st.integers(0, 4))
    header: dict = {}
    data_len = draw(st.integers(0, 512))
    for _ in range(n):
        name = draw(NAMES)
        entry = draw(st.one_of(
            st.fixed_dictionaries({
                "dtype": st.one_of(st.sampled_from(ST_DTYPES), JSON_LEAF),
                "shape": st.one_of(st.lists(SIZES, max_size=5), JSON_LEAF),
                "data_offsets": st.one_of(st.lists(st.integers(-8, 600), min_size=2, max_size=2),
                                          st.lists(JSON_LEAF, max_size=3), JSON_LEAF),
            }),
            JSON,
        ))
        header[name] = entry
    if draw(st.booleans()):
        header["__metadata__"] = draw(JSON)
    raw = json.dumps(header).encode()
    declared = draw(st.one_of(st.just(len(raw)), st.integers(0, 2**64 - 1)))
    return struct.pack("<Q", declared) + raw + draw(st.binary(min_size=data_len, max_size=data_len))


@given(safetensors_file())
def test_fuzz_safetensors_headers(blob):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "hs_0.safetensors")
        with open(p, "wb") as f:
            f.write(blob)
        check_property(p)


# --------------------------------------------------------------------------------------- torch dicts
TORCH_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.float8_e4m3fn,
                torch.float8_e5m2, torch.int64, torch.bool, torch.complex64]


@st.composite
def tensor(draw):
    """A small tensor, or a view of one whose shape claims far more than it stores (stride 0, as_strided)."""
    dtype = draw(st.sampled_from(TORCH_DTYPES))
    shape = draw(st.lists(st.integers(0, 9), min_size=0, max_size=4))
    base = torch.randn(tuple(shape), dtype=torch.complex64 if dtype.is_complex else torch.float32)
    scale = draw(st.sampled_from([1.0, 1e-40, 1e38, float("nan"), float("inf"), 0.0]))
    if not dtype.is_complex:
        base = (base * scale).to(dtype) if dtype not in (torch.int64, torch.bool) else base.to(dtype)
    view = draw(st.sampled_from(["plain", "expand", "strided", "transpose", "slice"]))
    if view == "expand" and base.dim() >= 1 and base.numel() > 0:
        big = draw(st.sampled_from([3, 10**6, 10**9]))
        base = base[..., :1].expand(*base.shape[:-1], big) if base.dim() > 1 else base[:1].expand(big)
    elif view == "strided" and base.numel() > 0:
        rows = draw(st.sampled_from([2, 10**8]))
        base = base.flatten()[:1].as_strided((rows, 8), (0, 0))
    elif view == "transpose" and base.dim() >= 2:
        base = base.transpose(0, 1)
    elif view == "slice" and base.dim() >= 1:
        base = base[::2]
    return base


SLOT_LIST = st.lists(tensor(), min_size=0, max_size=4)


@st.composite
def capture_dict(draw):
    kind = draw(st.sampled_from(["v1", "specforge", "v0", "eagle", "generic", "nested"]))
    ids = draw(st.one_of(st.none(), tensor(), st.lists(st.integers(-(2**40), 2**40), max_size=10)))
    if kind == "v1":
        d = {"hidden_states": draw(SLOT_LIST), "input_ids": ids, "loss_mask": draw(st.one_of(st.none(), tensor()))}
    elif kind == "specforge":
        d = {"hidden_state": draw(tensor()), "aux_hidden_state": draw(tensor()), "input_ids": ids,
             "loss_mask": draw(st.one_of(st.none(), tensor()))}
    elif kind == "v0":
        d = {"hidden_state": draw(tensor()), "target": draw(tensor()), "input_ids": ids}
    elif kind == "eagle":
        d = {"hidden_state": draw(tensor()), "input_ids": ids}
    elif kind == "generic":
        d = {draw(NAMES): draw(tensor()) for _ in range(draw(st.integers(1, 3)))}
    else:
        d = {"hidden_states": [[draw(tensor())], {"a": draw(tensor())}], "input_ids": ids}
    return {k: v for k, v in d.items() if v is not None}


def _save(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@given(capture_dict(), st.sampled_from(["data_0.pt", "x\n\x1b[31m.pt", "data_0.ckpt.gz"]))
def test_fuzz_torch_dicts(obj, name):
    import gzip

    blob = _save(obj)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(gzip.compress(blob) if name.endswith(".gz") else blob)
        check_property(p)


# --------------------------------------------------------------------------------------- sidecars
GOOD = {"hidden_states": [torch.randn(6, 8) for _ in range(3)], "input_ids": torch.arange(6)}


@given(st.sampled_from(["data_config.json", "capture.json"]),
       st.one_of(JSON, st.fixed_dictionaries({"hidden_states": st.fixed_dictionaries({"layer_ids": JSON})}),
                 st.fixed_dictionaries({"r": JSON, "layer_ids": JSON, "tokenizer": JSON, "convention": JSON}),
                 st.binary(max_size=64).map(lambda b: b.decode("latin-1"))))
def test_fuzz_sidecars(side, doc):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "data_0.pt")
        torch.save(GOOD, p)
        with open(os.path.join(d, side), "w", encoding="utf-8") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        before = _digest(os.path.join(d, side))
        cap = forensics.load(p)  # a sidecar never makes a capture unreadable
        forensics.summarize(cap)
        assert _digest(os.path.join(d, side)) == before


# --------------------------------------------------------------------------------------- stamp records
STAMP_FIELDS = ["version", "slots", "tokens", "target", "file", "producer", "convention", "layer_ids",
                "embed_rows", "format"]
SLOT_FIELDS = ["name", "r", "label", "dtype", "shape", "norm_q", "checksum"]


def _base_stamp() -> dict:
    from forensics.io.stamps import record_for_states

    return record_for_states(GOOD["hidden_states"], [0, 3, 16], GOOD["input_ids"], fmt="speculators-v1",
                             producer="fuzz", convention=None, layer_ids=None, model="m", num_layers=30,
                             tool_version="0", file="data_0.pt")


@settings(max_examples=max(10, settings().max_examples // 3))
@given(st.one_of(
    JSON,
    st.tuples(st.sampled_from(STAMP_FIELDS), JSON),
    st.tuples(st.integers(0, 2), st.sampled_from(SLOT_FIELDS), JSON),
    st.binary(max_size=48).map(lambda b: b.decode("latin-1"))))
def test_fuzz_stamp_records(mutation):
    """A stamp record of any shape, in ``stamps.jsonl`` and in a safetensors header: verify gives every file a
    status (a malformed stamp is that file's error row) and the report's stamp summary never raises."""
    from safetensors.torch import save_file

    from forensics.analysis.stamp import stamp_status, verify
    from forensics.io.stamps import STAMP_KEY
    from forensics.views.stamp import summary, verify_text

    doc: object = _base_stamp()
    if isinstance(mutation, tuple) and len(mutation) == 2:
        doc = {**doc, mutation[0]: mutation[1]}
    elif isinstance(mutation, tuple):
        slots = [dict(x) for x in doc["slots"]]
        slots[mutation[0]][mutation[1]] = mutation[2]
        doc = {**doc, "slots": slots}
    else:
        doc = mutation
    with tempfile.TemporaryDirectory() as d:
        torch.save(GOOD, os.path.join(d, "data_0.pt"))
        line = doc if isinstance(doc, str) else json.dumps({"path": "data_0.pt", "stamp": doc})
        with open(os.path.join(d, "stamps.jsonl"), "w", encoding="utf-8") as f:
            f.write(line + "\n")
        sub = os.path.join(d, "st")
        os.mkdir(sub)
        raw = doc if isinstance(doc, str) else json.dumps(doc)
        save_file({"a": torch.randn(4, 8), "b": torch.randn(4, 8)}, os.path.join(sub, "x.safetensors"),
                  metadata={STAMP_KEY: raw})
        before = {n: _digest(os.path.join(r, n)) for r, _, ns in os.walk(d) for n in ns}
        res = verify(d)
        assert len(res.files) == 2 and all(f.status in ("ok", "drifted", "unstamped", "changed-shape", "moved",
                                                        "error") for f in res.files)
        verify_text(res)
        res.to_dict()
        for f in res.files:
            s = stamp_status(f.path)
            summary(s["stamp"])
        assert {n: _digest(os.path.join(r, n)) for r, _, ns in os.walk(d) for n in ns} == before


# --------------------------------------------------------------------------------------- CLI
@settings(max_examples=max(5, settings().max_examples // 5))
@given(capture_dict())
def test_fuzz_cli_inspect_and_fingerprint(obj):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "data_0.pt")
        torch.save(obj, p)
        before = _digest(p)
        for cmd in ("inspect", "fingerprint"):
            code = hsf_main([cmd, "--json", p])
            assert code in (0, 1, 2)
        assert _digest(p) == before


@settings(max_examples=max(3, settings().max_examples // 8))
@given(capture_dict(), safetensors_file(), st.sampled_from(["data_config.json", "capture.json"]), JSON)
def test_fuzz_cli_dataset_scan_and_report(obj, blob, side, doc):
    """A hostile dataset folder (a generated capture, a generated safetensors file, a generated sidecar) through
    ``hsf scan`` and ``hsf report``: an exit code, never an exception; no input changes."""
    with tempfile.TemporaryDirectory() as d:
        ds = os.path.join(d, "ds")
        os.makedirs(ds)
        torch.save(obj, os.path.join(ds, "data_0.pt"))
        with open(os.path.join(ds, "hs_1.safetensors"), "wb") as f:
            f.write(blob)
        torch.save(GOOD, os.path.join(ds, "data_2.pt"))
        with open(os.path.join(ds, side), "w", encoding="utf-8") as f:
            json.dump(doc, f)
        before = {n: _digest(os.path.join(ds, n)) for n in os.listdir(ds)}
        assert hsf_main(["scan", ds, "-j", "0", "--no-progress", "-o", os.path.join(d, "s.jsonl")]) in (0, 1, 2)
        assert hsf_main(["report", ds, "-o", os.path.join(d, "r.html")]) in (0, 1, 2, 3)
        assert {n: _digest(os.path.join(ds, n)) for n in os.listdir(ds)} == before


# --------------------------------------------------------------------------------------- model folders
CONFIG_FIELDS = ["num_hidden_layers", "hidden_size", "vocab_size", "intermediate_size", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "max_position_embeddings", "num_experts", "auto_map",
                 "model_type", "text_config", "tie_word_embeddings"]
CONFIG_VALUES = st.one_of(SIZES, JSON_LEAF, st.sampled_from(["llama", "evilmodel", "qwen3", 1e9, -3, 0]), JSON)


@st.composite
def model_folder(draw) -> dict:
    """A model folder as files: a config.json (a Llama's, with fields replaced or hostile), a shard index whose
    names may leave the folder or not be strings, and shards whose headers are fuzzed like captures'."""
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8, "vocab_size": 16,
           "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1}
    for name in draw(st.lists(st.sampled_from(CONFIG_FIELDS), max_size=3)):
        cfg[name] = draw(CONFIG_VALUES)
    files = {"config.json": json.dumps(cfg).encode() if draw(st.booleans()) else draw(st.binary(max_size=64))}
    shard = draw(safetensors_file())
    if draw(st.booleans()):
        names = draw(st.lists(st.one_of(st.sampled_from(["model-1.safetensors", "../x.safetensors",
                                                         "/etc/passwd", "sub/../../y.safetensors", ""]),
                                        JSON_LEAF), min_size=1, max_size=3))
        files["model.safetensors.index.json"] = json.dumps(
            {"weight_map": {f"model.layers.{i}.w": n for i, n in enumerate(names)}}).encode()
        files["model-1.safetensors"] = shard
    else:
        files["model.safetensors"] = shard
    return files


@given(model_folder())
def test_fuzz_model_folders(files):
    """Config, index and shard headers of a model folder: a LayerStream, or one ForensicsError line — never
    another exception, never code run, never a hang."""
    from forensics.io.safetensors import shard_index
    from forensics.models.stream import LayerStream

    with tempfile.TemporaryDirectory() as d:
        folder = os.path.join(d, "model")
        os.mkdir(folder)
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        for read in (lambda: shard_index(folder), lambda: LayerStream(folder)):
            try:
                read()
            except ForensicsError as e:
                assert "\n" not in str(e) and e.path and e.path.startswith(folder), (str(e), e.path)
