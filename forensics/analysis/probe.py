"""Probe: run a trained EAGLE-3 draft on capture data under candidate wirings and rank them.

The seed's decisive experiment as a function: the same draft scored 34.1 % next-token accuracy fed
``cat([L3, L31, L59])`` and 76.9 % fed ``cat([embed, L3, L31])``. For every candidate wiring (an ordered
list of captured slots, named by r) the draft runs at training-time step 0 with speculators'
``shift_batch`` pairing: fused states at position t + embedding of token t+1 → a guess for the token
after t+1. The guess is scored against the **verifier's own prediction** ``argmax lm_head(norm(r=L))``
when a model is given (the draft's training target, speculators#313), else against the **actual next
token** (``ResultProbe.target`` says which).

Example:
    >>> res = probe("sample_data/draft_eagle3", "sample_data/speculators_v1", model="default")  # doctest: +SKIP
    >>> res.best["label"], round(res.best["top1"], 3)                                            # doctest: +SKIP
    ('embed+L3+L16', 0.52)
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError
from forensics.io.capture import Capture
from forensics.layers import FINAL_POST, parse_r, r_label
from forensics.models.draft import Draft, load_draft

if TYPE_CHECKING:  # pragma: no cover
    from forensics.models.verifier import Verifier

TOPK = 5  # top-k agreement: the verifier's token among the draft's k best guesses
MAX_CANDIDATES = 24  # bound on the "auto" candidate set
Z95 = 1.96  # Wilson interval z for the 95 % CIs used to call a winner
MIN_POSITIONS = 200  # fewer scored positions than this: warn that the ranking is noisy
ENGINE_PLANS = (("vllm", None), ("sglang", "pre-25454"), ("sglang", "post-25454"), ("speculators", None),
                ("specforge", None))
TARGET_VERIFIER = "verifier"
TARGET_NEXT = "next_token"
BATCH_FLOATS = 2**26  # fp32 activations of one batched draft forward (256 MiB): all 24 sample candidates fit
HEAD_ROWS = 1024  # rows per lm_head block: 1024 × a 128k vocab = 0.5 GiB of logits at most, 8 MiB at Vd = 2048
_TRAINERS = {"speculators-v1": "speculators-v1", "speculators": "speculators", "specforge": "specforge"}


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``k / n``."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def wiring_label(rs: list) -> str:
    return "+".join(r_label(r) if not (isinstance(r, str) and r.startswith("slot")) else r for r in rs)


@dataclass
class ProbeResult:
    """Ranked wirings (``rows``, best first), what they were scored against, the best as engine ids."""

    draft: dict
    rows: list[dict]
    target: str  # "verifier" | "next_token"
    target_source: str
    embed_source: str
    files: list[str]
    positions: int
    num_layers: int | None
    topk: int = TOPK
    ids_per_engine: dict | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> dict | None:
        return self.rows[0] if self.rows else None

    @property
    def clear_winner(self) -> bool:
        """True when the best wiring's top-1 CI does not overlap the runner-up's."""
        if len(self.rows) < 2:
            return bool(self.rows)
        return self.rows[0]["top1_ci"][0] > self.rows[1]["top1_ci"][1]

    def to_dict(self) -> dict:
        return {"draft": self.draft, "target": self.target, "target_source": self.target_source,
                "embed_source": self.embed_source, "files": self.files, "positions": self.positions,
                "num_layers": self.num_layers, "topk": self.topk, "rows": self.rows, "best": self.best,
                "clear_winner": self.clear_winner, "ids_per_engine": self.ids_per_engine,
                "warnings": self.warnings, "notes": self.notes}

    def table(self) -> list[list[str]]:
        from forensics.views.probe import table

        return table(self)

    def __repr__(self) -> str:
        from forensics.views.probe import text

        return text(self)

    def explain(self) -> str:
        """The ranking with the notes behind it (how the declared wiring was read, skipped files)."""
        from forensics.views.probe import text

        return text(self, verbose=True)

    def _repr_html_(self) -> str:
        from forensics.views.probe import html

        return html(self)


# ------------------------------------------------------------------------------ helpers --

def _captures(data) -> list[Capture]:
    from forensics.io.formats import iter_files, load

    if isinstance(data, Capture):
        return [data]
    if isinstance(data, (list, tuple)):
        return [c for d in data for c in _captures(d)]
    files = list(iter_files(os.fspath(data)))
    if not files:
        raise ForensicsError("no capture files found", path=os.fspath(data))
    return [load(f) for f in files]


def _slot_refs(cap: Capture) -> list:
    """r of every slot (declared by the data); ``"slot{i}"`` where the data declares none."""
    return [s.declared_r if s.declared_r is not None else f"slot{s.index}" for s in cap.slots]


def _declared_r(d: Draft, L: int | None) -> tuple[list | None, str]:
    from forensics.models import conventions as cv

    if L is None:
        return None, "no L"
    if d.declared_ids is None:
        return cv.default_r(L), "engine default (no ids in the draft config)"
    # the one draft-id reader of every command (forensics.analysis.claims.draft_ids_r): speculators / vLLM
    # top-level ids r = id; SpecForge / SGLang nested ids r = id + 1
    from types import SimpleNamespace

    from forensics.analysis.claims import draft_ids_r

    system = "speculators" if d.trainer in ("speculators", "vllm") else "specforge"
    top = system == "speculators"
    info = SimpleNamespace(ids_top=d.declared_ids if top else None, ids_nested=None if top else d.declared_ids,
                           config={})
    try:
        read = draft_ids_r(system, info, L)
    except ForensicsError:
        return None, "unreadable ids"
    if read is None:
        return None, "unreadable ids"
    rs = read.r
    return (None if any(r is None for r in rs) else list(rs)), f"config ids {d.declared_ids} read as {system}"


def auto_candidates(refs: list, k: int, declared: list | None, trainer_fc: list | None, L: int | None = None,
                    cap_max: int = MAX_CANDIDATES) -> list[tuple[tuple, list[str]]]:
    """A bounded, ordered set of wirings (tuples of slot refs) with tags saying why each is there.

    Priority: the declared wiring, the trainer's view, the engines' default r = {2, L//2, L−3} and its
    SGLang +1 reading, shifts ±1/±2 of the declared wiring and the trainer's view, the last k slots,
    consecutive windows and subsets (small slot sets only), then permutations; at most ``cap_max``.
    """
    avail = [r for r in refs if r != FINAL_POST]
    order = sorted(r for r in avail if isinstance(r, int)) + [r for r in avail if not isinstance(r, int)]
    small = len(order) <= k + 4
    out: dict[tuple, list[str]] = {}

    def add(w, tag):
        w = tuple(w)
        if len(w) == k and len(set(w)) == k and all(r in avail for r in w) and (w in out or len(out) < cap_max):
            out.setdefault(w, [])
            if tag not in out[w]:
                out[w].append(tag)

    if declared:
        add(declared, "declared")
    if trainer_fc:
        add(trainer_fc, "trainer view")
    if L is not None and k == 3:
        from forensics.models.conventions import default_r

        add(default_r(L), "engine default")  # vLLM / SGLang without ids / SpecForge / EAGLE
        add([r + 1 for r in default_r(L)], "engine default +1")  # SGLang's +1 on default-valued ids
    for base, name in ((declared, "declared"), (trainer_fc, "trainer view")):
        if base and all(isinstance(r, int) for r in base):
            for s in (1, -1, 2, -2):
                add([r + s for r in base], f"{name} shifted {s:+d}")
    add(order[-k:], "last slots")
    if small:
        for i in range(len(order) - k + 1):
            add(order[i:i + k], "window" if i else "first slots")
        for comb in itertools.combinations(order, k):
            add(comb, "subset")
    for base in (declared, trainer_fc):
        if base:
            for perm in itertools.permutations(base):
                add(perm, "permutation")
    if len(order) <= k + 2:
        for comb in itertools.combinations(order, k):
            for perm in itertools.permutations(comb):
                add(perm, "permutation")
    return list(out.items())


def _parse_candidates(spec, refs: list) -> list[tuple[tuple, list[str]]]:
    if isinstance(spec, str):
        groups = [g for g in spec.split(";") if g.strip()]
        spec = [[x for x in g.replace(" ", "").split(",") if x] for g in groups]
    out = []
    for w in spec:
        rs = []
        for x in w:
            x = x if not isinstance(x, str) or not x.startswith("slot") else x
            rs.append(x if isinstance(x, str) and x.startswith("slot") else parse_r(x))
        missing = [r for r in rs if r not in refs]
        if missing:
            raise ForensicsError(f"candidate {wiring_label(rs)}: r {[r_label(m) for m in missing]} not in the data "
                                 f"(slots: {wiring_label(refs)})")
        out.append((tuple(rs), ["given"]))
    return out


def _verifier(model: Any) -> Verifier | None:
    if model is None:
        return None
    from forensics.models.verifier import open_verifier

    return open_verifier(model)


def _ids_per_engine(best: list, L: int | None, arch: str | None) -> tuple[dict | None, list[str]]:
    from forensics.models import conventions as cv

    if L is None:
        return None, ["L (the verifier's layer count) is unknown: no engine ids (pass --model or a capture.json)"]
    if not all(isinstance(r, int) for r in best):
        return None, [f"best wiring {wiring_label(best)} has slots without a declared r: no engine ids"]
    out = {}
    for system, version in ENGINE_PLANS:
        name = system if version is None else f"{system} {version}"
        try:
            out[name] = cv.from_r(system, best, L, version=version, arch=arch).to_dict()
        except ForensicsError as e:
            out[name] = {"ids": None, "key": None, "caveat": str(e)}
    return out, []


# -------------------------------------------------------------------------------- probe --

@dataclass
class _Scores:
    """Running (top-1, top-k, n) counts per candidate wiring, and where embeddings and targets came from."""

    counts: dict[tuple, list[int]]
    embed_source: str | None = None
    target_source: str | None = None
    target_kind: str = TARGET_NEXT
    used: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _check_options(topk: Any, max_samples: Any) -> None:
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ForensicsError(f"topk must be a whole number >= 1, got {topk!r}")
    if max_samples is not None and (isinstance(max_samples, bool) or not isinstance(max_samples, int)
                                    or max_samples < 1):
        raise ForensicsError(f"max_samples (--samples) must be a whole number >= 1, got {max_samples!r}")


def _target_context(v: Verifier | None, caps: list[Capture]) -> tuple[int | None, str | None]:
    """The verifier's layer count L and its architecture family (for the engines' id rules)."""
    facts = v.facts if v is not None else None
    L = facts["num_layers"] if facts else next((c.num_layers for c in caps if c.num_layers), None)
    from forensics.models.conventions import arch_family

    arch = arch_family([facts["architecture"]], facts["model_type"]) if facts else None
    return L, arch


def _candidate_wirings(d: Draft, caps: list[Capture], candidates: str | list, L: int | None
                       ) -> tuple[list[tuple[tuple, list[str]]], list | None, list[str]]:
    """The wirings to score, the declared wiring (or None) and the notes about both."""
    refs = _slot_refs(caps[0])
    k = d.num_aux
    declared, declared_how = _declared_r(d, L)
    trainer = _TRAINERS.get(caps[0].format)
    if trainer is not None:
        from forensics.models.conventions import trainer_view

        fc = [refs[i] for i in trainer_view(trainer, len(refs)).fc_slots][:k]
    else:
        fc = [r for r in refs if r != FINAL_POST][:k]
    cands = auto_candidates(refs, k, declared, fc, L) if candidates == "auto" else _parse_candidates(candidates, refs)
    if not cands:
        raise ForensicsError(f"no candidate wiring of {k} slots can be built from the data's slots "
                             f"{wiring_label(refs)}", path=caps[0].path)
    notes = [f"declared wiring: {declared_how}" + (f" → {wiring_label(declared)}" if declared else "")]
    if declared and tuple(declared) not in dict(cands):
        notes.append(f"declared wiring {wiring_label(declared)} is not available in the data (slots "
                     f"{wiring_label(refs)})")
    return cands, declared, notes


def _skip_reason(cap: Capture, d: Draft, E: Any, cands: list) -> str | None:
    """Why a capture file cannot be scored (it is skipped with a note), or None."""
    name = os.path.basename(cap.path)
    ids = cap.input_ids
    if ids is None or cap.num_tokens < 3:
        return f"{name}: no input_ids or < 3 tokens"
    if not cap.ids_match_rows:  # rows ≠ ids: which row is which token is not known (analysis.rows: row_count)
        return f"{name}: {int(ids.numel())} input_ids for {cap.num_tokens} rows (row_count)"
    ids = ids.reshape(-1).long()
    vocab = int(E.shape[0]) if E is not None else d.target_vocab_size
    if vocab and bool(((ids < 0) | (ids >= vocab)).any()):
        bad = ids[(ids < 0) | (ids >= vocab)]
        return (f"{name}: {int(bad.numel())} input_ids outside the vocabulary [0, {vocab}) (e.g. {int(bad[0])}: "
                "padding such as -100?)")
    crefs = _slot_refs(cap)
    if any(w_r not in crefs for w, _ in cands for w_r in w):
        return f"{name}: slots {wiring_label(crefs)} differ from the first file"
    if cap.hidden_size != d.hidden_size:
        raise ForensicsError(f"capture hidden size {cap.hidden_size} != draft hidden size {d.hidden_size}",
                             path=cap.path)
    return None


def _runs_verifier(cap: Capture, L: int | None) -> bool:
    """Whether the verifier's prediction on ``cap`` needs a forward pass (r = L was not captured)."""
    return L is None or L == 0 or L not in _slot_refs(cap)


def _targets(v: Verifier | None, L: int | None, states: dict, ids: Any, pred: Any) -> tuple[Any, Any, str, str]:
    """Per fused position t: the token the draft should predict, which positions count, and their source.

    With a model: the verifier's own prediction (argmax of lm_head(norm(r = L)) when r = L was captured, else
    ``pred``, the argmax of a forward pass); without: the actual token two ahead (the draft at t predicts
    t + 2 in EAGLE's step 0).
    """
    import torch

    T = int(ids.numel())
    if v is None:
        target = torch.cat([ids[2:], ids.new_zeros(1)])
        valid = torch.ones(T - 1, dtype=torch.bool)
        valid[-1] = False
        return target, valid, "input_ids shifted by two (no model given)", TARGET_NEXT
    if L in states and L != 0:
        last = states[L].float()
        g, eps = v.norm_weight, v.norm_eps
        pred = ((g * last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + eps)) @ v.lm_head.T).argmax(-1)
        src = f"lm_head(norm(captured r={L})) of the model"
    else:
        src = "model run on the capture's input_ids"
    target = pred[1:]  # position t+1's prediction, paired with fused state t
    return target, torch.ones(T - 1, dtype=torch.bool), src, TARGET_VERIFIER


def _batch_size(d: Draft, T: int) -> int:
    """Candidates per batched draft forward: activations of one candidate ~ T·(k·H + 8·H) floats plus the
    attention scores heads·T², kept under ``BATCH_FLOATS`` (the logits are taken in ``HEAD_ROWS`` row blocks)."""
    per = T * (d.num_aux + 8) * d.hidden_size + d.num_heads * T * T
    return max(1, BATCH_FLOATS // max(per, 1))


def _agreement(d: Draft, hidden: Any, target: Any, valid: Any, tids: Any, topk: int) -> Any:
    """``[c, 3]`` counts (top-1 hits, top-k hits, scored positions) of ``hidden`` ``[c, T, H]`` against
    ``target`` ``[T]``; ``lm_head`` runs over ``HEAD_ROWS`` rows at a time."""
    import torch

    from forensics.models.verifier import row_blocks

    head = d.weights["lm_head.weight"].T
    k = min(topk, int(head.shape[-1]))
    c, T = int(hidden.shape[0]), int(hidden.shape[1])
    flat, tgt = hidden.reshape(c * T, -1), target.repeat(c)
    ok_all, top_all = torch.empty(c * T, dtype=torch.bool), torch.empty(c * T, k, dtype=torch.long)
    for b in row_blocks(c * T, HEAD_ROWS):
        logits = flat[b] @ head
        top_all[b] = logits.topk(k, dim=-1).indices
        ok_all[b] = torch.isfinite(logits).all(-1)  # overflowing states give NaN logits: not scored
    top = tids[top_all]
    ok = ok_all & valid.repeat(c)
    hit1 = (top[:, 0] == tgt) & ok
    hitk = (top == tgt[:, None]).any(-1) & ok
    return torch.stack([hit1, hitk, ok]).reshape(3, c, T).sum(-1).T


def _score_file(cap: Capture, d: Draft, E: Any, v: Verifier | None, L: int | None, pred: Any, cands: list,
                sc: _Scores, topk: int, use_loss_mask: bool, tick: Callable[[int], None]) -> None:
    """Add one capture file's agreement counts for every candidate wiring to ``sc`` (``pred``: the verifier's
    predictions on the file when it needs a forward pass, else None).

    All candidates of a file run as one batched draft forward (chunks of ``_batch_size``): the same matmul rows
    as one forward per candidate, so the same logits, with one set of kernel launches instead of one per
    candidate (on 2 busy cores the per-candidate loop cost 5× the CPU of the batch, measured).
    """
    import torch

    from forensics.models.draft import draft_hidden

    assert cap.input_ids is not None  # _skip_reason() skipped files without ids
    ids = cap.input_ids.reshape(-1).long()
    states = {r: cap.slots[i].tensor() for i, r in enumerate(_slot_refs(cap))}
    if E is not None:
        emb = E[ids[1:]]
    elif 0 in states:
        emb, sc.embed_source = states[0][1:].float(), "the capture's r=0 slot"
    else:
        raise ForensicsError("the draft ships no embed_tokens and the data has no r=0 slot: pass --model",
                             path=d.path)
    tids = d.target_ids()
    with torch.inference_mode():
        target, valid, src, sc.target_kind = _targets(v, L, states, ids, pred)
        if use_loss_mask and cap.loss_mask is not None:
            valid &= cap.loss_mask.reshape(-1)[1:].bool()
        prev = {r: states[r][:-1].float() for r in {r for w, _ in cands for r in w}}
        for x in prev.values():  # a position with a non-finite state scores nothing
            valid &= torch.isfinite(x).all(-1)
        sc.target_source = sc.target_source or src
        step = _batch_size(d, int(emb.shape[0]))
        for a in range(0, len(cands), step):
            chunk = cands[a:a + step]
            fused = torch.stack([torch.cat([prev[r] for r in w], dim=-1) for w, _ in chunk])
            hidden = draft_hidden(d, fused, emb.expand(len(chunk), -1, -1))
            for (w, _), row in zip(chunk, _agreement(d, hidden, target, valid, tids, topk).tolist(), strict=True):
                c = sc.counts[w]
                for n in range(3):
                    c[n] += int(row[n])
            tick(a + len(chunk))


def _tick(progress: Callable[[int, int], None] | None, done: int, total: int, j: int) -> None:
    if progress is not None:
        progress(done + j, total)


def _ranked_rows(cands: list, counts: dict[tuple, list[int]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for w, tags in cands:
        c1, ck, n = counts[w]
        rows.append({"wiring": list(w), "label": wiring_label(list(w)), "tags": tags, "top1": c1 / n if n else 0.0,
                     "top1_ci": list(wilson(c1, n)), "topk": ck / n if n else 0.0, "n": n, "correct": c1})
    rows.sort(key=lambda r: (-r["top1"], -r["topk"]))
    return rows


def _ranking_warnings(rows: list[dict], declared: list | None, counts: dict) -> list[str]:
    """What limits the ranking: overlapping intervals, too few positions, a declared wiring that lost."""
    warnings = []
    if len(rows) > 1 and rows[0]["top1_ci"][0] <= rows[1]["top1_ci"][1]:
        warnings.append(f"no wiring is clearly best: {rows[0]['label']} {100 * rows[0]['top1']:.1f}% "
                        f"[{100 * rows[0]['top1_ci'][0]:.1f}, {100 * rows[0]['top1_ci'][1]:.1f}] and "
                        f"{rows[1]['label']} {100 * rows[1]['top1']:.1f}% [{100 * rows[1]['top1_ci'][0]:.1f}, "
                        f"{100 * rows[1]['top1_ci'][1]:.1f}] overlap (95% Wilson CIs); add samples")
    if rows[0]["n"] < MIN_POSITIONS:
        warnings.append(f"only {rows[0]['n']} positions scored (< MIN_POSITIONS = {MIN_POSITIONS})")
    if declared and rows[0]["wiring"] != list(declared) and tuple(declared) in counts:
        drow = next(r for r in rows if r["wiring"] == list(declared))
        warnings.append(f"the declared wiring {drow['label']} scores {100 * drow['top1']:.1f}%, below "
                        f"{rows[0]['label']} {100 * rows[0]['top1']:.1f}%: the draft was likely trained on "
                        f"{rows[0]['label']}")
    return warnings


def probe(draft: str | os.PathLike | Draft, data: Any, candidates: str | list = "auto", model: Any = None,
          topk: int = TOPK, max_samples: int | None = None, use_loss_mask: bool = False,
          progress: Callable[[int, int], None] | None = None) -> ProbeResult:
    """Rank candidate wirings of ``draft`` by step-0 agreement on capture ``data``.

    Args:
        draft: draft folder (speculators ``layers.0.*`` or EAGLE/SGLang/SpecForge ``midlayer.*``) or a Draft.
        data: capture file, folder, Capture or list of them (slots named by r via ``capture.json`` /
            ``data_config.json``).
        candidates: ``"auto"`` (declared, trainer's view, shifts, windows, permutations; at most
            ``MAX_CANDIDATES``), or wirings as ``"0,3,16;3,16,28"`` / ``[[0, 3, 16], [3, 16, 28]]``.
        model: None, ``"default"`` (packaged SmolLM2), a model path, a loaded model or a
            :class:`~forensics.models.verifier.Verifier`. With a model the target is the verifier's prediction
            (a Llama safetensors checkpoint runs as plain torch, bit-identical to transformers); without, the
            actual next token.
        topk: k of the top-k agreement. max_samples: use at most this many files.
        use_loss_mask: score only positions whose (shifted) loss mask is set.
        progress: called as ``progress(done, total)`` after each (file, wiring) pair is scored.
    """
    _check_options(topk, max_samples)
    d = draft if isinstance(draft, Draft) else load_draft(draft)
    caps = _captures(data)[:max_samples] if max_samples else _captures(data)
    v = _verifier(model)
    L, arch = _target_context(v, caps)
    cands, declared, notes = _candidate_wirings(d, caps, candidates, L)

    sc = _Scores(counts={w: [0, 0, 0] for w, _ in cands})  # top1, topk, n
    E = d.embed
    sc.embed_source = "draft checkpoint" if E is not None else None
    if E is None and v is not None:
        E, sc.embed_source = v.embed, "model"
    total = len(caps) * len(cands)
    whys = [_skip_reason(cap, d, E, cands) for cap in caps]
    sc.skipped = [why for why in whys if why is not None]
    seqs = {n: cap.input_ids.reshape(-1).long() for n, cap in enumerate(caps)  # one packed verifier run
            if whys[n] is None and cap.input_ids is not None and v is not None and _runs_verifier(cap, L)}
    preds = dict(zip(seqs, v.predictions(list(seqs.values())), strict=True)) if v is not None and seqs else {}
    for n_cap, cap in enumerate(caps):
        if progress is not None:
            progress(n_cap * len(cands), total)
        if whys[n_cap] is not None:
            continue
        tick = partial(_tick, progress, n_cap * len(cands), total)
        _score_file(cap, d, E, v, L, preds.get(n_cap), cands, sc, topk, use_loss_mask, tick)
        sc.used.append(cap.path)
    if not sc.used:
        raise ForensicsError("no usable capture file: " + "; ".join(sc.skipped[:5]))
    if not any(c[2] for c in sc.counts.values()):
        raise ForensicsError("cannot tell: no position could be scored (every state or draft output is NaN/Inf, "
                             f"or masked); files {', '.join(os.path.basename(u) for u in sc.used[:3])}")

    rows = _ranked_rows(cands, sc.counts)
    res_ids, warnings = _ids_per_engine(rows[0]["wiring"], L, arch)
    warnings += _ranking_warnings(rows, declared, sc.counts)
    notes += [f"skipped {s}" for s in sc.skipped]
    if E is not None and sc.embed_source == "model" and d.target_vocab_size and E.shape[0] != d.target_vocab_size:
        warnings.append(f"model vocab {E.shape[0]} != draft target vocab {d.target_vocab_size}")
    return ProbeResult(draft=d.to_dict(), rows=rows, target=sc.target_kind, target_source=sc.target_source or "",
                       embed_source=sc.embed_source or "?", files=sc.used, positions=rows[0]["n"], num_layers=L,
                       topk=topk, ids_per_engine=res_ids, warnings=warnings, notes=notes)
