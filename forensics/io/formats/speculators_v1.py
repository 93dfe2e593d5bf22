"""speculators legacy v1: ``data_{i}.pt`` = ``{input_ids [seq], hidden_states [[seq, H], ...], loss_mask [seq]}``.

Written by speculators' ``scripts/data_generation_offline.py`` (one ``torch.save`` per sample); read by
``standardize_data_v1``, which feeds ``cat(hidden_states[:-1])`` to the draft and uses
``hidden_states[-1]`` as the training target. The layer ids live only in ``data_config.json``.
"""

from __future__ import annotations

from forensics.errors import ForensicsError
from forensics.io.formats._common import as_2d, build, provenance, tensor_slot

NAME = "speculators-v1"


KEYS = {"input_ids", "hidden_states", "loss_mask"}


def match(obj) -> bool:
    """Exactly the generator's three keys: a user's own ``{input_ids, hidden_states: [...]}`` dict is generic, so
    this format's claim (the last slot is the target at r = L) never applies to it."""
    return isinstance(obj, dict) and set(map(str, obj)) == KEYS and isinstance(obj["hidden_states"], (list, tuple))


def read(obj: dict, path: str):
    hs = obj["hidden_states"]
    if len(hs) == 0:
        raise ForensicsError("'hidden_states' is an empty list (no layers were captured)", path=path)
    slots = []
    n = len(hs)
    for i, t in enumerate(hs):
        name = f"hidden_states[{i}]"
        claimed = "target" if (i == n - 1 and n > 1) else f"aux[{i}]"
        slots.append(tensor_slot(i, name, "hidden_states", as_2d(t, path, name), claimed=claimed))
    return build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME))


def write(f, input_ids, loss_mask, states: list) -> None:
    """Write one sample as the legacy generator does: ``torch.save({input_ids, hidden_states: [...], loss_mask})``
    into the open binary file ``f``."""
    import torch

    torch.save({"input_ids": input_ids, "hidden_states": [t.contiguous() for t in states], "loss_mask": loss_mask}, f)
