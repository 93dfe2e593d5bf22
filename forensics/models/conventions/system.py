"""A system (a serving engine or a trainer) resolved once from any of its names: its canonical name, aliases, kind,
PR timeline and rules, and everything the registry computes for it (id → r, r → ids, what it captures from a
draft config). A name is resolved once, where it enters: the CLI resolves ``--engine``/``--trainer`` in one helper
(``forensics.cli``), a public verb declares which parameters are names with :func:`resolve_names`, and everything
below takes the ``System`` and never re-normalises a name.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from forensics.errors import ForensicsError
from forensics.models.conventions import compute, names
from forensics.models.conventions.rules import Rule, rules_for

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
    # the name as the caller wrote it (``speculators-v1``, ``SGLang``): messages that echo the caller's words use it;
    # not part of the identity (``system("speculators-v1") == system("speculators-legacy")``)
    given: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        return self.name

    @property
    def is_engine(self) -> bool:
        return self.kind == "engine"

    @property
    def data_format(self) -> str | None:
        """The capture format this trainer's training data is written in (None: no stored layout known): the format
        whose module declares this system (any of its names) its trainer (``forensics.io.formats``, the one record)."""
        return _data_format(self.name, self.aliases)

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


@functools.cache
def _data_format(name: str, aliases: tuple[str, ...]) -> str | None:
    # read when a trainer's format is first asked (a capture is being judged), not on import: the registry loads
    # every format module, which `hsf --help` and the commands' own --help (they list the trainers) need not
    from forensics.io.formats import format_of_trainer  # noqa: PLC0415 - every format module, on call

    return format_of_trainer(name, *aliases)


def _build(name: str) -> System:
    return System(name, "engine" if name in names.ENGINES else "trainer",
                  tuple(a for a, c in names.ALIASES.items() if c == name), names.TIMELINES.get(name, ()),
                  tuple(rules_for(name)), given=name)


_BY_NAME = {s: _build(s) for s in names.SYSTEMS}
ALL: tuple[System, ...] = tuple(_BY_NAME.values())  # every system, in ``SYSTEMS`` order
# the systems the code itself names (a rule, a default reader): constants, not names to resolve
VLLM, SGLANG, SPECULATORS, SPECFORGE = (_BY_NAME[n] for n in ("vllm", "sglang", "speculators", "specforge"))


def system(name: str | System) -> System:
    """The system called ``name`` (any alias, any case; a ``System`` is returned as it is); a ForensicsError
    naming the known names otherwise. The one place a system's name is resolved."""
    if isinstance(name, System):
        return name
    found = _BY_NAME[names.canonical_system(name)]
    return found if name == found.given else replace(found, given=str(name))


def of_format(format_name: str | None) -> System | None:
    """The trainer whose training data a capture format is (``speculators-v1`` → ``speculators-legacy``); None for
    a format no one trainer reads."""
    return next((s for s in ALL if format_name is not None and s.data_format == format_name), None)


SystemName = str | System  # what a public verb accepts for an engine or a trainer
F = TypeVar("F", bound=Callable[..., Any])


def resolve_names(*params: str) -> Callable[[F], F]:
    """Decorator of a public verb: the parameters ``params`` (``engine``, ``trainer``) arrive in its body as a
    :class:`System` (or None), whatever the caller passed (any alias, any case, or a ``System``): the verb's one
    resolution, at its boundary. An unknown name is the ``system`` error, before the verb does any work."""

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        missing = [p for p in params if p not in sig.parameters]
        if missing:
            raise TypeError(f"{fn.__qualname__} has no parameter {missing}")

        @functools.wraps(fn)
        def verb(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            for p in params:
                value = bound.arguments.get(p)
                if value is not None:
                    bound.arguments[p] = system(value)
            return fn(*bound.args, **bound.kwargs)

        return cast(F, verb)

    return decorate
