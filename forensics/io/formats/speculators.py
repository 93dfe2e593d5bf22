"""speculators current format: ``hidden_states/hs_{i}.safetensors`` = ``{hidden_states [seq, k, H],
token_ids [seq]}`` (speculators ``ArrowDataset._get_raw_data``, #353 onward). The reader feeds
``hidden_states[:, :-1].flatten(1)`` to the draft and ``hidden_states[:, -1]`` as the target.

vLLM's ``ExampleHiddenStatesConnector`` (806715ec) stacks ``[k, seq, H]`` instead; the token axis is
found by matching ``len(token_ids)``, and the layout found is recorded in the provenance.
"""

from __future__ import annotations

import os

from forensics.errors import ForensicsError
from forensics.io.formats._common import build, lazy_slot, provenance
from forensics.io.formats._io import FLOAT_DTYPES, SAFETENSORS_DTYPES, SafetensorsFile
from forensics.io.formats.base import CaptureFormat, Dataset, Request, Sample, Writer
from forensics.io.layout import stored_ids
from forensics.layers import FINAL_POST

NAME = "speculators"


def _stack_shape(sf: SafetensorsFile) -> tuple[int, ...]:
    """Shape of ``hidden_states`` with a leading batch dim of 1 dropped from a 4-D ``[1, seq, k, H]``."""
    shape = sf.shape("hidden_states")
    return shape[1:] if len(shape) == 4 and shape[0] == 1 else shape


def _n_ids(sf: SafetensorsFile) -> int | None:
    if "token_ids" not in sf.keys():
        return None
    n = 1
    for d in sf.shape("token_ids"):
        n *= d
    return n


def match(sf: SafetensorsFile) -> bool:
    """A 3-D ``hidden_states`` stack; ``[1, seq, H]`` (one sequence with a batch dim) is left to generic."""
    if "hidden_states" not in sf.keys():
        return False
    if "token_ids" not in sf.keys() and any(k in sf.keys() for k in ("input_ids", "ids")):
        return False  # a user's own {input_ids, hidden_states} file: the generic layout resolver reads it
    shape = _stack_shape(sf)
    if len(shape) != 3:
        return False
    n_ids = _n_ids(sf)
    return not (shape[0] == 1 and (n_ids is None or shape[1] == n_ids) and len(sf.shape("hidden_states")) == 3)


def read(sf: SafetensorsFile, req: Request):
    import torch

    path, input_ids = req.path, req.input_ids
    shape = _stack_shape(sf)
    batched = len(sf.shape("hidden_states")) == 4
    ids = stored_ids(sf.get, sf.keys(), path) if "token_ids" in sf.keys() else None  # another id key must agree
    n_ids = _n_ids(sf)
    if ids is None and input_ids is not None:  # ids given from outside the file (--ids) decide the token axis
        ids, n_ids = input_ids, int(input_ids.numel())
    a, b, h = shape
    notes = []
    if n_ids is not None and a == n_ids and b != n_ids:
        layout, seq, k, transposed = "[seq, k, H]", a, b, False
    elif n_ids is not None and b == n_ids and a != n_ids:
        layout, seq, k, transposed = "[k, seq, H] (vLLM connector stack order; transposed on read)", b, a, True
    elif n_ids is not None and a == n_ids and b == n_ids:
        layout, seq, k, transposed = "[seq, k, H] (ambiguous: k == seq; assumed speculators order)", a, b, False
        notes.append("token axis ambiguous because k == seq; assumed [seq, k, H]")
    elif n_ids is None:
        layout, seq, k, transposed = "[seq, k, H] (no token_ids to confirm)", a, b, False
        notes.append("no token_ids: layout [seq, k, H] assumed, not verified")
    elif a != b:  # rows ≠ ids (analysis.rows: row_count): the longer axis holds the tokens, k is the short one
        seq, k, transposed = max(a, b), min(a, b), b > a
        layout = (f"{'[k, seq, H] (transposed on read' if transposed else '[seq, k, H] ('}; token axis assumed: "
                  f"neither axis matches {n_ids} token_ids)")
        notes.append(f"{n_ids} token_ids for {seq} rows: the longer axis taken as the token axis")
    else:
        raise ForensicsError(
            f"length mismatch: token_ids has {n_ids} tokens but hidden_states has shape {list(shape)} "
            "(neither axis matches, and both axes are equally long)", path=path)
    if seq == 0 or h == 0 or k == 0:
        raise ForensicsError(f"zero-length sequence, layer count or hidden size: hidden_states shape {list(shape)}",
                             path=path)
    dt = SAFETENSORS_DTYPES.get(sf.dtype_name("hidden_states"), "")
    if dt not in FLOAT_DTYPES:
        raise ForensicsError(f"hidden_states must be floating point, found {sf.dtype_name('hidden_states')}",
                             path=path)
    dtype = getattr(torch, dt.split(".")[1])
    if batched:
        notes.append("leading batch dim of 1 squeezed")
    stack = (lambda: sf.get("hidden_states")[0]) if batched else (lambda: sf.get("hidden_states"))
    slots = []
    for i in range(k):
        getter = (lambda i=i: stack()[i]) if transposed else (lambda i=i: stack()[:, i])
        claimed = "target" if (i == k - 1 and k > 1) else f"aux[{i}]"
        name = f"hidden_states[{i}]" if transposed else f"hidden_states[:, {i}]"
        slots.append(lazy_slot(i, name, "hidden_states", (seq, h), dtype, getter, claimed))
    mask = sf.get("loss_mask") if "loss_mask" in sf.keys() else None
    return build(slots, ids, mask, provenance(path, NAME, layout=layout, notes=notes))


def write(f, sample: Sample) -> None:
    """Write one sample as speculators' ``hs_{i}.safetensors``: ``hidden_states [seq, k, H]`` + ``token_ids``
    (``metadata`` goes into the safetensors header, e.g. an ``hsf stamp``)."""
    import torch
    from safetensors.torch import save

    f.write(save({"hidden_states": torch.stack(sample.states, dim=1).contiguous(), "token_ids": sample.input_ids},
                 metadata=sample.metadata))


def sample_path(i: int) -> str:
    """speculators ``train/data.py`` ``_get_raw_data``: row i's states."""
    return os.path.join("hidden_states", f"hs_{i}.safetensors")


def default_r(L: int) -> list:
    """vLLM's default aux ids [2, L//2, L-3] (r = id) + the last layer L (the training target)."""
    return [2, L // 2, L - 3, L]


def check_r(rs: list, L: int) -> list[str]:
    return final_post_note(NAME, rs)


def final_post_note(name: str, rs: list) -> list[str]:
    """speculators (either generator) stores no post-norm state: its target is the pre-norm r = L."""
    if FINAL_POST not in rs:
        return []
    return [f"{name} never stores a post-norm state (its target is pre-norm r = L); final_post has no layer id "
            "there (null in the metadata)"]


def layer_ids(rs: list) -> list | None:
    """vLLM semantics: r = id (vllm-project/vllm#36063 EagleModelMixin)."""
    return [None if r == FINAL_POST else int(r) for r in rs]


def write_arrow_dataset(ds: Dataset) -> list[str]:
    """The token side of speculators' current format: a HF ``datasets`` Arrow dataset at ``out`` with
    columns ``input_ids``, ``loss_mask``, ``seq_len`` (torch format), as ``speculators prepare_data``
    writes it (``preprocessing.py`` ``_append_row`` + ``save_to_disk``); ``ArrowDataset`` then reads
    ``out/hidden_states/hs_{i}.safetensors`` for row i. Returns notes (the dataset is skipped, and
    said so, when ``datasets`` is not installed)."""
    try:
        from datasets import Dataset as ArrowDataset
    except ImportError:
        return ["Arrow dataset (input_ids/loss_mask/seq_len) not written: `pip install datasets` to get the "
                "token side that speculators' ArrowDataset reads"]
    arrow = ArrowDataset.from_dict({"input_ids": [list(s.input_ids) for s in ds.samples],
                                    "loss_mask": [list(s.loss_mask) for s in ds.samples],
                                    "seq_len": [len(s.input_ids) for s in ds.samples]})
    arrow.set_format(type="torch")
    arrow.save_to_disk(ds.out)
    return []


WRITER = Writer("speculators", write, sample_path, convention="vllm", default_r=default_r, check_r=check_r,
                layer_ids=layer_ids, side_files=write_arrow_dataset, header_metadata=True)
FORMAT = CaptureFormat(NAME, ("safetensors",), match, read, trainer="speculators", writer=WRITER)
