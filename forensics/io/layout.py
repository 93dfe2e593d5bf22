"""One layout resolver: every way people save hidden states, turned into an ordered list of ``[T, H]`` slots.

Accepted (one sample per file; ``T`` tokens, ``H`` hidden size, ``k`` captured layers):

* a tensor ``[T, H]`` or ``[1, T, H]`` (one slot);
* a stack ``[k, T, H]``, ``[T, k, H]`` (speculators), ``[k, 1, T, H]`` (``torch.stack(out.hidden_states)``, the
  whole transformers tuple ``[L+1, 1, T, H]`` included) or ``[1, T, k, H]`` / ``[1, k, T, H]``;
* a list or tuple of ``[T, H]`` / ``[1, T, H]`` tensors (transformers' ``output.hidden_states``);
* a dict of named tensors or stacks, with the token ids under ``input_ids`` / ``token_ids`` / ``ids``.

Where a stack's first two axes could be either ``k`` or ``T``, the token ids' length decides; where nothing
decides, one :class:`ForensicsError` shows the shapes found, the layouts accepted and how to re-save.

Key names like ``layer_3``, ``hidden_states.16`` or ``h3`` are the user's own numbering (transformers' index,
a block id, or something else): they are shown as the slot's name and listed in a note, never used as evidence.

Example:
    >>> import torch
    >>> res = resolve({"input_ids": torch.arange(5), "hidden_states": torch.randn(3, 5, 8)}, "x.pt")
    >>> res.layout, [p.name for p in res.parts]
    ('[k, T, H]', ['hidden_states[0]', 'hidden_states[1]', 'hidden_states[2]'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import ForensicsError

ID_KEYS = ("input_ids", "token_ids", "ids", "prompt_token_ids")
MASK_KEYS = ("loss_mask", "attention_mask_loss")
ACCEPTED = ("[T, H]", "[1, T, H]", "[k, T, H]", "[T, k, H]", "[k, 1, T, H]", "[1, T, k, H]",
            "a list/tuple of [T, H] or [1, T, H]", "a dict of named [T, H] tensors")
RECIPE = ("re-save one sample per file with its token ids, e.g.\n"
          "  hs = torch.stack([out.hidden_states[i][0] for i in layers])      # [k, T, H]\n"
          "  torch.save({\"input_ids\": ids[0], \"hidden_states\": hs}, \"capture.pt\")")
# a key ending in a layer number: layer_3, layers.3, hidden_states.16, h3, hs_3, L28, block-5, 12
KEY_LAYER = re.compile(r"(?:(?:^|[._\-/])(?:layers?|hidden_states?|h|hs|l|blocks?)[._\-\[]?|^)(\d+)\]?$", re.I)


@dataclass
class Part:
    """One resolved slot: its ``[T, H]`` tensor (a view), how the file names it, and what the format claims."""

    name: str
    key: str
    tensor: Any
    claimed: str | None = None


@dataclass
class Resolved:
    """The slots of one sample in stored order, its token ids and loss mask, the layout found, notes."""

    parts: list[Part]
    input_ids: Any
    loss_mask: Any
    layout: str
    notes: list[str] = field(default_factory=list)
    key_layers: dict[int, int] = field(default_factory=dict)  # slot index -> the number its key names


def check_storage(t: Any, path: str, name: str) -> None:
    """Refuse a view that claims more elements than its storage holds (``expand``: stride 0, or an
    overlapping ``as_strided``): ``torch.save`` keeps views, so 4 stored bytes can claim 8·10^11 elements,
    and every pass over them would take minutes."""
    import torch

    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return
    stored = t.untyped_storage().nbytes()
    if t.numel() * t.element_size() > stored:
        raise ForensicsError(
            f"expanded/strided tensor claims {t.numel()} elements (shape {list(t.shape)}, strides "
            f"{list(t.stride())}) but its storage holds {stored} bytes; store the data itself "
            "(.contiguous()) to read it", path=path, slot=name)


def ids_1d(t: Any, path: str, name: str):
    """Token ids / loss mask as a 1-D tensor (leading batch dim of 1 squeezed), or None."""
    import torch

    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        try:
            t = torch.as_tensor(t)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise ForensicsError(f"{name} is not a tensor or list of ints ({type(t).__name__})", path=path) from None
    check_storage(t, path, name)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1:
        raise ForensicsError(f"{name} must be 1-D, found shape {list(t.shape)}", path=path)
    return t


def stored_ids(get: Any, keys: Any, path: str) -> Any:
    """The token ids a file stores under the first of ``ID_KEYS`` it has (``get(key)`` reads one), or None. A
    file that stores ids under two keys (``input_ids`` and ``token_ids``) that disagree is one line: which of them
    are the capture's tokens cannot be told, and reading one silently would pair rows with the wrong tokens."""
    import torch

    present = [k for k in ID_KEYS if k in keys]
    values = [(k, get(k)) for k in present]
    values = [(k, v) for k, v in values if v is not None]
    if len(values) < 2:
        return values[0][1] if values else None
    k0, v0 = values[0]
    a = ids_1d(to_torch(v0), path, k0)
    for k, v in values[1:]:
        b = ids_1d(to_torch(v), path, k)
        same = a.numel() == b.numel() and not a.is_floating_point() and not b.is_floating_point() \
            and bool(torch.equal(a.long(), b.long()))
        if not same:
            pairs = enumerate(zip(a.tolist(), b.tolist(), strict=False))
            at = next((i for i, (x, y) in pairs if x != y), min(a.numel(), b.numel()))
            raise ForensicsError(f"the file stores token ids twice and they disagree: {k0} ({a.numel()} ids) and {k} "
                                 f"({b.numel()} ids) differ from position {at}; which are this capture's tokens "
                                 "cannot be told", path=path)
    return v0


def to_torch(x: Any) -> Any:
    """A numpy array as a torch tensor (shared memory); anything else unchanged."""
    if type(x).__module__ == "numpy" and type(x).__name__ in ("ndarray", "memmap"):
        import torch

        if x.dtype.kind not in "fiub":
            return x  # object/str arrays are not states; the caller names them
        import warnings

        with warnings.catch_warnings():  # a read-only memory map: every reader here only reads
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(x)
    return x


def _detached(obj: Any) -> Any:
    """Tensors of ``obj`` (a tensor, list, tuple or dict) cut from autograd: states taken from a forward run
    without ``torch.no_grad()`` read like any others (views, no copy)."""
    if _is_tensor(obj):
        return obj.detach()
    if isinstance(obj, (list, tuple)):
        return [_detached(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    return obj


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _shape(x: Any) -> str:
    return f"{list(x.shape)} {str(x.dtype).replace('torch.', '')}" if hasattr(x, "shape") else type(x).__name__


def ambiguous(path: str, found: str, why: str) -> ForensicsError:
    """The one error of a layout nothing decides: shapes found, layouts accepted, a two-line re-save recipe."""
    return ForensicsError(f"cannot tell which axis is the layers and which the tokens: {why}; found {found}; "
                          f"accepted layouts: {', '.join(ACCEPTED)}; pass the token ids (--ids FILE, or "
                          f"input_ids=) or {RECIPE}", path=path)


def n_tokens(ids: Any) -> int | None:
    return None if ids is None else int(ids.numel())


def split_stack(t: Any, name: str, path: str, n_ids: int | None) -> tuple[list[tuple[str, Any]], str]:
    """``(named [T, H] views, layout)`` of one tensor in any accepted layout."""
    check_storage(t, path, name)
    shape = list(t.shape)
    if t.dim() == 2:
        return [(name, t)], "[T, H]"
    if t.dim() == 4:
        if shape[1] == 1 and shape[0] != 1:
            return [(f"{name}[{i}]", t[i, 0]) for i in range(shape[0])], "[k, 1, T, H]"
        if shape[0] == 1:
            parts, layout = split_stack(t[0], name, path, n_ids)
            return parts, "[1, " + layout[1:]
        raise ForensicsError(f"{name} {shape} holds more than one sequence (a batch axis of {shape[1]} or "
                             f"{shape[0]}); one sample per file is read (accepted layouts: {', '.join(ACCEPTED)}); "
                             f"{RECIPE}", path=path)
    if t.dim() != 3:
        raise ForensicsError(f"tensor {name} has shape {shape}; accepted layouts: {', '.join(ACCEPTED)}", path=path)
    a, b = shape[0], shape[1]
    if a == 1 and (n_ids is None or n_ids == b):
        return [(name, t[0])], "[1, T, H]"
    if n_ids is None:
        raise ambiguous(path, f"{name} {shape} and no token ids", "a 3-D stack's first two axes are k and T in "
                        "either order")
    if b == n_ids and a != n_ids:
        return [(f"{name}[{i}]", t[i]) for i in range(a)], "[k, T, H]"
    if a == n_ids and b != n_ids:
        return [(f"{name}[:, {i}]", t[:, i]) for i in range(b)], "[T, k, H]"
    if a == b == n_ids:
        raise ambiguous(path, f"{name} {shape} with {n_ids} token ids", "k equals T")
    raise ForensicsError(f"length mismatch: {n_ids} token ids but {name} has shape {shape} (neither of the "
                         "first two axes has that length)", path=path)


def _key_layer(key: str) -> int | None:
    m = KEY_LAYER.search(key)
    return int(m.group(1)) if m else None


def resolve(obj: Any, path: str, input_ids: Any = None) -> Resolved:
    """The slots of ``obj`` (tensor, array, list, tuple or dict) in stored order.

    ``input_ids`` (ids given from outside the file) decide ambiguous axes when the object carries none.
    """
    obj = _detached(to_torch(obj))
    notes: list[str] = []
    file_ids = mask = None
    if isinstance(obj, dict):
        obj = {k: to_torch(v) for k, v in obj.items()}
        file_ids = stored_ids(obj.get, obj, path)
        mask = next((obj[k] for k in MASK_KEYS if k in obj and obj[k] is not None), None)
        items = [(str(k), v) for k, v in obj.items() if k not in ID_KEYS + MASK_KEYS]
    elif isinstance(obj, (list, tuple)):
        items = [("", obj)]
    else:
        items = [("tensor", obj)]
    ids = ids_1d(file_ids, path, "input_ids") if file_ids is not None else None
    if input_ids is not None:
        given = ids_1d(to_torch(input_ids), path, "input_ids")
        if ids is not None and (given.numel() != ids.numel() or not bool((given.long() == ids.long()).all())):
            raise ForensicsError("the token ids given differ from the input_ids stored in the file", path=path)
        ids = given if ids is None else ids
    n_ids = n_tokens(ids)
    parts: list[Part] = []
    layouts: list[str] = []
    skipped: list[str] = []
    for key, v in items:
        if isinstance(v, (list, tuple)):
            if not v:
                raise ForensicsError(f"'{key or 'the list'}' is an empty list (no layers were captured)", path=path)
            for i, t in enumerate(v):
                t = to_torch(t)
                nm = f"{key}[{i}]" if key else f"[{i}]"
                if not _is_tensor(t):
                    raise ForensicsError(f"{nm} is {type(t).__name__}, not a tensor; accepted layouts: "
                                         f"{', '.join(ACCEPTED)}", path=path)
                if t.dim() not in (2, 3) or (t.dim() == 3 and t.shape[0] != 1):
                    raise ForensicsError(f"list element {nm} has shape {list(t.shape)}; a list holds one [T, H] or "
                                         f"[1, T, H] tensor per layer; {RECIPE}", path=path)
                parts.append(Part(nm, key or "list", t[0] if t.dim() == 3 else t))
            layouts.append("list of [1, T, H]" if to_torch(v[0]).dim() == 3 else "list of [T, H]")
            continue
        if not _is_tensor(v):
            if v is not None and not isinstance(v, (int, float, str, bool)):
                skipped.append(f"{key}: {type(v).__name__}")
            continue
        if not v.is_floating_point() or v.dim() < 2:
            skipped.append(f"{key}: {_shape(v)}")
            continue
        views, layout = split_stack(v, key, path, n_ids)
        parts += [Part(nm, key, t) for nm, t in views]
        layouts.append(layout)
    if not parts:
        raise ForensicsError(f"no floating-point hidden-state tensors found ({', '.join(skipped[:8]) or 'nothing'});"
                             f" accepted layouts: {', '.join(ACCEPTED)}", path=path)
    if skipped:
        notes.append(f"skipped entries that are not float hidden states: {skipped[:8]}")
    key_layers = {}
    if isinstance(obj, dict) and len(items) > 1:
        key_layers = {i: n for i, p in enumerate(parts) if (n := _key_layer(p.key)) is not None}
        if key_layers:
            notes.append(f"keys name layers {list(key_layers.values())} in the file's own numbering: shown as "
                         "names, not used as evidence (check them with --layers)")
    layout = layouts[0] if len(set(layouts)) == 1 else ", ".join(layouts)
    return Resolved(parts, ids, mask, layout, notes, key_layers)
