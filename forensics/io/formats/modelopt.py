"""NVIDIA Model-Optimizer hidden-state dumps (``examples/speculative_decoding/collect_hidden_states/
compute_hidden_states_{hf,vllm,trtllm}.py``): one ``<conversation_id>.pt`` per conversation =
``{input_ids [T], hidden_states [T, H], aux_hidden_states [T, k·H], conversation_id}`` (``loss_mask`` optional).

What the format claims depends on the dumper, and the HF dumper's file does not say which wrote it:

* HF dumper: ``aux_hidden_states`` = ``cat(outputs.hidden_states[i] for i in (2, N//2, N-3))`` and
  ``hidden_states`` = ``outputs.hidden_states[-1]``, the post-norm final (compute_hidden_states_hf.py);
* TensorRT-LLM dumper: the post-norm final too (TensorRT-LLM's ``-1``);
* vLLM dumper: the final is the pre-norm last block, r = L (Model-Optimizer#1846, W6).

So ``hidden_states`` is claimed post-norm only when the file names an HF or TensorRT-LLM dumper (a ``dumper`` /
``backend`` string); otherwise nothing is claimed and exact mode decides. A ``hidden_states_prenorm`` tensor
(read by the loader, written by no dumper found) becomes one more slot.
"""

from __future__ import annotations

from forensics.io.formats._common import as_2d, build, concat_count, provenance, split_concat, tensor_slot
from forensics.io.formats.base import CaptureFormat, Request
from forensics.layers import FINAL_POST

NAME = "modelopt"
FINAL_KEYS = ("hidden_states", "base_model_hidden_states")
DUMPER_KEYS = ("dumper", "backend", "engine")
POST_NORM_DUMPERS = ("hf", "huggingface", "transformers", "trtllm", "tensorrt-llm", "tensorrt_llm")


def _final_key(obj) -> str | None:
    import torch

    return next((k for k in FINAL_KEYS if isinstance(obj.get(k), torch.Tensor)), None)


def match(obj) -> bool:
    return isinstance(obj, dict) and "aux_hidden_states" in obj and _final_key(obj) is not None


def read(obj: dict, req: Request):
    path = req.path
    key = _final_key(obj)
    assert key is not None
    final = as_2d(obj[key], path, key)
    aux = as_2d(obj["aux_hidden_states"], path, "aux_hidden_states")
    h = int(final.shape[1])
    k = concat_count(aux, h, path, "aux_hidden_states", key)
    slots = split_concat(aux, k, path, "aux_hidden_states")
    dumper = next((str(obj[d]).lower() for d in DUMPER_KEYS if isinstance(obj.get(d), str)), None)
    claimed = FINAL_POST if dumper in POST_NORM_DUMPERS else None
    notes = []
    if dumper is None:
        notes.append(f"the file does not name its dumper: `{key}` is post-norm from the HF and TensorRT-LLM "
                     "dumpers, pre-norm r = L from the vLLM dumper (Model-Optimizer#1846); nothing claimed")
    else:
        notes.append(f"dumper {dumper!r} named by the file")
    slots.append(tensor_slot(k, key, key, final, claimed=claimed))
    pre = obj.get("hidden_states_prenorm")
    if pre is not None:
        slots.append(tensor_slot(k + 1, "hidden_states_prenorm", "hidden_states_prenorm",
                                 as_2d(pre, path, "hidden_states_prenorm")))
    cid = obj.get("conversation_id")
    cap = build(slots, obj.get("input_ids"), obj.get("loss_mask"), provenance(path, NAME, notes=notes))
    cap.meta.update(conversation_id=cid if isinstance(cid, (int, str)) else None, dumper=dumper)
    return cap


FORMAT = CaptureFormat(NAME, ("torch",), match, read)
