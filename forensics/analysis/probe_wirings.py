"""The draft probe's candidates: which captured slots feed ``fc`` and how the draft is fed them.

A candidate (:class:`Wiring`) is more than a layer list. The 2026 wiring bugs (incidents §1.4 of the project's
reference notes; public threads cited inline) were also about *how* the states reach the draft:

- the norm stage of the last slot: the last block's pre-norm output ``L{L}`` or the post-final-norm state
  (``final_post``) — LightLLM#1402, llama.cpp#24025, vllm-mlx#660 flipped it in both directions;
- the first layer's concat order ``[emb, h]`` (EAGLE-3) or ``[h, emb]`` (mlx-lm#1469 swapped it in an MTP head);
- the row pairing: the hidden state of token t with the embedding of token t + 1 (EAGLE's ``shift_batch``), or
  with the embedding of the same token t — the token stream one step behind (ik_llama.cpp#1979 fed same-token
  rows where the previous token's hidden state was expected). Pairing a state with a *later* one instead would
  feed a hidden state no engine has at drafting time (the target has not run on the newest token yet).

Two controls are scored like candidates but never ranked: ``shift`` and ``random`` (the anchor wiring's states
at randomly permuted positions of the same sequence: realistic states, no alignment).

The shift control moves what tenstorrent/vllm#442 moved, in the same direction. Its control column ("ctrl:
shifted target", Qwen3.8-27B MTP, code 0.9076 → 0.0055) keeps the head's inputs as trained and scores the
draft at position p against the target's greedy token one place later (``target_greedy_{p+2}`` instead of
``_{p+1}``). Here the inputs are EAGLE-3's pairing, as speculators' ``shift_batch``
(``models/eagle3/data.py``) aligns ``(x1, g0, y1)``: row t gets the aux states of token t and the embedding
of token t + 1, and must draft the verifier's argmax at t + 1. The control keeps the fused states, the
embeddings and the positions of every row. Only the labels move one token into the future: step j of row t
is scored against the verifier's argmax at t + 2 + j instead of t + 1 + j. From step 1 on the chain is fed
the embedding of the shifted label it just matched; a chain goes on only while draft and label agree, as for
every row. The other direction, a label one token earlier, is no control: at t the verifier's argmax is
(on its own greedy text) token t + 1, the very token whose embedding row t is fed, so a draft that echoes
its input would score high. Shifting the *inputs* instead is a wiring, not a control: the same-token
pairing below (the token stream one behind, ik_llama.cpp#1979) is scored as a candidate.

Example:
    >>> Wiring((0, 3, 16)).label, Wiring((0, 3, 16), order="[h, emb]").label
    ('embed+L3+L16', 'embed+L3+L16 [h, emb]')
    >>> Wiring((0, 3, 16), control="shift").label
    'shift control (embed+L3+L16)'
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST, R, parse_layer_list, r_label
from forensics.models.conventions import default_r
from forensics.models.draft import ORDER_EMB_H, ORDER_H_EMB

MAX_CANDIDATES = 24  # bound on the "auto" layer-list candidates (variants and controls come on top)
PAIR_PREVIOUS = "previous-token"  # fused state at t with the embedding of token t+1 (EAGLE shift_batch)
PAIR_SAME = "same-token"  # fused state at t with the embedding of token t (the token stream one step behind)
CONTROL_SHIFT = "shift"
CONTROL_RANDOM = "random"
CONTROLS = (CONTROL_SHIFT, CONTROL_RANDOM)


def ref_label(r: Any) -> str:
    """One slot ref of a wiring: an r's label, or ``slot{i}`` as it is (a slot the data declares no r for)."""
    return r if isinstance(r, str) and r.startswith("slot") else r_label(r)


def wiring_label(rs: list) -> str:
    return "+".join(ref_label(r) for r in rs)


@dataclass(frozen=True)
class Wiring:
    """One way to feed the draft: slot refs (r, in concat order), first-layer order, row pairing, control."""

    refs: tuple
    order: str = ORDER_EMB_H
    pairing: str = PAIR_PREVIOUS
    control: str | None = None

    @property
    def label(self) -> str:
        base = wiring_label(list(self.refs))
        if self.control is not None:
            return f"{self.control} control ({base})"
        extra = [self.order] if self.order != ORDER_EMB_H else []
        extra += [self.pairing] if self.pairing != PAIR_PREVIOUS else []
        return " ".join([base, *extra])

    @property
    def norm(self) -> str:
        """``post-norm`` when the last state is taken after the final norm, else ``pre-norm``."""
        return "post-norm" if FINAL_POST in self.refs else "pre-norm"


Candidates = list[tuple[Wiring, list[str]]]


def auto_candidates(refs: list, k: int, declared: list | None, trainer_fc: list | None,  # noqa: C901
                    L: int | None = None,
                    cap_max: int = MAX_CANDIDATES) -> list[tuple[tuple, list[str]]]:
    """A bounded, ordered set of layer lists (tuples of slot refs) with tags saying why each is there.

    Priority: the declared wiring, the trainer's view, the engines' default r = {2, L//2, L−3} and its
    SGLang +1 reading, shifts ±1/±2 of the declared wiring and the trainer's view, the last k slots,
    consecutive windows and subsets (small slot sets only), then permutations (concat orders); at most
    ``cap_max``.
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


MAX_GIVEN_CANDIDATES = 64  # wirings a user may list (each is scored on every file: the cost grows with it)


def _wiring(group) -> list:
    """One candidate wiring: a layer list (``forensics.layers.parse_layer_list``, the one parser) whose items may also
    name a stored slot (``slot2``); empty or longer than ``MAX_GIVEN_CANDIDATES``: one error."""
    if isinstance(group, str):
        items = group.replace(",", " ").split()
    else:
        items = [x for x in group if not isinstance(x, str) or x.strip()] if isinstance(group, (list, tuple)) else []
    if not items or len(items) > MAX_GIVEN_CANDIDATES:
        raise ForensicsError(f"--candidates: a wiring is a non-empty list of r values, got {str(group)[:80]!r}")
    return [x.strip() if isinstance(x, str) and x.strip().startswith("slot") else _one_r(x) for x in items]


def _one_r(x) -> R:
    rs = parse_layer_list([x], "--candidates")  # one item: the list parser's one error message
    assert rs is not None
    return rs[0]


def candidate_lists(spec: Any) -> list[list]:
    """The r lists of user-given wirings (``"0,3,16;3,16,28"``, ``"embed,L3,L16"`` or ``[[0, 3, 16], ...]``),
    checked before any file is read: an item that is not an r value, an empty or over-long list is one line."""
    what, given = "--candidates", spec
    if isinstance(spec, str):
        spec = [g for g in spec.split(";") if g.strip()]
    if not isinstance(spec, (list, tuple)) or not spec:
        raise ForensicsError(f"{what}: expected 'auto' or wirings such as '0,3,16;3,16,28', got {str(given)[:80]!r}")
    if len(spec) > MAX_GIVEN_CANDIDATES:
        raise ForensicsError(f"{what}: {len(spec)} wirings, more than the {MAX_GIVEN_CANDIDATES} a probe scores")
    return [_wiring(w) for w in spec]


def parse_candidates(spec, refs: list) -> Candidates:
    """Wirings given by the user: ``"0,3,16;3,16,28"``, ``"embed,L3,L16"`` or ``[[0, 3, 16], ...]``."""
    out = []
    for rs in candidate_lists(spec):
        missing = [r for r in rs if r not in refs]
        if missing:
            raise ForensicsError(f"candidate {wiring_label(rs)}: r {[r_label(m) for m in missing]} not in the data "
                                 f"(slots: {wiring_label(refs)})")
        out.append((Wiring(tuple(rs)), ["given"]))
    return out


def variants(anchor: tuple, L: int | None, post_available: bool, refs: list) -> Candidates:
    """The anchor's twins beyond layer choice: concat order ``[h, emb]``, ``same-token`` pairing, and the
    other norm stage of its last layer (``L{L}`` ↔ ``final_post``) where both can be fed."""
    out: Candidates = [(Wiring(anchor, order=ORDER_H_EMB), ["concat order"]),
                       (Wiring(anchor, pairing=PAIR_SAME), ["row pairing"])]
    if L is not None and L in anchor and post_available:
        out.append((Wiring(tuple(FINAL_POST if r == L else r for r in anchor)), ["norm stage"]))
    elif L is not None and FINAL_POST in anchor and L in refs:
        out.append((Wiring(tuple(L if r == FINAL_POST else r for r in anchor)), ["norm stage"]))
    return out


def controls(anchor: tuple) -> Candidates:
    """The shift control (the anchor's inputs, labels one token later: tenstorrent/vllm#442's shifted target,
    see the module docstring) and the random control (the anchor's states at permuted positions)."""
    return [(Wiring(anchor, control=CONTROL_SHIFT), ["control: targets one token later"]),
            (Wiring(anchor, control=CONTROL_RANDOM), ["control: states at permuted positions"])]


def merge(cands: Candidates, extra: Candidates) -> Candidates:
    """``cands`` + ``extra``; a wiring already present gets the new tags instead of a second row."""
    out = {w: list(t) for w, t in cands}
    for w, tags in extra:
        out.setdefault(w, [])
        out[w] += [t for t in tags if t not in out[w]]
    return list(out.items())


__all__ = ["MAX_CANDIDATES", "PAIR_PREVIOUS", "PAIR_SAME", "CONTROL_SHIFT", "CONTROL_RANDOM", "CONTROLS",
           "Wiring", "Candidates", "wiring_label", "auto_candidates", "parse_candidates", "variants", "controls",
           "merge"]
