"""EAGLE-1/2 data (SafeAILab/EAGLE ``ge_data``): ``data_{i}.ckpt`` = ``{input_ids, hidden_state, loss_mask}``
with ``hidden_state`` = HF ``hidden_states[-1]`` (post-norm, single layer)."""

from __future__ import annotations

from forensics.io.formats._common import as_2d, build, provenance, tensor_slot
from forensics.io.formats.base import CaptureFormat, Request

NAME = "eagle"


def match(obj) -> bool:
    return (isinstance(obj, dict) and "hidden_state" in obj and "aux_hidden_state" not in obj
            and "target" not in obj)


def read(obj: dict, req: Request):
    path = req.path
    t = as_2d(obj["hidden_state"], path, "hidden_state")
    slots = [tensor_slot(0, "hidden_state", "hidden_state", t, claimed="final_post")]
    return build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME))


FORMAT = CaptureFormat(NAME, ("torch",), match, read)
