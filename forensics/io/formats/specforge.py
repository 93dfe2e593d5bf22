"""SpecForge offline data (``specforge_hidden_states_v1``): ``rows_*/data_{i}.ckpt[.gz]`` =
``{input_ids [seq], loss_mask [seq], hidden_state [1, seq, H] (final, post-norm),
aux_hidden_state [1, seq, 3H] (SGLang's concatenated aux states, layer order)}``.

Read as 4 slots: the 3 aux slices in stored order, then the final ``hidden_state``.
"""

from __future__ import annotations

import os

from forensics.errors import ForensicsError
from forensics.io.formats._common import as_2d, build, concat_count, provenance, split_concat, tensor_slot
from forensics.io.formats.base import CaptureFormat, Request, Sample, Writer
from forensics.layers import FINAL_POST, r_label

NAME = "specforge"
GROUP = 2000  # SpecForge HiddenStatesGenerator file_group_size default
AUX = 3  # SpecForge requires exactly 3 aux ids; the draft fc is 3·H wide


def match(obj) -> bool:
    return isinstance(obj, dict) and "aux_hidden_state" in obj and "hidden_state" in obj


def read(obj: dict, req: Request):
    path = req.path
    aux = as_2d(obj["aux_hidden_state"], path, "aux_hidden_state")
    final = as_2d(obj["hidden_state"], path, "hidden_state")
    h = int(final.shape[1])
    k = concat_count(aux, h, path, "aux_hidden_state", "hidden_state")
    slots = split_concat(aux, k, path, "aux_hidden_state")
    slots.append(tensor_slot(k, "hidden_state", "hidden_state", final, claimed="final_post"))
    return build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME))


def write(f, sample: Sample) -> None:
    """Write one sample as SpecForge's ``data_{i}.ckpt``: the aux states concatenated ``[1, seq, k·H]`` and the
    last state as ``hidden_state`` ``[1, seq, H]``."""
    import torch

    states = sample.states
    torch.save({"input_ids": sample.input_ids, "loss_mask": sample.loss_mask,
                "hidden_state": states[-1].unsqueeze(0).contiguous(),
                "aux_hidden_state": torch.cat(states[:-1], dim=-1).unsqueeze(0).contiguous()}, f)


def sample_path(i: int) -> str:
    """``rows_{g}-{g+2000}/data_{i}.ckpt`` (SpecForge ``scripts/prepare_hidden_states.py``)."""
    g = (i // GROUP) * GROUP
    return os.path.join(f"rows_{g}-{g + GROUP}", f"data_{i}.ckpt")


def default_r(L: int) -> list:
    """SpecForge ids [1, L//2-1, L-4] + SGLang's +1 → r {2, L//2, L-3}; the final state post-norm."""
    return [2, L // 2, L - 3, FINAL_POST]


def check_r(rs: list, L: int) -> list[str]:
    if len(rs) != AUX + 1 or FINAL_POST in rs[:-1]:
        raise ForensicsError(
            f"specforge stores exactly {AUX} aux states (aux_hidden_state [1, seq, 3H]) plus the "
            f"final state (hidden_state): give 4 r values, the last being the final (normally "
            f"final_post), e.g. --layers 2,{L // 2},{L - 3},final_post; got {[r_label(r) for r in rs]}")
    notes = []
    if rs[-1] != FINAL_POST:
        notes.append(f"SpecForge stores the final POST-norm state as hidden_state; this file stores "
                     f"{r_label(rs[-1])} there instead (deliberately non-standard)")
    if 0 in rs[:-1]:
        notes.append("SpecForge cannot capture the embedding (aux ids must be >= 0, r = id + 1); "
                     "this file is non-standard")
    return notes


def layer_ids(rs: list) -> list | None:
    """Aux ids only, SGLang adds 1: r = id + 1 (SpecForge v0.1.0 prepare_hidden_states)."""
    return [int(r) - 1 for r in rs[:-1]]


WRITER = Writer(NAME, write, sample_path, convention="specforge", default_r=default_r, check_r=check_r,
                layer_ids=layer_ids)
FORMAT = CaptureFormat(NAME, ("torch",), match, read, trainer=NAME, writer=WRITER)
