"""Tests for forensics.models.draft_config: config styles, safetensors header facts, d2t/t2d validation.

Draft checkpoints are built here from the documented layouts (speculators and SpecForge checkpoints):
``fc.weight [H, k·H]``, ``layers.0.*`` or ``midlayer.*`` names, ``d2t`` int64 offsets ``[Vd]`` and
``t2d`` bool ``[V]``. Large tensors (Kimi scale) are written sparse: only the header and the small
vocab maps hold real bytes, so a 300 MB fc costs no disk and is never read.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from forensics.errors import ForensicsError
from forensics.models.draft_config import read_draft

_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "BOOL": 1}


def write_safetensors(path, tensors: dict) -> None:
    """``tensors``: name -> (dtype, shape, bytes or None); None leaves zeros (a sparse hole)."""
    header, blobs, off = {}, [], 0
    for name, (dt, shape, data) in tensors.items():
        n = int(np.prod(shape)) * _SIZES[dt]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        blobs.append((off, data))
        off += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        base = f.tell()
        for o, data in blobs:
            if data is not None:
                f.seek(base + o)
                f.write(data)
        f.truncate(base + off)


def vocab_maps(V: int, Vd: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Valid maps as the trainers write them: d2t[i] = used[i] - i (offsets), t2d[used] = True."""
    used = np.sort(np.random.default_rng(seed).choice(V, Vd, replace=False))
    t2d = np.zeros(V, dtype=bool)
    t2d[used] = True
    return (used - np.arange(Vd)).astype(np.int64), t2d


def make_draft(folder, config: dict, H: int, k: int = 3, names: str = "midlayer", V: int | None = 512,
               Vd: int | None = 64, d2t=None, t2d=None, fc_width: int | None = None, weights: bool = True):
    """Write ``config.json`` (+ ``model.safetensors``) of an EAGLE-3 draft."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    if not weights:
        return str(folder)
    pre = "midlayer." if names == "midlayer" else "layers.0."
    t = {"fc.weight": ("BF16", (H, fc_width or k * H), None),
         f"{pre}input_layernorm.weight": ("BF16", (H,), None),
         f"{pre}self_attn.q_proj.weight": ("BF16", (H, 2 * H), None),
         "norm.weight": ("BF16", (H,), None)}
    if V and Vd:
        dd, tt = vocab_maps(V, Vd)
        d2t = dd if d2t is None else d2t
        t2d = tt if t2d is None else t2d
        t["lm_head.weight"] = ("BF16", (Vd, H), None)
    if d2t is not None:
        dt = {np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.float32): "F32"}[d2t.dtype]
        t["d2t"] = (dt, d2t.shape, d2t.tobytes())
    if t2d is not None:
        t["t2d"] = ("BOOL" if t2d.dtype == bool else "I64", t2d.shape, t2d.tobytes())
    write_safetensors(os.path.join(folder, "model.safetensors"), t)
    return str(folder)


def sglang_config(ids, H, V=512, Vd=64):
    return {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H, "target_hidden_size": H,
            "vocab_size": V, "draft_vocab_size": Vd,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}}


def speculators_config(ids, H, V=512, Vd=64):
    cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "draft_vocab_size": Vd,
           "transformer_layer_config": {"hidden_size": H, "vocab_size": V, "num_hidden_layers": 1},
           "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": "HuggingFaceTB/SmolLM2-135M"}}}
    if ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    return cfg


def test_sglang_style_nested_ids_midlayer_valid_maps(tmp_path):
    d = make_draft(tmp_path / "d", sglang_config([1, 14, 26], 16), H=16)
    info = read_draft(d)
    assert info.style == "sglang"
    assert info.ids_nested == [1, 14, 26] and info.ids_top is None
    assert info.fc_shape == (16, 48) and info.fc_aux_count == 3
    assert info.name_scheme == "midlayer"
    v = info.vocab
    assert v.d2t_dtype == "I64" and v.d2t_shape == [64] and v.t2d_shape == [512] and v.t2d_sum == 64
    assert v.d2t_targets_in_range and v.d2t_targets_increasing and v.maps_agree and not v.problems


def test_speculators_style_top_level_layers0(tmp_path):
    d = make_draft(tmp_path / "d", speculators_config([2, 15, 27], 16), H=16, names="layers.0")
    info = read_draft(d)
    assert info.style == "speculators" and info.ids_top == [2, 15, 27] and info.ids_nested is None
    assert info.name_scheme == "layers.0" and info.hidden_size == 16 and info.vocab_size == 512
    assert info.verifier == "HuggingFaceTB/SmolLM2-135M"


def test_eagle_style_no_ids_and_config_file_path(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 16, "draft_vocab_size": 64}
    d = make_draft(tmp_path / "d", cfg, H=16, weights=False)
    info = read_draft(os.path.join(d, "config.json"))
    assert info.style == "eagle" and info.ids_top is None and info.ids_nested is None and info.fc_shape is None


def test_absolute_ids_in_d2t_are_flagged(tmp_path):
    used = np.arange(0, 512, 8, dtype=np.int64)  # 64 absolute target ids: i + used[i] overshoots V
    d = make_draft(tmp_path / "d", sglang_config([1, 14, 26], 16), H=16, d2t=used)
    v = read_draft(d).vocab
    assert not v.d2t_targets_in_range and v.looks_like_absolute_ids
    assert any("offsets" in p for p in v.problems)


def test_wrong_dtypes_and_t2d_sum(tmp_path):
    d2t, t2d = vocab_maps(512, 64)
    t2d[np.flatnonzero(~t2d)[:3]] = True  # 67 True entries
    d = make_draft(tmp_path / "d", sglang_config([1, 14, 26], 16), H=16, d2t=d2t.astype(np.int32),
                   t2d=t2d.astype(np.int64))
    p = " ".join(read_draft(d).vocab.problems)
    assert "d2t dtype is I32" in p and "t2d dtype is I64" in p and "67 True entries" in p


def test_kimi_scale_header_is_read_without_reading_the_fc(tmp_path):
    """fc.weight [7168, 21504] bf16 (308 MB) written as a sparse hole: only the header is parsed."""
    cfg = sglang_config([2, 30, 58], 7168, V=163840, Vd=32000)
    d = make_draft(tmp_path / "kimi", cfg, H=7168, V=163840, Vd=32000)
    st = os.stat(os.path.join(d, "model.safetensors"))
    assert st.st_size > 300e6 and st.st_blocks * 512 < 20e6  # sparse on disk
    info = read_draft(d)
    assert info.fc_shape == (7168, 21504) and info.fc_aux_count == 3 and info.vocab.t2d_sum == 32000


def test_bad_inputs_are_forensics_errors(tmp_path):
    with pytest.raises(ForensicsError, match="no such"):
        read_draft(tmp_path / "missing")
    (tmp_path / "e").mkdir()
    with pytest.raises(ForensicsError, match="no config.json"):
        read_draft(tmp_path / "e")
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "config.json").write_text("{not json")
    with pytest.raises(ForensicsError, match="not valid JSON"):
        read_draft(tmp_path / "j")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text("{}")
    (tmp_path / "t" / "model.safetensors").write_bytes(struct.pack("<Q", 400) + b"{" + b" " * 20)
    with pytest.raises(ForensicsError, match="corrupt safetensors"):
        read_draft(tmp_path / "t")


@pytest.mark.parametrize("field, raw, says", [
    ("num_hidden_layers", "NaN", "num_hidden_layers = nan is not a whole number"),
    ("num_hidden_layers", "1e9", "num_hidden_layers = 1000000000 is not plausible"),
    ("hidden_size", "Infinity", "hidden_size = inf is not a whole number"),
    ("draft_vocab_size", "1e30", "draft_vocab_size = 1000000000000000019884624838656 is not plausible"),
    ("draft_vocab_size", "2.5", "draft_vocab_size = 2.5 is not a whole number"),
])
def test_a_hostile_size_in_a_draft_config_is_one_line_naming_the_field(tmp_path, field, raw, says):
    """NaN made int() raise a traceback; 1e9 draft layers sized a default id list by it. Now: one line, the file."""
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], '
                                          f'"eagle_aux_hidden_state_layer_ids": [2, 16, 29], "{field}": {raw}}}')
    with pytest.raises(ForensicsError, match=says) as e:
        read_draft(tmp_path)
    assert str(tmp_path / "config.json") in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], '
                                          f'"eagle_aux_hidden_state_layer_ids": [2, 16, 29], "{field}": 32}}')
    assert read_draft(tmp_path).config[field] == 32  # a plausible whole number is read as before
