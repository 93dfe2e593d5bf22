"""Generic captures: whatever a user saved with ``torch.save``, ``safetensors`` or numpy — a tensor, a stack, a list
or a dict of named tensors, in every layout ``forensics.io.layout`` accepts. Token ids are taken from
``input_ids``/``token_ids``/``ids`` or given from outside the file (``--ids``)."""

from __future__ import annotations

import json
import re

from forensics.errors import ForensicsError
from forensics.io.capture import Provenance
from forensics.io.formats._common import as_2d, build, lazy_slot, provenance, tensor_slot
from forensics.io.formats._io import FLOAT_DTYPES, SAFETENSORS_DTYPES, SafetensorsFile
from forensics.io.formats.base import CaptureFormat, Request, Sample, Writer
from forensics.io.layout import ATTENTION_KEYS, ID_KEYS, MASK_KEYS, resolve_samples, stored_ids, to_torch
from forensics.layers import FINAL_POST, r_label

NAME = "generic"


def natural_key(s: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def _is_numpy(obj) -> bool:
    """A ``.npy`` array or a ``.npz`` archive's dict of arrays (numpy files are read by this format only)."""
    if isinstance(obj, dict):
        return bool(obj) and all(type(v).__module__ == "numpy" for v in obj.values())
    return type(obj).__module__ == "numpy"


def match(obj) -> bool:
    """The fallback of every container: any safetensors or numpy file, any torch object holding tensors."""
    import torch

    if isinstance(obj, SafetensorsFile) or _is_numpy(obj):
        return True
    obj = to_torch(obj)
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (list, tuple)):
        return len(obj) > 0 and all(isinstance(to_torch(x), torch.Tensor) for x in obj)
    return isinstance(obj, dict) and any(isinstance(to_torch(v), torch.Tensor) or
                                         (isinstance(v, (list, tuple)) and v) for v in obj.values())


def read(obj, req: Request):
    """A safetensors file (lazily, slot by slot) or any accepted layout (``forensics.io.layout``): a tensor, a
    stack, a list, a dict of named tensors. A ``[B, T]`` batch gives its sample ``req.record``."""
    caps = read_all(obj, req)
    if len(caps) == 1:
        return caps[0]
    if not 0 <= req.record < len(caps):
        raise ForensicsError(f"sample {req.record} does not exist: the batch holds {len(caps)} samples "
                             f"(0..{len(caps) - 1})", path=req.path)
    return caps[req.record]


def read_all(obj, req: Request) -> list:
    """Every sample: one capture, or B for a ``[B, T]`` batch (views of the content read once)."""
    if isinstance(obj, SafetensorsFile):
        return read_safetensors(obj, req.path, req.input_ids)
    return read_samples(obj, req.path, req.input_ids)


def read_layout(obj, path: str, input_ids=None):
    """Any accepted layout (``forensics.io.layout``): a tensor, a stack, a list, a dict of named tensors (a batch:
    its first sample; :func:`read_samples` gives every one)."""
    return read_samples(obj, path, input_ids)[0]


def read_samples(obj, path: str, input_ids=None, attention_mask=None, fmt: str = NAME, size: int | None = None):
    """One capture per sample: one for a single sample, B for a ``[B, T]`` batch (``forensics.io.layout``)."""
    caps = []
    for res in resolve_samples(obj, path, input_ids, attention_mask):
        slots = [tensor_slot(i, p.name, p.key, as_2d(p.tensor, path, p.name), p.claimed)
                 for i, p in enumerate(res.parts)]
        prov = (provenance(path, fmt, layout=res.layout, notes=res.notes) if size is None else
                Provenance(path=path, format=fmt, size_bytes=size, layout=res.layout, notes=list(res.notes)))
        cap = build(slots, res.input_ids, res.loss_mask, prov)
        if res.key_layers:
            cap.meta["key_layers"] = dict(res.key_layers)
        if res.samples > 1:
            prov.record = res.sample
            cap.meta.update(records=res.samples, record=res.sample)
        if res.padding is not None:
            cap.meta["padding"] = dict(res.padding)
        caps.append(cap)
    return caps


def _needs_resolver(sf: SafetensorsFile, keys: list[str]) -> bool:
    """A stack (3-D with k > 1, or 4-D) among the float tensors, or a padding mask: read eagerly through the layout
    resolver."""
    if any(k in keys for k in ATTENTION_KEYS):  # a padded batch (or sample): its pad rows are cut by the resolver
        return True
    for k in keys:
        shape = sf.shape(k)
        dt = SAFETENSORS_DTYPES.get(sf.dtype_name(k), "")
        if dt in FLOAT_DTYPES and (len(shape) == 4 or (len(shape) == 3 and shape[0] != 1)):
            return True
    return False


def read_safetensors(sf: SafetensorsFile, path: str, input_ids=None) -> list:
    import torch

    keys = sorted(sf.keys(), key=natural_key)
    if _needs_resolver(sf, keys):
        return read_samples({k: sf.get(k) for k in keys}, path, input_ids)
    ids = stored_ids(sf.get, keys, path)
    if ids is None:
        ids = input_ids
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
    return [build(slots, ids, mask, provenance(path, NAME, notes=notes))]


def write(f, sample: Sample) -> None:
    """Write one sample as ``hsf capture``'s own safetensors file: ``slot_<j>.<label>`` per state, ``input_ids``,
    ``loss_mask``, and the r list in the header (``"r"``) with any extra ``metadata``."""
    from safetensors.torch import save

    rs = sample.r
    tensors = {f"slot_{j}.{r_label(r)}": t for j, (r, t) in enumerate(zip(rs, sample.states, strict=True))}
    tensors.update(input_ids=sample.input_ids, loss_mask=sample.loss_mask)
    f.write(save(tensors, metadata={"r": json.dumps(rs), "tool": "hsf capture", **(sample.metadata or {})}))


def sample_path(i: int) -> str:
    return f"capture_{i}.safetensors"


def default_r(L: int) -> list:
    """The whole ladder: every block output and the post-norm final."""
    return list(range(L + 1)) + [FINAL_POST]


WRITER = Writer("safetensors", write, sample_path, convention="r", default_r=default_r, header_metadata=True)
FORMAT = CaptureFormat(NAME, ("torch", "safetensors", "numpy"), match, read, writer=WRITER, samples=read_all)
