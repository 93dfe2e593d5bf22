"""Exact mode against a streamed target: match every slot block by block, stop once all are matched.

The reference states come from :class:`forensics.models.stream.LayerStream` one r at a time (r = 0, 1, …,
L, then ``final_post``); each slot's ladder table grows by one entry per r, and the stream stops once
every slot has an entry within the match tolerances *and* the next r has been compared too (so the
runner-up on both sides is known), or at the end. Only the logit-lens rows of each state are kept, so
memory is one block plus ``T × H`` per slot.
"""

from __future__ import annotations

import time
from typing import Any

from forensics.analysis.fingerprint.ladder import (
    LADDER_MATCH_COS,
    LADDER_MATCH_REL,
    LENS_NEAR,
    LENS_ROWS,
    decide,
    ladder_entry,
)
from forensics.layers import FINAL_POST
from forensics.models.shards import peak_rss

# architectures whose streamed ladder is tested equal to transformers' whole-model forward
# (tests/test_stream.py: bit-identical in float32)
VERIFIED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma3_text", "mixtral", "qwen2_moe",
                        "qwen3_moe", "deepseek_v3")


def _settled(table: list[dict]) -> bool:
    """A slot is settled when its best entry so far is within tolerance and is not the newest r."""
    ok = [i for i, e in enumerate(table) if e["cos"] >= LADDER_MATCH_COS and e["rel"] <= LADDER_MATCH_REL]
    if not ok:
        return False
    best = min(ok, key=lambda i: table[i]["rel"])
    return best < len(table) - 1 or table[best]["r"] == FINAL_POST


def streamed_ladder(stream: Any, ids: Any, tensors: list) -> dict:
    """Per-slot ladder matches from the stream (``decide`` on each slot's table), the lens rows kept per
    r, and the provenance (shards and bytes read, blocks run, peak RSS, seconds)."""
    import torch

    t0 = time.perf_counter()
    T = int(ids.numel())
    xs = [h.to(torch.float32) if int(h.shape[0]) == T else None for h in tensors]
    tables: list[list[dict]] = [[] for _ in tensors]
    rows = torch.unique(torch.linspace(1 if T > 1 else 0, T - 1, min(LENS_ROWS, T)).long())
    kept: dict = {}
    last = None
    for r, state in stream.states(ids):
        last = r
        for x, table in zip(xs, tables, strict=True):
            if x is not None and tuple(x.shape) == tuple(state.shape):
                table.append(ladder_entry(x, state, r))
        kept[r] = state[rows].to(torch.float32).clone()
        if all(x is None or _settled(t) for x, t in zip(xs, tables, strict=True)):
            break
    complete = last == FINAL_POST
    matches = [decide(t) if x is not None else None for x, t in zip(xs, tables, strict=True)]
    for m in matches:
        if m is not None:
            m["tolerance"]["compute_dtype"] = stream.compute_dtype
    L = stream.num_layers
    notes = []
    if not complete:
        notes.append(f"streamed {stream.stats.to_dict()['blocks_run']} of {L} blocks: every slot was matched "
                     "by then (deeper blocks not read; no logit lens without the final state)")
    if stream.model_type not in VERIFIED_MODEL_TYPES:
        notes.append(f"model_type {stream.model_type!r}: the streamed forward is not yet tested against the "
                     "whole-model forward for this architecture")
    prov = {"folder": stream.folder, "model_type": stream.model_type, "compute_dtype": stream.compute_dtype,
            "tokens": T, "num_layers": L, "stopped_at": last, "complete": complete,
            "max_memory": stream.max_memory, "peak_rss": peak_rss(), "weights_bytes": stream.weights_bytes(),
            "seconds": time.perf_counter() - t0, **stream.stats.to_dict()}
    return {"matches": matches, "notes": notes, "provenance": prov, "kept": kept, "rows": rows,
            "complete": complete}


def streamed_lens(stream: Any, tensors: list, streamed: dict, out: list) -> None:
    """The logit lens of ``exact.logit_lens`` with the streamed final norm and ``lm_head`` (row blocks):
    one pass over ``lm_head`` for every row needed. Needs the whole stream (the final prediction)."""
    import torch

    if not streamed["complete"]:
        return
    kept, rows = streamed["kept"], streamed["rows"]
    T = None if FINAL_POST not in kept else int(streamed["provenance"]["tokens"])
    parts: list[tuple[Any, Any]] = [("final", kept[FINAL_POST])]
    for i, (h, x) in enumerate(zip(tensors, out, strict=True)):
        if int(h.shape[0]) != T:
            continue
        post = x.r_exact == FINAL_POST or bool(x.postnorm and x.postnorm["verdict"])
        v = h[rows].to(torch.float32)
        parts.append((("slot", i), v if post else stream.norm(v)))
    if any(x.r_exact is None for x in out):
        for r, v in kept.items():
            parts.append((("r", r), v if r == FINAL_POST else stream.norm(v)))
    top = stream.top1(torch.cat([p for _, p in parts]))
    n, got = int(rows.numel()), {}
    for j, (key, _) in enumerate(parts):
        got[key] = top[j * n:(j + 1) * n]
    final = got["final"]
    profile = {key[1]: float((v == final).float().mean()) for key, v in got.items() if key[0] == "r"}
    for key, v in got.items():
        if key[0] != "slot":
            continue
        x = out[key[1]]
        a = float((v == final).float().mean())
        lens: dict[str, Any] = {"agreement": a, "rows": n, "near": None}
        if x.r_exact is None:
            lens["near"] = sorted((r for r, b in profile.items() if abs(b - a) <= LENS_NEAR),
                                  key=lambda r: float("inf") if r == FINAL_POST else r)
        x.lens = lens

    streamed["provenance"].update(stream.stats.to_dict(), peak_rss=peak_rss())  # lm_head reads included
