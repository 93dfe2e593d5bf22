"""Generic captures: a ``.pt`` holding a tensor, a list of tensors or a dict of 2-D/3-D float tensors,
or a safetensors file of such tensors. Token ids are taken from ``input_ids``/``token_ids``/``ids``."""

from __future__ import annotations

import re

from ..errors import ForensicsError
from ._common import as_2d, build, lazy_slot, provenance, tensor_slot
from ._io import SAFETENSORS_DTYPES, SafetensorsFile

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
    states = [(k, v) for k, v in items if _float_tensor(v)]
    if not states:
        found = ", ".join(f"{k}: {getattr(v, 'dtype', type(v).__name__)} {list(getattr(v, 'shape', []))}"
                          for k, v in items) or "no tensors"
        raise ForensicsError(f"no floating-point hidden-state tensors found ({found})", path=path)
    slots = []
    for k, v in states:
        if v.dim() == 3 and v.shape[0] > 1 and v.shape[0] != 1:
            raise ForensicsError(f"3-D tensor {list(v.shape)} has a batch of {v.shape[0]}; expected "
                                 "[tokens, hidden] or [1, tokens, hidden]", path=path, slot=k)
        slots.append(tensor_slot(len(slots), k, k, as_2d(v, path, k)))
    return build(slots, ids, mask, provenance(path, NAME))


def read_safetensors(sf: SafetensorsFile, path: str):
    import torch

    keys = sorted(sf.keys(), key=natural_key)
    ids = next((sf.get(k) for k in ID_KEYS if k in keys), None)
    mask = next((sf.get(k) for k in MASK_KEYS if k in keys), None)
    slots = []
    for k in keys:
        if k in ID_KEYS + MASK_KEYS:
            continue
        dt = SAFETENSORS_DTYPES.get(sf.dtype_name(k), sf.dtype_name(k))
        if dt not in ("torch.bfloat16", "torch.float16", "torch.float32", "torch.float64"):
            continue
        shape = sf.shape(k)
        if len(shape) == 3 and shape[0] == 1:
            shape2 = (shape[1], shape[2])
            getter = (lambda k=k: sf.get(k)[0])
        elif len(shape) == 2:
            shape2 = (shape[0], shape[1])
            getter = (lambda k=k: sf.get(k))
        else:
            raise ForensicsError(f"tensor {k!r} has shape {list(shape)}; expected [tokens, hidden] or "
                                 "[1, tokens, hidden]", path=path)
        if shape2[0] == 0:
            raise ForensicsError(f"zero-length sequence: shape {list(shape)}", path=path, slot=k)
        slots.append(lazy_slot(len(slots), k, k, shape2, getattr(torch, dt.split(".")[1]), getter))
    if not slots:
        raise ForensicsError("no floating-point hidden-state tensors found in the safetensors file", path=path)
    return build(slots, ids, mask, provenance(path, NAME))
