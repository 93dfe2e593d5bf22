"""The typed parts of a wiring audit (``AuditResult``): its fc slices, the fix, each side's layers, the context.

Each part's ``to_dict()`` gives the keys the ``hsf audit --json`` document has always had. A side's keys depend
on where its layers came from (``basis``: the draft config, capture files, or nothing), as they did when the
parts were dicts; the fields themselves always exist (None where that source says nothing), so a reader never
asks whether one is there.

Example:
    >>> s = AuditSlice(slice=0, trained_r=0, served_r=3, ok=False, trained_status="exact")
    >>> s.to_dict()
    {'slice': 0, 'trained_r': 0, 'served_r': 3, 'ok': False, 'trained_status': 'exact'}
    >>> TrainedSide(fc_r=[2, 15, 27], source="trainer invocation").to_dict()
    {'fc_r': [2, 15, 27], 'target_r': None, 'source': 'trainer invocation'}
    >>> ServedSide().to_dict()
    {'r': None, 'source': 'none'}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from forensics.layers import R


def _pick(obj: Any, keys: tuple[str, ...]) -> dict:
    return {k: getattr(obj, k) for k in keys}


@dataclass(frozen=True, slots=True)
class AuditSlice:
    """fc input slice ``slice``: the r training fed it, the r serving feeds it, and whether they agree (None:
    cannot tell, one side unknown or only claimed). ``trained_status``: how the trained r is known (``exact``,
    ``measured``, ``declared``, ``layout``, ``config``; ``claimed`` / ``unknown``: no verdict rests on it)."""

    slice: int
    trained_r: R | None
    served_r: R | None
    ok: bool | None
    trained_status: str

    def to_dict(self) -> dict:
        return {"slice": self.slice, "trained_r": self.trained_r, "served_r": self.served_r, "ok": self.ok,
                "trained_status": self.trained_status}


@dataclass(slots=True)
class Fix:
    """The id list to write so ``engine`` serves the trained r (``forensics.models.conventions.compute.from_r``): the
    ids (None when no list can), the key and where it sits, the config fragment, and what to watch for."""

    ids: list[int] | None
    key: str | None
    where: str | None  # "nested" | "top-level" | None
    engine: str
    version: str
    r: list[int]
    caveat: str | None = None
    family: str = "eagle3"
    snippet: dict | None = None
    also: str | None = None  # the other key to make agree (both keys set in the draft config)
    already_set: bool | None = None  # the draft config already holds these ids (None: not checked)

    @classmethod
    def from_plan(cls, plan: Any, **extra: Any) -> Fix:
        """From a ``conventions.IdPlan``."""
        return cls(ids=plan.ids, key=plan.key, where=plan.where, engine=plan.system, version=plan.version,
                   r=list(plan.r), caveat=plan.caveat, family=plan.family, snippet=plan.snippet, **extra)

    def to_dict(self) -> dict:
        d = _pick(self, ("ids", "key", "where", "engine", "version", "r", "caveat", "family", "snippet"))
        if self.also is not None:
            d["also"] = self.also
        if self.already_set is not None:
            d["already_set"] = self.already_set
        return d


@dataclass(slots=True)
class TrainedSide:
    """What the draft's fc consumed: r per fc slice (stored order), the training target, and how each r is known.

    ``basis``: ``none`` (nothing says, or the trainer's invocation alone), ``config`` (the draft config's ids
    read in the trainer's numbering), ``data`` (capture files or a declared layout, cut by the trainer's view).
    """

    fc_r: list | None = None
    target_r: R | None = None
    source: str = "none"
    slot_source: list[str] | None = None  # per stored slot: where its r came from
    fc_status: list[str] | None = None  # per fc slice: exact / measured / declared / layout / config / claimed / …
    trainer: str | None = None
    view: str | None = None  # the source of the trainer's view (which slots feed the fc)
    target_norm: str | None = None  # "pre" / "post": the target the trainer wants
    slots_r: list | None = None  # r of every stored slot
    slots_status: list[str] | None = None
    target_status: str | None = None
    roles: list | None = None  # fingerprinted role per stored slot (capture files only)
    basis: str = "none"

    _KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "none": ("fc_r", "target_r", "source"),
        "config": ("fc_r", "target_r", "source", "slot_source", "fc_status"),
        "data": ("fc_r", "target_r", "source", "slot_source", "trainer", "view", "target_norm", "slots_r",
                 "slots_status", "fc_status", "target_status", "roles"),
    }

    def to_dict(self) -> dict:
        return _pick(self, self._KEYS[self.basis])


@dataclass(slots=True)
class ServedSide:
    """What serving feeds the draft's fc: r per slice and where that comes from.

    ``basis``: ``none`` (unknown), ``config`` (what the engine reads from the draft config: key, ids, version),
    ``capture`` (a capture of the served states compared with the training data, ``--served``: per-slice
    ``ok``, the evidence rows and the distance matrices; ``config_prediction`` is the config's r beside it).
    """

    r: list | None = None
    source: str = "none"
    engine: str | None = None
    version: str | None = None
    arch: str | None = None
    key: str | None = None
    ids: list | None = None
    id_source: str | None = None  # "config" / "default"
    notes: list[str] | None = None
    ok: list[bool | None] | None = None
    distances: list[dict] | None = None  # per served slot: the evidence behind its ok
    matrix: list | None = None  # W1 served × training slot
    distance: str | None = None  # the name of that distance
    threshold: float | None = None
    joined_tokens: int | None = None  # shared token_ids prefix (0: other text)
    cosine: list | None = None  # same text: mean per-token cosine, served × training slot
    rel: list | None = None  # same text: median per-token relative error
    config_prediction: list | None = None
    basis: str = "none"

    _KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "none": ("r", "source"),
        "config": ("r", "source", "engine", "version", "arch", "key", "ids", "id_source", "notes"),
        "capture": ("r", "ok", "source", "distances", "matrix", "distance", "threshold", "notes", "joined_tokens",
                    "cosine", "rel", "config_prediction"),
    }

    def to_dict(self) -> dict:
        return _pick(self, self._KEYS[self.basis])


@dataclass(slots=True)
class AuditContext:
    """What the audit assumed: engine and version, trainer, the target's L, H and model path, the draft config.

    ``basis``: ``audit``; ``preflight`` (the data-free doctor, which adds the drafter ``family``); ``no_rule``
    (the doctor found no registry rule for the family: no draft or target read).
    """

    engine: str | None = None
    engine_version: str | None = None
    trainer: str | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    arch: str | None = None
    draft: dict | None = None  # ``DraftInfo.to_dict()``
    target: dict | None = None  # ``target_facts`` of the target config
    family: str | None = None
    basis: str = "audit"

    _KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "audit": ("engine", "engine_version", "trainer", "num_layers", "hidden_size", "arch", "draft", "target"),
        "preflight": ("engine", "engine_version", "trainer", "num_layers", "hidden_size", "arch", "draft", "target",
                      "family"),
        "no_rule": ("engine", "engine_version", "family", "num_layers", "trainer", "hidden_size", "arch"),
    }

    def to_dict(self) -> dict:
        return _pick(self, self._KEYS[self.basis])


__all__ = ["AuditSlice", "Fix", "TrainedSide", "ServedSide", "AuditContext"]
