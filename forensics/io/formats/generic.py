"""Generic captures: a ``.pt`` holding a tensor, a list of tensors or a dict of 2-D/3-D float tensors,
or a safetensors file of such tensors. Token ids are taken from ``input_ids``/``token_ids``/``ids``."""

from __future__ import annotations

import re

from forensics.errors import ForensicsError
from forensics.io.formats._common import as_2d, build, lazy_slot, provenance, tensor_slot
from forensics.io.formats._io import FLOAT_DTYPES, SAFETENSORS_DTYPES, SafetensorsFile

NAME = "generic"
ID_KEYS = ("input_ids", "token_ids", "ids")
MASK_KEYS = ("loss_mask", "attention_mask_loss")


def natural_key(s: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def _float_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.is_floating_point()


def match(obj) -> bool:
    import torch

    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (list, tuple)):
        return len(obj) > 0 and all(isinstance(x, torch.Tensor) for x in obj)
    return isinstance(obj, dict) and any(isinstance(v, torch.Tensor) for v in obj.values())


def read(obj, path: str):
    import torch

    ids = mask = None
    if isinstance(obj, torch.Tensor):
        items = [("tensor", obj)]
    elif isinstance(obj, (list, tuple)):
        items = [(f"[{i}]", t) for i, t in enumerate(obj)]
    else:
        ids = next((obj[k] for k in ID_KEYS if k in obj), None)
        mask = next((obj[k] for k in MASK_KEYS if k in obj), None)
        items = [(k, v) for k, v in obj.items() if k not in ID_KEYS + MASK_KEYS and isinstance(v, torch.Tensor)]
    notes = []
    if isinstance(obj, dict):  # side tensors of a dict (1-D scores, scalars) are not states: skip, say so
        side = [k for k, v in items if v.dim() < 2]
        items = [(k, v) for k, v in items if v.dim() >= 2]
        if side:
            notes.append(f"skipped tensors with fewer than 2 dims: {side[:8]}")
    states = [(k, v) for k, v in items if _float_tensor(v)]
    if not states:
        raise ForensicsError(
            f"no floating-point hidden-state tensors found ({_describe(items)}); hidden states must be float "
            "[tokens, hidden] or [1, tokens, hidden] tensors", path=path)
    skipped = [k for k, v in items if not _float_tensor(v)]
    if skipped:
        notes.append(f"skipped non-float tensors: {skipped[:8]}")
    slots = [tensor_slot(i, k, k, as_2d(v, path, k)) for i, (k, v) in enumerate(states)]
    return build(slots, ids, mask, provenance(path, NAME, notes=notes))


def _describe(items) -> str:
    return ", ".join(f"{k}: {str(getattr(v, 'dtype', type(v).__name__)).replace('torch.', '')} "
                     f"{list(getattr(v, 'shape', []))}" for k, v in items[:8]) or "no tensors"


def read_safetensors(sf: SafetensorsFile, path: str):
    import torch

    keys = sorted(sf.keys(), key=natural_key)
    ids = next((sf.get(k) for k in ID_KEYS if k in keys), None)
    mask = next((sf.get(k) for k in MASK_KEYS if k in keys), None)
    slots: list = []
    skipped: list = []
    notes: list = []
    for k in keys:
        if k in ID_KEYS + MASK_KEYS:
            continue
        dt = SAFETENSORS_DTYPES.get(sf.dtype_name(k), sf.dtype_name(k))
        shape = sf.shape(k)
        if dt not in FLOAT_DTYPES or len(shape) < 2:
            skipped.append(f"{k}: {sf.dtype_name(k)} {list(shape)}")
            continue
        if len(shape) == 3 and shape[0] == 1:
            shape2 = (shape[1], shape[2])
            getter = (lambda k=k: sf.get(k)[0])
        elif len(shape) == 3:
            raise ForensicsError(f"3-D tensor {list(shape)} has a batch of {shape[0]} sequences; expected "
                                 "[tokens, hidden] or [1, tokens, hidden] (one sample per file)", path=path, slot=k)
        elif len(shape) == 2:
            shape2 = (shape[0], shape[1])
            getter = (lambda k=k: sf.get(k))
        else:
            raise ForensicsError(f"tensor {k!r} has shape {list(shape)}; expected [tokens, hidden] or "
                                 "[1, tokens, hidden]", path=path)
        if shape2[0] == 0 or shape2[1] == 0:
            raise ForensicsError(f"zero-length sequence or hidden size: shape {list(shape)}", path=path, slot=k)
        slots.append(lazy_slot(len(slots), k, k, shape2, getattr(torch, dt.split(".")[1]), getter))
    if not slots:
        found = ", ".join(skipped[:8]) or "no tensors"
        raise ForensicsError(
            f"no floating-point hidden-state tensors found in the safetensors file ({found}); "
            "hidden states must be float [tokens, hidden] or [1, tokens, hidden] tensors", path=path)
    if skipped:
        notes.append(f"skipped tensors that are not float [tokens, hidden]: {skipped[:8]}")
    return build(slots, ids, mask, provenance(path, NAME, notes=notes))
