"""speculators legacy v1: ``data_{i}.pt`` = ``{input_ids [seq], hidden_states [[seq, H], ...], loss_mask [seq]}``.

Written by speculators' ``scripts/data_generation_offline.py`` (one ``torch.save`` per sample); read by
``standardize_data_v1``, which feeds ``cat(hidden_states[:-1])`` to the draft and uses
``hidden_states[-1]`` as the training target. The layer ids live only in ``data_config.json``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from forensics.errors import ForensicsError
from forensics.io.capture import Capture
from forensics.io.formats._common import as_2d, build, provenance, tensor_slot
from forensics.io.formats.base import CaptureFormat, Dataset, Request, Sample, Writer
from forensics.io.formats.speculators import final_post_note
from forensics.layers import FINAL_POST

NAME = "speculators-v1"


KEYS = {"input_ids", "hidden_states", "loss_mask"}


def match(obj) -> bool:
    """Exactly the generator's three keys: a user's own ``{input_ids, hidden_states: [...]}`` dict is generic, so
    this format's claim (the last slot is the target at r = L) never applies to it."""
    return isinstance(obj, dict) and set(map(str, obj)) == KEYS and isinstance(obj["hidden_states"], (list, tuple))


def read(obj: dict, req: Request):
    path = req.path
    hs = obj["hidden_states"]
    if len(hs) == 0:
        raise ForensicsError("'hidden_states' is an empty list (no layers were captured)", path=path)
    slots = []
    n = len(hs)
    for i, t in enumerate(hs):
        name = f"hidden_states[{i}]"
        claimed = "target" if (i == n - 1 and n > 1) else f"aux[{i}]"
        slots.append(tensor_slot(i, name, "hidden_states", as_2d(t, path, name), claimed=claimed))
    return build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME))


def apply_data_config(cap: Capture, cfg: dict) -> None:
    """The layer ids of ``data_config.json``, written by speculators' legacy generator next to its ``data_{i}.pt``
    files only (speculators ``DataGenerationConfig``)."""
    hs_cfg = cfg.get("hidden_states")
    ids = hs_cfg.get("layer_ids") if isinstance(hs_cfg, dict) else None
    if not isinstance(ids, list):
        return
    cap.declared_layers = ids
    cap.declared_convention = "speculators-legacy"
    if len(ids) == len(cap.slots) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        # the legacy generator captures *after* block id (custom_worker._patched_forward), so r = id + 1;
        # speculators' tests/datagen/test_vllm_hidden_states.py @ dd6deac9: id 2 == HF hidden_states[3]
        for s, i in zip(cap.slots, ids, strict=True):
            s.declared_r = i + 1
        cap.provenance.notes.append(f"layer ids {ids} from data_config.json (speculators legacy generator: "
                                    "r = id + 1)")
    else:
        cap.provenance.notes.append(f"data_config.json declares layer ids {ids} but the file has "
                                    f"{len(cap.slots)} slots: ids not applied to slots")


def write(f, sample: Sample) -> None:
    """Write one sample as the legacy generator does: ``torch.save({input_ids, hidden_states: [...], loss_mask})``
    into the open binary file ``f``."""
    import torch

    torch.save({"input_ids": sample.input_ids, "hidden_states": [t.contiguous() for t in sample.states],
                "loss_mask": sample.loss_mask}, f)


def sample_path(i: int) -> str:
    return f"data_{i}.pt"


def default_r(L: int) -> list:
    """The legacy ``VllmHiddenStatesGenerator`` ids [2, L//2, L-3, L-1], r = id + 1."""
    return [3, L // 2 + 1, L - 2, L]


def check_r(rs: list, L: int) -> list[str]:
    return final_post_note(NAME, rs)


def layer_ids(rs: list) -> list | None:
    """The legacy generator captures after block id: r = id + 1 (speculators before #433); final_post has none."""
    return [None if r == FINAL_POST else int(r) - 1 for r in rs]


def data_config(ds: Dataset) -> dict:
    """speculators' ``DataGenerationConfig.to_dict()`` (config_generator.py, version "2.0"), filled honestly:
    vLLM/speculators/GPU fields say they were not involved."""
    na = "n/a (written by hsf capture with HF transformers)"
    ids = ds.layer_ids or []
    epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible-builds convention
    when = datetime.fromtimestamp(int(epoch), UTC) if epoch else datetime.now(UTC)
    return {
        "version": "2.0",
        "generated_at": when.isoformat(),
        "speculators_version": na,
        "reproducibility": {"command": ds.command,
                            "package_versions": {"torch": ds.versions.get("torch", na), "vllm": na,
                                                 "transformers": ds.versions.get("transformers", na),
                                                 "speculators": na},
                            "gpu": "CPU ONLY"},
        "model": {"target_model_path": ds.model, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.0,
                  "hidden_size": ds.hidden_size},
        "data": {"train_data_path": ds.texts, "seq_length": ds.max_tokens, "max_samples": None,
                 "num_samples": len(ds.samples), "seed": 0,
                 "chat_template_note": "Uses tokenizer's built-in chat template"},
        "hidden_states": {"layer_ids": ids, "description": "Layers selected for EAGLE3 fusion and target logits"},
        "generation": {"cache_dir": na},
        "format": {"file_pattern": "data_{idx}.pt", "schema": {
            "input_ids": {"dtype": "torch.long", "shape": "[seq_len]", "description": "Tokenized input sequence"},
            "hidden_states": {"dtype": f"list[torch.{'bfloat16' if ds.dtype == 'bf16' else 'float32'}]",
                              "shape": f"list of [seq_len, {ds.hidden_size}]", "num_tensors": len(ids),
                              "description": f"Hidden states from {len(ids)} layers"},
            "loss_mask": {"dtype": "torch.long", "shape": "[seq_len]",
                          "description": "1 for assistant tokens to train on, 0 elsewhere"}}},
    }


def side_files(ds: Dataset) -> list[str]:
    """``data_config.json`` (the layer ids) and ``sample_lengths.json``, as the legacy generator writes them."""
    if ds.layer_ids is None:
        return []
    ds.write_json(os.path.join(ds.out, "data_config.json"), data_config(ds))
    ds.write_json(os.path.join(ds.out, "sample_lengths.json"), {str(i): n for i, n in enumerate(ds.num_tokens)})
    return []


WRITER = Writer(NAME, write, sample_path, convention="speculators-legacy", default_r=default_r, check_r=check_r,
                layer_ids=layer_ids, side_files=side_files, side_names=("data_config.json", "sample_lengths.json"))
FORMAT = CaptureFormat(NAME, ("torch",), match, read, trainer=NAME, side_file=("data_config.json", apply_data_config),
                       writer=WRITER)
