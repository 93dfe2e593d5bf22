"""TensorRT-LLM ``SaveHiddenStatesDecodingConfig`` (``decoding_type="SaveState"``) dumps: ``<prefix>_<iter>.pt`` =
a **list of records**, each one request ``{id, input_ids [T], hidden_state [T, H], aux_hidden_states [T, k·H]}``
(one stored version names the last key ``hidden_state_features``).

What the format claims, with its source:

* ``hidden_state`` is the last ``H`` columns of the capture buffer, the final post-norm state: "Use -1 to indicate
  the final post-norm hidden state" (``SaveHiddenStatesDecodingConfig`` field text, TensorRT-LLM docs 1.4.0rc4;
  ``tensorrt_llm/_torch/speculative/save_hidden_state.py`` @ 17c59c36);
* the aux slices are the ``eagle3_layers_to_capture`` in order, captured after block ``id`` (r = id + 1); the ids
  live in the launch config, not in the file, so no r is claimed for them here.

When the features include the final columns too (the ``-1`` given explicitly), the duplicate last slice is
dropped and said so. Every record is a sample: ``load(path, record=i)`` reads one, :func:`records` counts them.
"""

from __future__ import annotations

from dataclasses import replace

from forensics.errors import ForensicsError
from forensics.io.formats._common import as_2d, build, concat_count, provenance, split_concat, tensor_slot
from forensics.io.formats.base import CaptureFormat, Request
from forensics.io.limits import records_per_file
from forensics.layers import FINAL_POST

NAME = "trtllm"
AUX_KEYS = ("aux_hidden_states", "hidden_state_features")
SOURCE = "TensorRT-LLM SaveHiddenStatesDecodingConfig: -1 is the final post-norm hidden state"


def _is_record(x) -> bool:
    return isinstance(x, dict) and "input_ids" in x and "hidden_state" in x


def match(obj) -> bool:
    return isinstance(obj, (list, tuple)) and len(obj) > 0 and all(_is_record(x) for x in obj)


def records(obj) -> int:
    return len(obj)


def read(obj, req: Request):
    path, record = req.path, req.record
    n = len(obj)
    if not 0 <= record < n:
        raise ForensicsError(f"record {record} does not exist: the file holds {n} records (0..{n - 1})", path=path)
    rec = obj[record]
    final = as_2d(rec["hidden_state"], path, "hidden_state")
    h = int(final.shape[1])
    notes = [f"record {record} of {n} (request id {rec.get('id')!r}); each record is one sample"] if n > 1 else []
    aux_key = next((k for k in AUX_KEYS if k in rec), None)
    slots = []
    if aux_key is not None:
        aux = as_2d(rec[aux_key], path, aux_key)
        k = concat_count(aux, h, path, aux_key, "hidden_state")
        if k > 1 and aux.shape[0] == final.shape[0] and bool((aux[:, -h:] == final).all()):
            k -= 1  # the features carry the final columns too (-1 given explicitly): keep one copy
            notes.append(f"the last {h} columns of {aux_key} equal hidden_state (the final state stored twice): "
                         "read once")
        slots = split_concat(aux[:, :k * h], k, path, aux_key)
    slots.append(tensor_slot(len(slots), "hidden_state", "hidden_state", final, claimed=FINAL_POST))
    prov = provenance(path, NAME, layout=f"record {record} of {n}: [T, k·H] aux + [T, H] final", notes=notes)
    prov.record = record
    cap = build(slots, rec["input_ids"], rec.get("loss_mask"), prov)
    cap.meta.update(records=n, record=record, claim_source=SOURCE)
    return cap


def read_all(obj, req: Request) -> list:
    """Every record, the list read once."""
    records_per_file(len(obj), req.path)
    return [read(obj, replace(req, record=i)) for i in range(len(obj))]


FORMAT = CaptureFormat(NAME, ("torch",), match, read, samples=read_all)
