"""Claims: what each slot is *said* to be, and who says so — the thing a verdict checks the evidence against.

A claim is an r (``forensics.layers``: 0 embedding, k block k's output, ``final_post`` after the final norm)
with its source:

* ``sidecar``: the file's own record (``capture.json`` ``r``; speculators legacy ``data_config.json``
  ``hidden_states.layer_ids``, read as r = id + 1, speculators ``tests/datagen/test_vllm_hidden_states.py``);
* ``format``: the format's definition (SpecForge's ``hidden_state`` is the post-norm final state,
  ``scripts/prepare_hidden_states.py``; speculators' last slot is the training target at r = L, pre-norm,
  speculators#313 / #353);
* ``user``: ``--layers`` / ``--expect`` (a claim like any other);
* ``draft config``: a draft's layer ids read through a named trainer's convention (:func:`draft_ids_r`);
* ``served capture``: a capture of what an engine fed the draft.

One vocabulary of trainers and engines (``TRAINERS``, ``ENGINES``: the argparse choices of every command)
and one function that turns a draft config's ids into r (:func:`draft_ids_r`), so ``fingerprint --draft``,
``audit`` and ``probe`` never read the same ids two ways.

Example:
    >>> c = user_claims("3,16,28,30")
    >>> [x.label for x in c.slots], c.source.value
    (['L3', 'L16', 'L28', 'L30'], 'user')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from ..errors import ForensicsError
from ..layers import FINAL_POST, R, parse_layer_list, r_label
from ..models import conventions as cv

TRAINERS = tuple(dict.fromkeys([*cv.TRAINERS, *cv.ID_TRAINERS]))  # --trainer choices, every command
ENGINES = tuple(cv.ENGINES)  # --engine choices, every command
# The formats whose last slot is claimed as the training target at r = L pre-norm: the readers of speculators' v1 and
# current data apply the verifier's norm to it (speculators#313, #353). Not v0 ({hidden_state [T, k·H], target}):
# #313 removed v0 together with adding that norm, so every trainer that read v0 put lm_head on the target as
# stored; a post-norm target is right for it and a pre-norm one is the logit-lens bug #313 fixed. Its target is
# left unclaimed and named by the evidence, never failed against a convention it did not have.
SPECULATORS_FORMATS = ("speculators-v1", "speculators")


class ClaimSource(StrEnum):
    """Who says what a slot is."""

    SIDECAR = "sidecar"
    FORMAT = "format"
    USER = "user"
    DRAFT = "draft config"
    SERVED = "served capture"
    STAMP = "stamp"


@dataclass(frozen=True)
class Claim:
    """One slot's claimed r, where the claim comes from (``source``) and how it was read (``detail``)."""

    r: R
    source: ClaimSource
    detail: str

    @property
    def label(self) -> str:
        return r_label(self.r)

    def to_dict(self) -> dict:
        return {"r": self.r, "label": self.label, "source": self.source.value, "detail": self.detail}


@dataclass
class Claims:
    """The claim checked for every slot, in stored order (None: nothing is claimed for that slot)."""

    slots: list[Claim | None]
    source: ClaimSource
    detail: str
    notes: list[str] = field(default_factory=list)

    @property
    def rs(self) -> list[R | None]:
        return [None if c is None else c.r for c in self.slots]

    @property
    def labels(self) -> list[str | None]:
        return [None if c is None else c.label for c in self.slots]

    def describe(self) -> str:
        """``[L3, L16, L28, L30] (user: --layers)``."""
        return f"[{', '.join(lab or '?' for lab in self.labels)}] ({self.source.value}: {self.detail})"

    def to_dict(self) -> dict:
        return {"source": self.source.value, "detail": self.detail, "r": self.rs, "labels": self.labels,
                "slots": [None if c is None else c.to_dict() for c in self.slots], "notes": list(self.notes)}


def parse_layers(layers: Any) -> list[R] | None:
    """``[0,3,16,28]``, ``"0,3,16,28"`` or ``"embed,L3,L16,L28"`` → r list (``forensics.layers.parse_layer_list``)."""
    return parse_layer_list(layers, "claimed layers")


def user_claims(layers: Any, flag: str = "--layers") -> Claims:
    """The user's list (``--layers`` / ``--expect`` / ``layers=``) as claims, one per slot in stored order."""
    rs = parse_layers(layers) or []
    shown = layers if isinstance(layers, str) else ",".join(str(x) for x in rs)
    said = f"{flag}{shown}" if flag.endswith("=") else f"{flag} {shown}"  # layers=3,16 (Python), --layers 3,16
    return Claims([Claim(r, ClaimSource.USER, said) for r in rs], ClaimSource.USER, said)


def capture_claims(cap: Any, num_layers: int | None = None) -> Claims | None:
    """What the capture says about itself: its sidecar r, else the format's definition of a slot.

    ``None`` when neither says anything about any slot.
    """
    L = num_layers or getattr(cap, "num_layers", None)
    meta = getattr(cap, "meta", None) or {}
    sidecar = "capture.json r" if isinstance(meta.get("r"), list) else (
        f"data_config.json layer_ids {cap.declared_layers} (speculators legacy generator: r = id + 1)"
        if cap.declared_layers is not None else "sidecar")
    out: list[Claim | None] = []
    for i, s in enumerate(cap.slots):
        if s.declared_r is not None:
            out.append(Claim(s.declared_r, ClaimSource.SIDECAR, sidecar))
        elif s.claimed == FINAL_POST:
            out.append(Claim(FINAL_POST, ClaimSource.FORMAT, f"{cap.format} stores the post-norm final state "
                                                             f"in `{s.name}`"))
        elif cap.format in SPECULATORS_FORMATS and i == len(cap.slots) - 1 and len(cap.slots) > 1 and L:
            out.append(Claim(L, ClaimSource.FORMAT, f"{cap.format}'s last slot is the training target, r = L "
                                                    "pre-norm (speculators#313, #353)"))
        else:
            out.append(None)
    if all(c is None for c in out):
        return None
    main = next(c for c in out if c is not None)
    src = ClaimSource.SIDECAR if any(c is not None and c.source is ClaimSource.SIDECAR for c in out) else main.source
    return Claims(out, src, sidecar if src is ClaimSource.SIDECAR else main.detail)


# ------------------------------------------------------------------------------ trainers, engines, drafts
@dataclass(frozen=True)
class DraftIds:
    """A draft config's layer ids as its trainer wrote them, and the r they mean."""

    trainer: str
    key: str  # the config key read
    ids: list[int]
    r: list[R | None]
    rule: str  # how ids become r, with its source


@cv.resolve_names("trainer")
def draft_ids_r(trainer: cv.SystemName | None, info: Any, num_layers: int) -> DraftIds | None:
    """The r a draft config's ids mean to the trainer that wrote them — the one reading every command uses.

    * speculators (v1 and current) record vLLM ids at the top level (speculators#379: "match the defaults
      vllm use"), r = id; the legacy generator's id + 1 applies to its *data* sidecar
      (``data_config.json``), not to a draft config.
    * SpecForge writes the nested ``eagle_config`` ids that SGLang reads with + 1 (r = id + 1,
      ``resolve_eagle_capture_layers``).

    Falls back to the other key when the trainer's own key is absent; None when the config has no ids.
    ``trainer``: any name or alias, or a ``System`` (None: speculators); an engine is refused.
    """
    tsys = cast("cv.System | None", trainer) or cv.SPECULATORS  # resolved on entry
    if tsys.is_engine:
        raise ForensicsError(f"unknown trainer {tsys.given!r}; expected one of {list(TRAINERS)}")
    t = tsys.data_format or tsys.name  # named as its data format is: speculators-legacy → speculators-v1
    L = int(num_layers)
    if t in ("speculators-v1", "speculators", "specforge"):
        order = [cv.NESTED_KEY, cv.TOP_KEY] if t == "specforge" else [cv.TOP_KEY, cv.NESTED_KEY]
    else:  # the key the registry says this trainer writes, then the two EAGLE-3 keys
        order = [*tsys.rule().keys, cv.TOP_KEY, cv.NESTED_KEY]
    found = {cv.TOP_KEY: info.ids_top, cv.NESTED_KEY: info.ids_nested}
    key, ids = next(((k, found.get(k, cv.get_key(info.config, k))) for k in dict.fromkeys(order)
                     if found.get(k, cv.get_key(info.config, k))), (None, None))
    if not ids or key is None or not isinstance(ids, list):
        return None
    ids = cv.int_ids(list(ids))
    rs: list[R | None]
    if t == "specforge":
        try:
            rs = list(tsys.to_r(ids, L))
        except ForensicsError:  # not a list SpecForge would accept: read as SGLang would (+1)
            rs = [i + 1 if 0 <= i + 1 <= L else None for i in ids]
        rule = "SpecForge nested ids, r = id + 1 (SGLang's +1 / HF hook on layers[id])"
    elif t in ("speculators-v1", "speculators"):
        rs = list(cv.VLLM.to_r(ids, L))
        rule = f"{t} records vLLM ids, r = id (speculators#379)"
        fc = getattr(info, "fc_aux_count", None)
        if len(ids) >= 2 and ids[-1] == L and (fc is None or fc == len(ids) - 1):
            # the data's ids with --include-last-layer's L (the training target); training got them without it
            rs = rs[:-1]
            rule += (f"; the last id {L} is the final layer, the training target that --include-last-layer "
                     "appends, not an fc input (speculators#839)")
    else:
        rs = list(tsys.to_r(ids, L))
        rule = f"{t}'s numbering ({tsys.rule().source})"
    return DraftIds(t, key, ids, rs, rule)


def draft_claims(info: Any, trainer: cv.SystemName | None, num_layers: int, capture: Any = None) -> Claims:
    """A draft config's ids as claims on the training data's slots (plus the format's target slot)."""
    d = draft_ids_r(trainer, info, num_layers)
    if d is None:
        raise ForensicsError("the draft config has no layer ids (neither "
                             f"`{cv.TOP_KEY}` nor `{cv.NESTED_KEY}`)", path=getattr(info, "path", None))
    detail = f"draft config ids {d.ids} (`{d.key}`) read as {d.trainer}: {d.rule}"
    out: list[Claim | None] = [None if r is None else Claim(r, ClaimSource.DRAFT, detail) for r in d.r]
    return with_format_target(Claims(out, ClaimSource.DRAFT, detail), capture, num_layers)


def with_format_target(claims: Claims, capture: Any, num_layers: int | None) -> Claims:
    """Claims on the fc inputs only (a draft's ids), plus the capture's own target slot when it has one more slot:
    speculators' last slot is the target at r = L, SpecForge's ``hidden_state`` the post-norm final state."""
    if capture is None or len(capture.slots) != len(claims.slots) + 1:
        return claims
    last = capture.slots[-1]
    if capture.format in SPECULATORS_FORMATS and num_layers:
        extra = Claim(int(num_layers), ClaimSource.FORMAT, f"{capture.format}'s last slot is the training target, "
                      "r = L pre-norm (speculators#313, #353)")
    elif last.claimed == FINAL_POST:
        extra = Claim(FINAL_POST, ClaimSource.FORMAT, f"{capture.format} stores the post-norm final state in "
                      f"`{last.name}`")
    else:
        return claims
    return Claims([*claims.slots, extra], claims.source, claims.detail, list(claims.notes))


def pick_claims(user: Claims | None, draft: Claims | None, capture: Claims | None) -> Claims | None:
    """The claim list a verdict checks: the user's, else a draft's, else the capture's own."""
    return user or draft or capture


def labels_of(rs: Sequence[R | None]) -> list[str]:
    return ["?" if r is None else r_label(r) for r in rs]


__all__ = ["Claim", "Claims", "ClaimSource", "TRAINERS", "ENGINES", "user_claims", "capture_claims",
           "draft_claims", "draft_ids_r", "with_format_target", "DraftIds",
           "parse_layers", "pick_claims"]
