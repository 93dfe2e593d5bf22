"""vLLM ``extract_hidden_states`` + ``ExampleHiddenStatesConnector`` files: one safetensors file per request,
``{hidden_states [T, k, H] (or [k, T, H]), token_ids [T]}``, written with ``save_file`` and **no metadata**
(vllm ``examples/offline_inference/extract_hidden_states.py``; the stack order changed between versions, so the
token axis is found from ``len(token_ids)``).

The same file inside a speculators dataset (``hidden_states/hs_{i}.safetensors`` beside its Arrow rows) is read
as ``speculators``, whose launcher appends L (its last slot is the training target). A bare connector file
claims nothing about its slots: the layer ids (r = id; id = L is the pre-norm final, "not normalized using the
output norm", vLLM docs) live in the launch's ``eagle_aux_hidden_state_layer_ids``, not in the file.
"""

from __future__ import annotations

import os
import re

from forensics.io.formats import speculators
from forensics.io.formats._io import SafetensorsFile
from forensics.io.formats.base import CaptureFormat, Request

NAME = "vllm-connector"
DATASET_MARKERS = ("dataset_info.json", "state.json")


def in_speculators_dataset(path: str) -> bool:
    """``hidden_states/hs_{i}.safetensors``, or an Arrow dataset beside the file's folder (speculators' layout)."""
    d = os.path.dirname(os.path.abspath(path))
    if os.path.basename(d) == "hidden_states" and re.fullmatch(r"hs_\d+\.safetensors", os.path.basename(path)):
        return True
    parent = os.path.dirname(d)
    return any(os.path.isfile(os.path.join(parent, m)) for m in DATASET_MARKERS)


def match(sf: SafetensorsFile) -> bool:
    return speculators.match(sf) and not in_speculators_dataset(sf.path)


def read(sf: SafetensorsFile, req: Request):
    cap = speculators.read(sf, req)
    cap.provenance.format = NAME
    for s in cap.slots:
        s.claimed = None
    cap.provenance.notes.append("vLLM connector files carry no layer ids (save_file without metadata): the "
                                "ids are the launch's eagle_aux_hidden_state_layer_ids, r = id")
    return cap


FORMAT = CaptureFormat(NAME, ("safetensors",), match, read)
