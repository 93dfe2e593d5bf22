"""Validation and slot building shared by every reader: one place decides what a valid slot is."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from forensics.errors import ForensicsError
from forensics.io.capture import Capture, Provenance, Slot, constant_getter
from forensics.io.layout import check_storage, ids_1d
from forensics.io.limits import slots_per_file

from ._io import upcast_fp8


def as_2d(t: Any, path: str, name: str):
    """Validate one hidden-state tensor and return it as ``[tokens, hidden]`` (a view, never a copy).

    A leading batch dim of 1 is squeezed; a real batch (> 1) or any other rank is an error.
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise ForensicsError(f"expected a tensor, found {type(t).__name__}", path=path, slot=name)
    check_storage(t, path, name)
    if not (t.is_floating_point()):
        raise ForensicsError(
            f"hidden states must be floating point, found dtype {t.dtype} with shape {list(t.shape)} "
            "(token ids stored where states belong?)", path=path, slot=name)
    if t.dim() == 3:
        if t.shape[0] != 1:
            raise ForensicsError(
                f"3-D tensor {list(t.shape)} has a batch of {t.shape[0]} sequences; expected [tokens, hidden] "
                "or [1, tokens, hidden] (one sample per file)", path=path, slot=name)
        t = t[0]
    if t.dim() != 2:
        raise ForensicsError(f"expected a [tokens, hidden] tensor, found shape {list(t.shape)}", path=path, slot=name)
    if t.shape[0] == 0:
        raise ForensicsError(f"zero-length sequence: shape {list(t.shape)}", path=path, slot=name)
    if t.shape[1] == 0:
        raise ForensicsError(f"zero hidden size: shape {list(t.shape)}", path=path, slot=name)
    return upcast_fp8(t)


def tensor_slot(index: int, name: str, key: str, t, claimed: str | None = None) -> Slot:
    return Slot(index=index, name=name, key=key, shape=(int(t.shape[0]), int(t.shape[1])), dtype=t.dtype,
                getter=constant_getter(t), claimed=claimed)


def lazy_slot(index: int, name: str, key: str, shape: tuple[int, int], dtype, getter: Callable,
              claimed: str | None = None) -> Slot:
    return Slot(index=index, name=name, key=key, shape=shape, dtype=dtype, getter=getter, claimed=claimed)


def check_consistent(slots: list[Slot], input_ids, loss_mask, path: str) -> None:
    """All slots share one token count and one hidden size (ids/mask of another length are read as they are:
    ``Capture.ids_match_rows`` is False)."""
    if not slots:
        raise ForensicsError("no hidden-state slots found", path=path)
    n = slots[0].num_tokens
    h = slots[0].shape[1]
    mixed = [s for s in slots if s.shape[1] != h]
    if mixed:
        s = mixed[0]
        raise ForensicsError(f"mixed hidden sizes: slot {s.index} ({s.name}) has hidden size {s.shape[1]}, slot "
                             f"{slots[0].index} ({slots[0].name}) has {h}", path=path)
    ragged = [s for s in slots if s.num_tokens != n]
    if ragged:
        shapes = ", ".join(f"{s.name}={list(s.shape)}" for s in slots)
        raise ForensicsError(f"ragged sequence lengths across slots: {shapes}", path=path)
    # input_ids / loss_mask of another length than the rows is readable content that is wrong (a truncated
    # tail, sglang#26163; only the uncached suffix, vllm#44485): analysis.rows reports it as ``row_count``


def provenance(path: str, fmt: str, layout: str | None = None, notes: list[str] | None = None) -> Provenance:
    return Provenance(path=os.path.abspath(path), format=fmt, size_bytes=os.path.getsize(path), layout=layout,
                      notes=list(notes or []))


def build(slots: list[Slot], input_ids, loss_mask, prov: Provenance, **kw) -> Capture:
    slots_per_file(len(slots), prov.path)  # every format's capture: a 3 MB [4, 200000] aux is not 200 000 slots
    input_ids = ids_1d(input_ids, prov.path, "input_ids")
    loss_mask = ids_1d(loss_mask, prov.path, "loss_mask")
    check_consistent(slots, input_ids, loss_mask, prov.path)
    return Capture(slots=slots, input_ids=input_ids, loss_mask=loss_mask, provenance=prov, **kw)


def concat_count(aux, h: int, path: str, aux_key: str, final_key: str) -> int:
    """How many ``[tokens, h]`` states a pre-concatenated ``aux`` ``[tokens, k·h]`` holds, ``h`` being the width of
    the file's own single state ``final_key``; a width that is no multiple of ``h`` is one error naming both."""
    if aux.shape[1] % h:
        raise ForensicsError(f"{aux_key} width {aux.shape[1]} is not a multiple of {final_key} width {h}", path=path)
    return int(aux.shape[1]) // h


def split_concat(t, k: int, path: str, key: str, start_index: int = 0, claimed_prefix: str = "aux") -> list[Slot]:
    """Split a pre-concatenated ``[tokens, k·H]`` tensor into k ``[tokens, H]`` slots (views)."""
    width = int(t.shape[1])
    if width % k:
        raise ForensicsError(f"{key} width {width} is not divisible by {k} (expected [tokens, {k}·H])",
                             path=path)
    h = width // k
    return [
        tensor_slot(start_index + i, f"{key}[:, {i * h}:{(i + 1) * h}]", key, t[:, i * h:(i + 1) * h],
                    claimed=f"{claimed_prefix}[{i}]")
        for i in range(k)
    ]

# the module's own names, and those it re-exports (callers import them from here)
__all__ = ["as_2d", "tensor_slot", "lazy_slot", "check_consistent", "provenance", "build", "concat_count",
           "split_concat", "check_storage", "ids_1d"]
