"""A system (a serving engine or a trainer) resolved once from any of its names: its canonical name, aliases, kind,
PR timeline and rules, and everything the registry computes for it (id → r, r → ids, what it captures from a
draft config). Callers resolve a user's name once at their boundary (``system(name)``) and pass the ``System``
on; nothing below re-normalises a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError
from forensics.models.conventions import compute, names
from forensics.models.conventions.rules import Rule, rules_for

# trainers whose stored data layout is known (``forensics.io.formats``): the system → its data's format name
_DATA_FORMATS = {"speculators-legacy": "speculators-v1", "speculators": "speculators", "specforge": "specforge"}
# engines whose EAGLE-3 capture is modelled from their code line by line (``compute``); the others follow the
# registry rules
_CODE_MODELLED = ("sglang", "vllm")


@dataclass(frozen=True)
class System:
    """One engine or trainer of the conventions registry."""

    name: str  # canonical
    kind: str  # "engine" | "trainer"
    aliases: tuple[str, ...]
    timeline: tuple[int, ...]  # the PRs that change its numbering, oldest first (empty: no version-dependent rule)
    rules: tuple[Rule, ...]

    def __str__(self) -> str:
        return self.name

    @property
    def is_engine(self) -> bool:
        return self.kind == "engine"

    @property
    def data_format(self) -> str | None:
        """The capture format this trainer's training data is written in (None: no stored layout known)."""
        return _DATA_FORMATS.get(self.name)

    @property
    def code_modelled(self) -> bool:
        """Whether its EAGLE-3 capture of a draft config is modelled from its code (SGLang, vLLM) rather than a
        registry rule."""
        return self.name in _CODE_MODELLED

    def version(self, version: str | None = None) -> str:
        """The canonical version (``pre-<PR>``/``post-<PR>``; ``any`` without a timeline); None: the newest."""
        return names.parse_version(self.name, version)

    def versions(self) -> list[str]:
        """Every canonical version, oldest first."""
        return names.versions(self.name)

    def rule(self, family: str | None = None, version: str | None = None) -> Rule:
        """The registry rule it applies to a family's ids at a version."""
        return names.rule_for(self.name, family, version)

    def to_r(self, ids: list[int] | None, num_layers: int, version: str | None = None, arch: str | None = None,
             family: str | None = None, num_draft_layers: int | None = None) -> list[Any]:
        """r of every id, in the order given (None for an id it never captures); ``ids=None``: its default."""
        return compute.to_r(self.name, ids, num_layers, version, arch, family, num_draft_layers)

    def from_r(self, rs: list, num_layers: int, version: str | None = None, arch: str | None = None,
               family: str | None = None) -> names.IdPlan:
        """The ids to write so it captures r = ``rs``, or why it can't."""
        return compute.from_r(self.name, rs, num_layers, version, arch, family)

    def capture(self, config: dict, num_layers: int, version: str | None = None, arch: str | None = None,
                family: str | None = None) -> names.EngineCapture:
        """What this engine captures for a draft ``config`` (parsed config.json) on an L-layer target."""
        return compute.engine_capture(self.name, config, num_layers, version, arch, family)

    def readings(self, ids: list[int] | None, num_layers: int, family: str | None = None, arch: str | None = None,
                 num_draft_layers: int | None = None) -> dict[str, list]:
        """What every known version (and unsettled numbering) makes of ``ids``."""
        return compute.readings(self.name, ids, num_layers, family, arch, num_draft_layers)

    def reachable(self, num_layers: int, version: str | None = None, arch: str | None = None
                  ) -> tuple[set[int], dict[int, str]]:
        """The r this engine can capture without a code change, and why the others need one."""
        return compute.reachable_r(self.name, num_layers, version, arch)

    def trainer_view(self, num_slots: int) -> names.TrainerView:
        """Which stored slots this trainer feeds the draft's fc, and which one is the target."""
        if self.data_format is None:
            raise ForensicsError(f"unknown trainer {self.name!r}; expected one of {names.TRAINERS}")
        return names.trainer_view(self.data_format, num_slots)


def _build(name: str) -> System:
    return System(name, "engine" if name in names.ENGINES else "trainer",
                  tuple(a for a, c in names.ALIASES.items() if c == name), names.TIMELINES.get(name, ()),
                  tuple(rules_for(name)))


_BY_NAME = {s: _build(s) for s in names.SYSTEMS}


def system(name: str | System) -> System:
    """The system called ``name`` (any alias, any case; a ``System`` is returned as it is); a ForensicsError
    naming the known names otherwise. The one place a system's name is resolved."""
    if isinstance(name, System):
        return name
    return _BY_NAME[names.canonical_system(name)]
