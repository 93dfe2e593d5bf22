"""SpecForge offline data (``specforge_hidden_states_v1``): ``rows_*/data_{i}.ckpt[.gz]`` =
``{input_ids [seq], loss_mask [seq], hidden_state [1, seq, H] (final, post-norm),
aux_hidden_state [1, seq, 3H] (SGLang's concatenated aux states, layer order)}``.

Read as 4 slots: the 3 aux slices in stored order, then the final ``hidden_state``.
"""

from __future__ import annotations

from forensics.io.formats._common import as_2d, build, concat_count, provenance, split_concat, tensor_slot

NAME = "specforge"


def match(obj) -> bool:
    return isinstance(obj, dict) and "aux_hidden_state" in obj and "hidden_state" in obj


def read(obj: dict, path: str):
    aux = as_2d(obj["aux_hidden_state"], path, "aux_hidden_state")
    final = as_2d(obj["hidden_state"], path, "hidden_state")
    h = int(final.shape[1])
    k = concat_count(aux, h, path, "aux_hidden_state", "hidden_state")
    slots = split_concat(aux, k, path, "aux_hidden_state")
    slots.append(tensor_slot(k, "hidden_state", "hidden_state", final, claimed="final_post"))
    return build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME))


def write(f, input_ids, loss_mask, states: list) -> None:
    """Write one sample as SpecForge's ``data_{i}.ckpt``: the aux states concatenated ``[1, seq, k·H]`` and the
    last state as ``hidden_state`` ``[1, seq, H]``."""
    import torch

    torch.save({"input_ids": input_ids, "loss_mask": loss_mask,
                "hidden_state": states[-1].unsqueeze(0).contiguous(),
                "aux_hidden_state": torch.cat(states[:-1], dim=-1).unsqueeze(0).contiguous()}, f)
