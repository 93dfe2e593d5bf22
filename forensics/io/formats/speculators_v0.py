"""speculators v0 (removed in speculators#313): ``{input_ids, loss_mask, hidden_state [seq, k·H], target [seq, H]}``.

Beware the name clash: here ``hidden_state`` is the *pre-concatenated aux* states, while in SpecForge
files ``hidden_state`` is the final post-norm state. The pair ``hidden_state`` + ``target`` decides.
"""

from __future__ import annotations

from forensics.io.formats._common import as_2d, build, concat_count, provenance, split_concat, tensor_slot
from forensics.io.formats.base import CaptureFormat, Request

NAME = "speculators-v0"


def match(obj) -> bool:
    return isinstance(obj, dict) and "hidden_state" in obj and "target" in obj and "aux_hidden_state" not in obj


def read(obj: dict, req: Request):
    path = req.path
    aux = as_2d(obj["hidden_state"], path, "hidden_state")
    target = as_2d(obj["target"], path, "target")
    h = int(target.shape[1])
    k = concat_count(aux, h, path, "hidden_state", "target")
    slots = split_concat(aux, k, path, "hidden_state")
    slots.append(tensor_slot(k, "target", "target", target, claimed="target"))
    return build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME))


FORMAT = CaptureFormat(NAME, ("torch",), match, read)
