"""SGLang ``return_hidden_states`` rows saved as JSON: a response object (or a list of them, one per prompt) whose
``meta_info["hidden_states"]`` holds the prompt's rows ``[T_prompt][H]`` followed by one row per generated token
(SGLang PR #3364; ``examples/runtime/engine/hidden_states.py``). Every object is a sample.

What the format claims: the rows are the last layer's output after the final norm, the state fed to the LM head
(SGLang's logits processor receives the normed state; intermediate layers are not exposed, issue #8069), so the
one slot is claimed ``final_post``. Token ids are read from ``input_ids`` / ``prompt_token_ids`` (+
``output_ids``) when the saved object has them, else from ``--ids``.
"""

from __future__ import annotations

from dataclasses import replace

from forensics.errors import ForensicsError
from forensics.io.formats._common import build, provenance, tensor_slot
from forensics.io.formats.base import CaptureFormat, Request
from forensics.io.limits import records_per_file
from forensics.layers import FINAL_POST

NAME = "sglang"
ID_KEYS = ("input_ids", "prompt_token_ids", "prompt_ids")


def _rows_of(x) -> list | None:
    if isinstance(x, dict):
        meta = x.get("meta_info")
        hs = meta.get("hidden_states") if isinstance(meta, dict) else x.get("hidden_states")
        return hs if isinstance(hs, list) else None
    return None


def samples(doc) -> list:
    """The response objects of a JSON document that carry hidden-state rows."""
    items = doc if isinstance(doc, list) else [doc]
    return [x for x in items if _rows_of(x) is not None]


def match(doc) -> bool:
    return bool(samples(doc))


def _flatten(rows: list, path: str) -> list[list[float]]:
    """Prompt block ``[T][H]`` and per-token ``[H]`` / ``[1][H]`` rows as one ``[T][H]`` list."""
    out: list = []
    for i, r in enumerate(rows):
        if isinstance(r, list) and r and isinstance(r[0], list):
            out.extend(r)
        elif isinstance(r, list) and r and isinstance(r[0], (int, float)):
            out.append(r)
        else:
            raise ForensicsError(f"meta_info.hidden_states[{i}] is not a row of numbers or a block of rows",
                                 path=path)
    return out


def _pair_ids(x: dict, prompt: list, rows: int) -> tuple[list, str | None]:
    """The token ids of the ``rows`` rows of one response, and a note when some ids have no row.

    The rows are the prompt's then one per generated token but the last (its state is never computed). With
    SGLang's prefix cache, the cached prompt prefix is not recomputed, so the rows start after it: the response's
    ``meta_info.cached_tokens`` says how many. The rows are paired with the ids after that prefix only when
    ``cached_tokens`` accounts for the missing rows exactly; any other shortfall keeps every id, and the count
    mismatch is reported (``row_count``), never paired by guess (pairing ``ids[:rows]`` put tokens 0-23 beside
    the rows of tokens 40-63)."""
    out = list(x["output_ids"]) if isinstance(x.get("output_ids"), list) else []
    prompt = list(prompt)
    info = x.get("meta_info")
    meta = info if isinstance(info, dict) else {}
    cached = meta.get("cached_tokens")
    starts = [0]  # cached tokens are not recomputed, so have no rows: that reading first when the response says so
    if isinstance(cached, int) and not isinstance(cached, bool) and 0 < cached < len(prompt):
        starts.insert(0, cached)
    for start in starts:
        # the prompt's rows only, or the prompt's then the generated tokens' (the last one's, or all of them)
        options = [(prompt[start:], 0)] + ([((prompt + out)[start:], 1), ((prompt + out)[start:], 0)] if out else [])
        for ids, extra in options:
            if len(ids) - extra == rows:
                note = None if start == 0 else (
                    f"the first {start} prompt tokens came from SGLang's prefix cache (meta_info.cached_tokens): "
                    "they have no rows; the rows are paired with the tokens after them")
                return ids[:rows], note
    return (prompt + out if out and len(prompt) < rows else prompt), None


def read(doc, req: Request):
    return _read_item(samples(doc), req)


def read_all(doc, req: Request) -> list:
    """Every response object, the document parsed once."""
    items = samples(doc)
    records_per_file(len(items), req.path)
    return [_read_item(items, replace(req, record=i)) for i in range(len(items))]


def _read_item(items: list, req: Request):
    import torch

    path, record, input_ids = req.path, req.record, req.input_ids
    n = len(items)
    if not 0 <= record < n:
        raise ForensicsError(f"record {record} does not exist: the file holds {n} samples (0..{n - 1})", path=path)
    x = items[record]
    rows = _flatten(_rows_of(x) or [], path)
    if not rows:
        raise ForensicsError("meta_info.hidden_states is empty", path=path)
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        raise ForensicsError(f"hidden-state rows of different widths {sorted(widths)[:4]}", path=path)
    try:
        t = torch.tensor(rows, dtype=torch.float32)
    except (TypeError, ValueError, OverflowError) as e:
        raise ForensicsError(f"hidden-state rows are not numbers: {e}", path=path) from None
    ids = next((x[k] for k in ID_KEYS if isinstance(x.get(k), list)), None)
    notes = [f"sample {record} of {n}"] if n > 1 else []
    if ids is None:
        ids = input_ids
    else:
        ids, note = _pair_ids(x, ids, int(t.shape[0]))
        notes += [note] if note else []
    slot = tensor_slot(0, "meta_info.hidden_states", "hidden_states", t, claimed=FINAL_POST)
    prov = provenance(path, NAME, layout="JSON rows [T][H]", notes=notes)
    prov.record = record
    cap = build([slot], ids, None, prov)
    cap.meta.update(records=n, record=record)
    return cap


FORMAT = CaptureFormat(NAME, ("json",), match, read, samples=read_all)
