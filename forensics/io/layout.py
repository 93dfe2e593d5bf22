"""One layout resolver: every way people save hidden states, turned into an ordered list of ``[T, H]`` slots.

Accepted (one sample per file; ``T`` tokens, ``H`` hidden size, ``k`` captured layers):

* a tensor ``[T, H]`` or ``[1, T, H]`` (one slot);
* a stack ``[k, T, H]``, ``[T, k, H]`` (speculators), ``[k, 1, T, H]`` (``torch.stack(out.hidden_states)``, the
  whole transformers tuple ``[L+1, 1, T, H]`` included) or ``[1, T, k, H]`` / ``[1, k, T, H]``;
* a list or tuple of ``[T, H]`` / ``[1, T, H]`` tensors (transformers' ``output.hidden_states``);
* a dict of named tensors or stacks, with the token ids under ``input_ids`` / ``token_ids`` / ``ids``;
* a **batch**: ``[B, T]`` token ids with ``[k, B, T, H]`` (``torch.stack(out.hidden_states)``), ``[B, T, H]`` per
  slot, or transformers' tuple of ``[B, T, H]``: :func:`resolve_samples` splits it into B samples (``FILE#b``).
  ``attention_mask`` ``[B, T]`` removes each sample's pad rows (left or right padding) before any check; without
  it, the run of the pad id at the padded end (the file's ``pad_token_id`` when it has one, else the id that ends
  the shorter samples in a run of two or more) is removed and named as padding (``Resolved.padding``), never
  judged as the sample's own rows.

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
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import ForensicsError
from forensics.io.limits import records_per_file

ID_KEYS = ("input_ids", "token_ids", "ids", "prompt_token_ids")
MASK_KEYS = ("loss_mask", "attention_mask_loss")
ATTENTION_KEYS = ("attention_mask",)  # a batch's padding mask (1 = a real token): pad rows are removed
PAD_KEYS = ("pad_token_id", "pad_id")  # the tokenizer's pad id saved beside a batch without its mask
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
    sample: int | None = None  # which sample of a batch (None: the object holds one sample)
    samples: int = 1  # how many samples the object holds
    padding: dict | None = None  # pad rows removed without a mask: {"rows": [first, last] of the file, "id", "side"}


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
    if t is None:
        return None
    t = _as_tensor(t, path, name)
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
    a = _as_tensor(v0, path, k0).reshape(-1)  # a [B, T] batch's ids too: the values are compared, not the shape
    for k, v in values[1:]:
        b = _as_tensor(v, path, k).reshape(-1)
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
        if not x.dtype.isnative:  # '>f4' (saved on a big-endian machine or by hand): torch takes native order only
            x = x.astype(x.dtype.newbyteorder("="))  # a copy, the file's own size

        with warnings.catch_warnings():  # a read-only memory map: every reader here only reads
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(x)
    return x


def _host(t: Any, path: str) -> Any:
    """``t`` cut from autograd, on the CPU (a notebook's states are often on a GPU: copied once; a CPU or
    memory-mapped tensor is returned as is). A sparse tensor or one on the ``meta`` device (shapes, no values)
    is one error."""
    import torch

    if t.layout != torch.strided:
        raise ForensicsError(f"a {str(t.layout).replace('torch.', '')} tensor of shape {list(t.shape)}: hidden "
                             "states are read as dense tensors (.to_dense())", path=path)
    if t.device.type == "meta":
        raise ForensicsError(f"a tensor of shape {list(t.shape)} on the meta device holds no values (a model "
                             "loaded with device_map='meta' or init_empty_weights?)", path=path)
    return t.detach().cpu()


def _detached(obj: Any, memo: dict[int, Any] | None = None, path: str = "<in memory>") -> Any:
    """Tensors of ``obj`` (a tensor, list, tuple or dict) cut from autograd and on the CPU (:func:`_host`):
    states taken from a forward run without ``torch.no_grad()``, or left on a GPU, read like any others.

    Each container is visited once (``memo``, by identity): a pickle can share one list under itself 40 times
    (``L = [L, L]``, 11 KB on disk), which a plain walk visits 2^40 times."""
    if _is_tensor(obj):
        return _host(obj, path)
    if not isinstance(obj, (list, tuple, dict)):
        return obj
    memo = {} if memo is None else memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, dict):
        out: Any = {}
        memo[id(obj)] = out
        out.update((k, _detached(v, memo, path)) for k, v in obj.items())
    else:
        out = []
        memo[id(obj)] = out
        out.extend(_detached(x, memo, path) for x in obj)
    return out


def _metadata_list(key: str, v: Any) -> bool:
    """A dict entry that is a non-empty list of plain numbers or strings (layer ids, names saved beside the states):
    metadata, not a list of states."""
    return bool(key) and isinstance(v, (list, tuple)) and bool(v) and all(
        isinstance(x, (int, float, str, bool)) or x is None for x in v)


UNUSED_METADATA = "is shown, not used as evidence or as a claim (state a claim with --layers)"


def _metadata_note(key: str, v: Any) -> str:
    shown = list(v[:8]) + (["..."] if len(v) > 8 else [])
    return f"{key} = {shown} {UNUSED_METADATA}"


def unused_metadata(notes: list[str]) -> list[str]:
    """The notes of a capture's metadata lists (``layer_ids = [...]`` saved beside the states) that were read as
    neither evidence nor a claim: a view says them where it says that nothing is claimed."""
    return [n for n in notes if n.endswith(UNUSED_METADATA)]


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _shape(x: Any) -> str:
    return f"{list(x.shape)} {str(x.dtype).replace('torch.', '')}" if hasattr(x, "shape") else type(x).__name__


def ambiguous(path: str, found: str, why: str) -> ForensicsError:
    """The one error of a layout nothing decides: shapes found, layouts accepted, a two-line re-save recipe."""
    return ForensicsError(f"cannot tell which axis is the layers and which the tokens: {why}; found {found}; "
                          f"accepted layouts: {', '.join(ACCEPTED)}; pass the token ids (input_ids= in "
                          f"Python, hsf fingerprint/hsf report --ids FILE) or {RECIPE}", path=path)


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


def _entries(obj: Any, path: str) -> tuple[Any, Any, Any, Any, Any, list[tuple[str, Any]]]:
    """``(obj, ids, loss mask, attention mask, pad id, [(key, value)])`` of an object as given."""
    obj = _detached(to_torch(obj), path=path)
    file_ids = mask = attn = pad = None
    if isinstance(obj, dict):
        obj = {k: to_torch(v) for k, v in obj.items()}
        file_ids = stored_ids(obj.get, obj, path)
        mask = next((obj[k] for k in MASK_KEYS if k in obj and obj[k] is not None), None)
        attn = next((obj[k] for k in ATTENTION_KEYS if k in obj and obj[k] is not None), None)
        pad = next((obj[k] for k in PAD_KEYS if k in obj and obj[k] is not None), None)
        skip = ID_KEYS + MASK_KEYS + ATTENTION_KEYS + PAD_KEYS
        items = [(str(k), v) for k, v in obj.items() if k not in skip]
    elif isinstance(obj, (list, tuple)):
        items = [("", obj)]
    else:
        items = [("tensor", obj)]
    return obj, file_ids, mask, attn, pad, items


def _as_tensor(t: Any, path: str, name: str):
    import torch

    t = to_torch(t)
    if not isinstance(t, torch.Tensor):
        try:
            t = torch.as_tensor(t)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise ForensicsError(f"{name} is not a tensor or list of ints ({type(t).__name__})", path=path) from None
    t = _host(t, path)
    check_storage(t, path, name)
    return t


def batch_shape(obj: Any, path: str, input_ids: Any = None, attention_mask: Any = None) -> tuple[int, int] | None:
    """``(B, T)`` when ``obj`` (or the ids / mask given beside it) holds ``[B, T]`` token ids with B > 1, or an
    ``attention_mask`` with a pad row; None for one sample."""
    _, file_ids, _, attn, _, _ = _entries(obj, path)
    for name, t in (("input_ids", input_ids), ("input_ids", file_ids), ("attention_mask", attention_mask),
                    ("attention_mask", attn)):
        if t is None:
            continue
        t = _as_tensor(t, path, name)
        if t.dim() == 2 and (t.shape[0] > 1 or name == "attention_mask"):
            return int(t.shape[0]), int(t.shape[1])
    return None


def resolve_samples(obj: Any, path: str, input_ids: Any = None, attention_mask: Any = None) -> list[Resolved]:
    """Every sample of ``obj``: one :class:`Resolved` for one sample, B for a batch (``[B, T]`` ids with
    ``[k, B, T, H]``, ``[B, T, H]`` per slot or a tuple of ``[B, T, H]``), each cut to its real rows.

    Example:
        >>> import torch
        >>> hs = torch.randn(3, 2, 5, 8)                                   # [k, B, T, H]
        >>> ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
        >>> mask = (torch.arange(5) < torch.tensor([[3], [5]])).long()     # right padding
        >>> [r.parts[0].tensor.shape[0] for r in resolve_samples(
        ...     {"input_ids": ids, "attention_mask": mask, "hidden_states": hs}, "x.pt")]
        [3, 5]
    """
    bt = batch_shape(obj, path, input_ids, attention_mask)
    if bt is None:
        return [resolve(obj, path, input_ids, attention_mask)]
    return _resolve_batch(obj, path, bt, input_ids, attention_mask)


def resolve(obj: Any, path: str, input_ids: Any = None, attention_mask: Any = None) -> Resolved:
    """The slots of ``obj`` (tensor, array, list, tuple or dict) in stored order.

    ``input_ids`` (ids given from outside the file) decide ambiguous axes when the object carries none; a
    one-sample ``[T]`` ``attention_mask`` (given, or saved beside the states) cuts its pad rows as a batch's does.
    """
    notes: list[str] = []
    obj, file_ids, mask, attn, _, items = _entries(obj, path)
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
        if _metadata_list(key, v):  # e.g. aux_hidden_state_layer_ids = [3, 16, 28] saved beside the states
            notes.append(_metadata_note(key, v))
            continue
        if isinstance(v, (list, tuple)):
            parts += _list_parts(key, v, path)
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
        tensors = [v for _, v in items if _is_tensor(v)]
        ids_only = not any(t.is_floating_point() or t.dim() > 2 for t in tensors) and (bool(tensors)
                                                                                        or file_ids is not None)
        # token ids saved apart (README: `--ids ids.pt`) and then found in a folder: say what they are for
        hint = ("; integer tensors only: a file of token ids? give it to the capture saved without them "
                "(--ids FILE) and keep it out of the folders given as captures") if ids_only else ""
        raise ForensicsError(f"no floating-point hidden-state tensors found ({', '.join(skipped[:8]) or 'nothing'})"
                             f"{hint}; accepted layouts: {', '.join(ACCEPTED)}", path=path)
    if skipped:
        notes.append(f"skipped entries that are not float hidden states: {skipped[:8]}")
    parts, ids, mask = _cut_one(attention_mask if attention_mask is not None else attn, parts, ids, mask, path, notes)
    key_layers = _key_layers(obj, items, parts, notes)
    layout = layouts[0] if len(set(layouts)) == 1 else ", ".join(layouts)
    return Resolved(parts, ids, mask, layout, notes, key_layers)


def _list_elements(key: str, v: list | tuple, path: str) -> Iterator[tuple[str, Any]]:
    """``(name, element as torch)`` of a list of per-layer states, one at a time (``key[i]``, or ``[i]`` for a bare
    list); an empty list is an error: no layers were captured."""
    if not v:
        raise ForensicsError(f"'{key or 'the list'}' is an empty list (no layers were captured)", path=path)
    for i, t in enumerate(v):
        yield (f"{key}[{i}]" if key else f"[{i}]"), to_torch(t)


def _list_parts(key: str, v: list | tuple, path: str) -> list[Part]:
    """One part per element of a list of per-layer ``[T, H]`` (or ``[1, T, H]``) tensors."""
    parts = []
    for nm, t in _list_elements(key, v, path):
        if not _is_tensor(t):
            raise ForensicsError(f"{nm} is {type(t).__name__}, not a tensor; accepted layouts: "
                                 f"{', '.join(ACCEPTED)}", path=path)
        if t.dim() not in (2, 3) or (t.dim() == 3 and t.shape[0] != 1):
            raise ForensicsError(f"list element {nm} has shape {list(t.shape)}; a list holds one [T, H] or "
                                 f"[1, T, H] tensor per layer; {RECIPE}", path=path)
        parts.append(Part(nm, key or "list", t[0] if t.dim() == 3 else t))
    return parts


def _cut_one(amask: Any, parts: list[Part], ids: Any, lmask: Any, path: str,
             notes: list[str]) -> tuple[list[Part], Any, Any]:
    """One sample's parts, ids and loss mask cut to the rows its ``[T]`` (or ``[1, T]``) attention mask keeps:
    the mask is checked as a batch's is (0/1 values, its length T, at least one real token); no mask: as given."""
    if amask is None:
        return parts, ids, lmask
    T = int(parts[0].tensor.shape[0])
    amask = _as_tensor(amask, path, "attention_mask")
    if amask.dim() == 2 and amask.shape[0] == 1:
        amask = amask[0]
    if amask.dim() != 1 or int(amask.shape[0]) != T:
        raise ForensicsError(f"attention_mask has shape {list(amask.shape)} but the hidden states hold {T} tokens",
                             path=path)
    keep, note = _mask_keep(_mask01(amask, path), T, path, 0)
    if note is None:
        return parts, ids, lmask
    notes.append(note)
    parts = [Part(p.name, p.key, p.tensor[keep]) if int(p.tensor.shape[0]) == T else p for p in parts]
    cut = (lambda t: t[keep] if t is not None and t.dim() == 1 and int(t.shape[0]) == T else t)
    return parts, cut(ids), cut(_as_tensor(lmask, path, "loss_mask") if lmask is not None else None)


def _mask01(amask: Any, path: str) -> Any:
    """A 0/1 attention mask as booleans; a one-line error for other values (an additive mask, scores)."""
    odd = ~((amask == 0) | (amask == 1))
    if bool(odd.any()):  # an additive mask (0 keep, -inf or the dtype's min pad) read as != 0 inverts it
        seen = list(dict.fromkeys(str(v) for v in amask[odd].reshape(-1)[:256].tolist()))[:4]
        raise ForensicsError(f"attention_mask holds values other than 0 and 1 ({', '.join(seen)}): an additive "
                             "mask (0 = keep, a large negative = pad) or scores? save the 0/1 mask "
                             "(1 = real token)", path=path)
    return amask != 0


def _mask_keep(row: Any, T: int, path: str, b: int) -> tuple[Any, str | None]:
    """``(rows kept, note)`` for one sample's boolean mask row (note None: nothing cut)."""
    import torch

    rows = torch.nonzero(row).reshape(-1)
    if rows.numel() == 0:
        raise ForensicsError(f"sample {b}: attention_mask marks no real token", path=path)
    first, last = int(rows[0]), int(rows[-1])
    keep: Any = slice(first, last + 1) if last - first + 1 == rows.numel() else rows
    cut = T - int(rows.numel())
    if not cut:
        return slice(None), None
    side = "right" if first == 0 else "left" if last == T - 1 else "both ends"
    if not isinstance(keep, slice):  # zeros between real tokens: not padding
        side = f"{last - first + 1 - int(rows.numel())} of them between real tokens, not padding"
        return keep, f"{cut} row{'s' if cut != 1 else ''} removed by attention_mask ({side})"
    return keep, f"{cut} pad row{'s' if cut != 1 else ''} removed by attention_mask ({side} padding)"


def _key_layers(obj: Any, items: list, parts: list[Part], notes: list[str]) -> dict[int, int]:
    key_layers: dict[int, int] = {}
    if isinstance(obj, dict) and len(items) > 1:
        key_layers = {i: n for i, p in enumerate(parts) if (n := _key_layer(p.key)) is not None}
        if key_layers:
            notes.append(f"keys name layers {list(key_layers.values())} in the file's own numbering: shown as "
                         "names, not used as evidence (check them with --layers)")
    return key_layers


def _batch_views(key: str, v: Any, B: int, T: int, path: str) -> tuple[list[tuple[str, Any]], str] | None:
    """``([(name, [B, T, H] view)], layout)`` of one entry of a batch; None for an entry that holds no states."""
    if _metadata_list(key, v):
        return None
    if isinstance(v, (list, tuple)):
        out = []
        for nm, t in _list_elements(key, v, path):
            if not _is_tensor(t) or t.dim() != 3 or tuple(t.shape[:2]) != (B, T):
                raise ForensicsError(f"list element {nm} has shape {_shape(t)}; with [{B}, {T}] token ids a list "
                                     f"holds one [B, T, H] = [{B}, {T}, H] tensor per layer", path=path)
            check_storage(t, path, nm)
            out.append((nm, t))
        return out, "list of [B, T, H]"
    if not _is_tensor(v) or not v.is_floating_point() or v.dim() < 3:
        return None
    check_storage(v, path, key)
    shape = tuple(int(x) for x in v.shape)
    if v.dim() == 3 and shape[:2] == (B, T):
        return [(key, v)], "[B, T, H]"
    if v.dim() == 4:
        kbth = shape[1:3] == (B, T)
        bkth = shape[0] == B and shape[2] == T
        if kbth and bkth and shape[0] != shape[1]:
            raise ForensicsError(f"{key} {list(shape)} reads as [k, B, T, H] and as [B, k, T, H] with [{B}, {T}] "
                                 "token ids; re-save as torch.stack(out.hidden_states) ([k, B, T, H])", path=path)
        if kbth:
            return [(f"{key}[{i}]", v[i]) for i in range(shape[0])], "[k, B, T, H]"
        if bkth:
            return [(f"{key}[:, {i}]", v[:, i]) for i in range(shape[1])], "[B, k, T, H]"
    raise ForensicsError(f"{key} has shape {list(shape)}, which is no batch layout for [{B}, {T}] token ids "
                         "(accepted: [k, B, T, H], [B, k, T, H], [B, T, H] per slot, a list of [B, T, H])", path=path)


def _edge_run(row: Any, side: str) -> tuple[int, int]:
    """``(id, length)`` of the run of one id at the ``side`` end of a 1-D id row."""
    vals = row.tolist() if side == "left" else row.flip(0).tolist()
    n = 1
    while n < len(vals) and vals[n] == vals[0]:
        n += 1
    return int(vals[0]), n


def guess_padding(ids: Any, pad_id: int | None) -> tuple[str, int] | None:
    """``(side, pad id)`` of a batch saved without its attention mask, or None when no padding is seen.

    The pad id is the one saved with the batch, else the id that ends (or starts) the samples in the longest run:
    padding is one id repeated at one end, and in a batch of different lengths at least one sample carries
    more than one pad row. Rows named so are removed and said to be padding; they are never taken as evidence.
    """
    best: tuple[int, str, int] | None = None
    for side in ("right", "left"):
        edge = [_edge_run(r, side) for r in ids]
        cand = [(n, side, v) for v, n in edge if (pad_id is None or v == pad_id)]
        if pad_id is None:  # a guess: a run of 2+ rows, and some sample (the longest) ends in another id
            cand = [c for c in cand if c[0] >= 2 and any(v != c[2] for v, _ in edge)]
        if cand:
            top = max(cand)
            if best is None or top[0] > best[0]:
                best = top
    return None if best is None else (best[1], best[2])


def _resolve_batch(obj: Any, path: str, bt: tuple[int, int], input_ids: Any,  # noqa: C901
                   attention_mask: Any) -> list[Resolved]:
    import torch

    B, T = bt
    records_per_file(B, path)
    obj, file_ids, lmask, attn, pad, items = _entries(obj, path)
    ids = None
    for name, t in (("input_ids", file_ids), ("input_ids", input_ids)):
        if t is None:
            continue
        t = _as_tensor(t, path, name)
        if t.dim() == 1 and B == 1:
            t = t[None]
        if tuple(t.shape) != (B, T):
            raise ForensicsError(f"{name} has shape {list(t.shape)} but the batch is [{B}, {T}]", path=path)
        if t.is_floating_point() or t.dtype == torch.bool:
            raise ForensicsError(f"token ids must be integers, found {t.dtype}", path=path)
        if ids is not None and not bool((ids == t.long()).all()):
            raise ForensicsError("the token ids given differ from the input_ids stored in the file", path=path)
        ids = t.long()
    amask = attention_mask if attention_mask is not None else attn
    if amask is not None:
        amask = _as_tensor(amask, path, "attention_mask")
        if amask.dim() == 1 and B == 1:
            amask = amask[None]
        if tuple(amask.shape) != (B, T):
            raise ForensicsError(f"attention_mask has shape {list(amask.shape)} but the batch is [{B}, {T}]",
                                 path=path)
        amask = _mask01(amask, path)
    if lmask is not None:
        lmask = _as_tensor(lmask, path, "loss_mask")
        if lmask.dim() != 2 or tuple(lmask.shape) != (B, T):
            raise ForensicsError(f"loss_mask has shape {list(lmask.shape)} but the batch is [{B}, {T}]", path=path)
    pad_id = None
    if pad is not None:
        try:
            pad_id = int(_as_tensor(pad, path, "pad_token_id").reshape(-1)[0])
        except (IndexError, ValueError, RuntimeError):
            raise ForensicsError("pad_token_id is not one integer", path=path) from None
    views: list[tuple[str, str, Any]] = []  # (name, key, [B, T, H])
    layouts: list[str] = []
    skipped: list[str] = []
    for key, v in items:
        got = _batch_views(key, v, B, T, path)
        if got is None:
            if v is not None and not isinstance(v, (int, float, str, bool)):
                skipped.append(f"{key}: {_shape(v)}")
            continue
        views += [(nm, key or "list", t) for nm, t in got[0]]
        layouts.append(got[1])
    if not views:
        raise ForensicsError(f"no floating-point hidden-state tensors of a [{B}, {T}] batch found "
                             f"({', '.join(skipped[:8]) or 'nothing'})", path=path)
    layout = layouts[0] if len(set(layouts)) == 1 else ", ".join(layouts)
    padding = guess_padding(ids, pad_id) if ids is not None and amask is None else None
    out: list[Resolved] = []
    for b in range(B):
        notes = [f"sample {b} of {B} of a {layout} batch"]
        keep: Any = slice(None)
        pad_rows = None
        if amask is not None:
            keep, note = _mask_keep(amask[b], T, path, b)
            if note is not None:
                notes.append(note)
        elif padding is not None and ids is not None:
            side, pid = padding
            v, n = _edge_run(ids[b], side)
            if v == pid and n < T:
                pad_rows = [T - n, T - 1] if side == "right" else [0, n - 1]
                keep = slice(0, T - n) if side == "right" else slice(n, T)
                notes.append(f"rows {pad_rows[0]}–{pad_rows[1]} hold the pad id {pid} ({side} padding, no "
                             "attention_mask saved): removed as padding, not judged")
        parts = [Part(nm, key, t[b][keep]) for nm, key, t in views]
        res = Resolved(parts, None if ids is None else ids[b][keep], None if lmask is None else lmask[b][keep],
                       layout, notes, sample=b, samples=B)
        res.key_layers = _key_layers(obj, items, parts, res.notes)
        if pad_rows is not None:
            res.padding = {"rows": pad_rows, "id": padding[1] if padding else None,
                           "side": padding[0] if padding else None}
        out.append(res)
    if skipped:
        out[0].notes.append(f"skipped entries that are not float hidden states: {skipped[:8]}")
    return out
