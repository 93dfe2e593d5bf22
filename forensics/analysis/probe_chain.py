"""The draft probe's scoring: greedy chains of every wiring on one capture file, batched.

Split from :mod:`forensics.analysis.probe` (the verb, the result and its verdict); nothing here decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forensics.analysis.probe_wirings import CONTROL_RANDOM, CONTROL_SHIFT, PAIR_SAME, Candidates, Wiring
from forensics.errors import ForensicsError
from forensics.io.capture import Capture
from forensics.layers import FINAL_POST
from forensics.models.draft import Draft, draft_chain
from forensics.models.verifier import row_blocks

if TYPE_CHECKING:  # pragma: no cover
    from forensics.models.verifier import Verifier

TARGET_VERIFIER = "verifier"
TARGET_NEXT = "next_token"
BATCH_FLOATS = 2**26  # fp32 activations of one batched draft forward (256 MiB): all 24 sample candidates fit
HEAD_ROWS = 1024  # rows per lm_head block: 1024 × a 128k vocab = 0.5 GiB of logits at most, 8 MiB at Vd = 2048
RANDOM_SEED = 0  # the random control's permutation of positions


def slot_refs(cap: Capture) -> list:
    """r of every slot (declared by the data, or named by the reference forward: ``probe``'s ``exact_r``);
    ``"slot{i}"`` where neither names it."""
    return [s.declared_r if s.declared_r is not None else f"slot{s.index}" for s in cap.slots]

@dataclass
class Tally:
    """Per wiring and file: accepted tokens per starting position, which positions count, top-k hits."""

    acc: dict[Wiring, list] = field(default_factory=dict)
    ok: dict[Wiring, list] = field(default_factory=dict)
    hitk: dict[Wiring, list] = field(default_factory=dict)
    embed_source: str | None = None
    target_source: str | None = None
    target_kind: str = TARGET_NEXT
    used: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

def _final_norm(v: Verifier, x: Any) -> Any:
    import torch

    return v.norm_weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + v.norm_eps)


def _targets(v: Verifier | None, L: int | None, states: dict, ids: Any, pred: Any) -> tuple[Any, str, str]:
    """The chain's targets ``seq``: row t's step j must draft ``seq[t + j]``; and their source.

    With a model: the verifier's own prediction at position t + 1 + j (argmax of lm_head(norm(r = L)) when
    r = L was captured, else ``pred``, the argmax of a forward pass); without: the actual token t + 2 + j.
    """
    if v is None:
        return ids[2:], "input_ids shifted by two (no model given)", TARGET_NEXT
    if L in states and L != 0:
        pred = (_final_norm(v, states[L].float()) @ v.lm_head.T).argmax(-1)
        src = f"lm_head(norm(captured r={L})) of the model"
    else:
        src = "model run on the capture's input_ids"
    return pred[1:], src, TARGET_VERIFIER


def _batch_size(d: Draft, T: int, steps: int = 1) -> int:
    """Candidates per batched draft forward: activations of one candidate ~ steps·(T·(k·H + 8·H) + heads·T²)
    floats, kept under ``BATCH_FLOATS`` (the logits are taken in ``HEAD_ROWS`` row blocks)."""
    per = steps * (T * (d.num_aux + 8) * d.hidden_size + d.num_heads * T * T)
    return max(1, BATCH_FLOATS // max(per, 1))


def _head(d: Draft, hidden: Any, tids: Any, topk: int) -> tuple[Any, Any]:
    """Verifier ids of the draft's ``topk`` best tokens ``[c, T, topk]`` for ``hidden`` ``[c, T, H]`` and whether
    the row's logits are finite; ``lm_head`` runs over ``HEAD_ROWS`` rows at a time (only the rows asked for:
    a chain step computes the rows whose chain is still accepted)."""
    import torch

    head = d.weights["lm_head.weight"].T
    k = min(topk, int(head.shape[-1]))
    c, T = int(hidden.shape[0]), int(hidden.shape[1])
    flat = hidden.reshape(c * T, -1)
    ok, top = torch.empty(c * T, dtype=torch.bool), torch.empty(c * T, k, dtype=torch.long)
    for b in row_blocks(c * T, HEAD_ROWS):
        logits = flat[b] @ head
        best = logits.topk(k, dim=-1)
        top[b] = best.indices
        # overflowing states give NaN/inf logits: not scored. max and min propagate NaN, so two row reductions
        # (the max is topk's first value) say what isfinite(logits).all(-1) says without a [rows, V] mask
        ok[b] = torch.isfinite(best.values[:, 0]) & torch.isfinite(logits.amin(-1))
    return tids[top].reshape(c, T, k), ok.reshape(c, T)


def _file_states(cap: Capture, v: Verifier | None, L: int | None, need_post: bool) -> dict:
    states = {r: cap.slots[i].tensor() for i, r in enumerate(slot_refs(cap))}
    if need_post and FINAL_POST not in states and v is not None and L in states:
        states[FINAL_POST] = _final_norm(v, states[L].float())  # the model's final norm on the last block
    return states


def _fused(w: Wiring, states: dict, perm: Any) -> Any:
    import torch

    rows = [states[r][:-1] for r in w.refs]
    x = torch.cat([r.float() for r in rows], dim=-1)
    return x[perm] if w.control == CONTROL_RANDOM else x


def _token_embeddings(E: Any, states: dict, ids: Any, d: Draft, tl: Tally) -> tuple[Any, Any]:
    """``(emb, emb_same)``: the embeddings of tokens ``t + 1`` and ``t`` for every starting position, from the
    embedding table (the draft's or ``--model``'s) or else the capture's r=0 slot (noted in ``tl``)."""
    if E is not None:
        return E[ids[1:]], E[ids[:-1]]
    if 0 in states:
        tl.embed_source = "the capture's r=0 slot"
        return states[0][1:].float(), states[0][:-1].float()
    raise ForensicsError("the draft ships no embed_tokens and no slot of the data is declared r = 0 (the probe "
                         "reads the layers a capture declares: its sidecar or format, not the fingerprint's roles): "
                         "pass --model (its embedding table)", path=d.path)


def _padded_targets(seq: Any, ids: Any, E: Any, states: dict, emb: Any, Tm: int, steps: int) -> tuple[Any, Any, Any]:
    """``(target token, has a target, accepted token's embedding)`` per place, padded to ``Tm + steps + 1`` places so
    every chain step of every start has a slot (padding: no target)."""
    import torch

    S = Tm + steps + 1
    seq_p, have_p = ids.new_zeros(S), torch.zeros(S, dtype=torch.bool)
    seq_p[:len(seq)], have_p[:len(seq)] = seq, True
    # the embedding of the token accepted at each place (a chain goes on only while draft == target)
    emb_p = E[seq_p] if E is not None else \
        torch.cat([states[0][2:].float(), emb.new_zeros(S - Tm + 1, emb.shape[-1])])
    return seq_p, have_p, emb_p


def _batch_groups(cands: Candidates) -> dict[tuple, list[Wiring]]:
    """The wirings that can share a batched chain: same concat order, shift control or not, and token pairing."""
    groups: dict[tuple, list[Wiring]] = {}
    for w, _ in cands:
        groups.setdefault((w.order, w.control == CONTROL_SHIFT, w.pairing), []).append(w)
    return groups


def _score_chunk(d: Draft, chunk: list[Wiring], states: dict, perm: Any, start: Any, tgt: list, have: list,
                 first: Any, feed: list, order: str, tids: Any, topk: int, tl: Tally) -> None:
    """Draft one batch of wirings' chains from every valid start and add each wiring's accepted length, validity
    and top-k hit of step 0 to ``tl``; a chain goes on only while the draft's token is the target."""
    import torch

    c, Tm = len(chunk), len(start)
    fused = torch.stack([_fused(w, states, perm) for w in chunk])
    valid = start & torch.isfinite(fused).all(-1)  # a position with a non-finite state scores nothing
    acc = torch.zeros(c, Tm, dtype=torch.long)
    ok, hitk = torch.zeros(c, Tm, dtype=torch.bool), torch.zeros(c, Tm, dtype=torch.bool)

    def keep(j, x, b, t):
        top, fin = _head(d, x[None], tids, topk if j == 0 else 1)
        top, fin = top[0], fin[0]
        hit = (top[:, 0] == tgt[j][t]) & have[j][t] & fin
        if j == 0:
            fin &= valid[b, t]
            ok[b, t], hit = fin, hit & fin
            hitk[b, t] = (top == tgt[0][t][:, None]).any(-1) & have[0][t] & fin
        acc[b, t] += hit.long()
        return hit

    draft_chain(d, fused, first.expand(c, -1, -1), [f.expand(c, -1, -1) for f in feed], order=order,
                keep=keep)
    for i, w in enumerate(chunk):
        tl.acc.setdefault(w, []).append(acc[i])
        tl.ok.setdefault(w, []).append(ok[i])
        tl.hitk.setdefault(w, []).append(hitk[i])


def score_file(cap: Capture, d: Draft, E: Any, v: Verifier | None, L: int | None, pred: Any, cands: Candidates,
                tl: Tally, topk: int, steps: int, use_loss_mask: bool, tick: Callable[[int], None]) -> None:
    """Add one capture file's chains for every wiring to ``tl``.

    The wirings of a file run as batched chains (chunks of ``_batch_size``, grouped by concat order and by
    the shift control's targets): the same matmul rows as one forward per wiring, with one set of kernel
    launches instead of one per wiring (on 2 busy cores the per-wiring loop cost 5× the CPU of the batch).
    """
    import torch

    assert cap.input_ids is not None  # _skip_reason() skipped files without ids
    ids = cap.input_ids.reshape(-1).long()
    states = _file_states(cap, v, L, any(FINAL_POST in w.refs for w, _ in cands))
    Tm = int(ids.numel()) - 1  # starting positions: fused state t with the embedding of token t + 1
    emb, emb_same = _token_embeddings(E, states, ids, d, tl)
    tids = d.target_ids()
    perm = torch.randperm(Tm, generator=torch.Generator().manual_seed(RANDOM_SEED))
    with torch.inference_mode():
        seq, src, tl.target_kind = _targets(v, L, states, ids, pred)
        tl.target_source = tl.target_source or src
        seq_p, have_p, emb_p = _padded_targets(seq, ids, E, states, emb, Tm, steps)
        start = have_p[:Tm].clone()
        if use_loss_mask and cap.loss_mask is not None:
            start &= cap.loss_mask.reshape(-1)[1:].bool()
        groups = _batch_groups(cands)
        done = 0
        for (order, shifted, pairing), ws in groups.items():
            # the shift control (tenstorrent/vllm#442's "shifted target"): the same fused states, embeddings and
            # positions; step j of row t scored against the verifier's argmax at t + 2 + j (one token later) and
            # steps >= 1 fed the embedding of that shifted label (probe_wirings' docstring says why this way)
            o = 1 if shifted else 0
            tgt = [seq_p[o + j:o + j + Tm] for j in range(steps)]
            have = [have_p[o + j:o + j + Tm] for j in range(steps)]
            feed = [emb_p[o + j - 1:o + j - 1 + Tm] for j in range(1, steps)]
            first = emb
            if pairing == PAIR_SAME:  # the token stream one behind: row t gets token t's embedding, step j the
                first, feed = emb_same, [emb, *feed][:steps - 1]  # token step j - 1 would have used
            step = _batch_size(d, Tm, steps)
            for a in range(0, len(ws), step):
                chunk = ws[a:a + step]
                c = len(chunk)
                _score_chunk(d, chunk, states, perm, start, tgt, have, first, feed, order, tids, topk, tl)
                done += c
                tick(done)
    cap.check_unchanged()  # a file truncated under its map (any thread) or rewritten meanwhile scores nothing
