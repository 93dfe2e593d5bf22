"""An engine or trainer name is resolved once, where it enters, and nowhere else.

The rule (``forensics.models.conventions.system``): the CLI resolves ``--engine``/``--trainer`` in one helper
(``forensics.cli._resolve_names``), a public verb marks its name parameters with ``@resolve_names``, and everything
below takes a ``System``. The count below is the grep this test stands for::

    calls of system(...) / canonical_system(...) / resolve_trainer(...) / resolve_engine(...), and ALIASES[...]
    look-ups, in forensics/**/*.py outside forensics/models/conventions/

It was 22 call sites before the rule; it must stay at most 3, so that the tide cannot come back unseen.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from forensics.errors import ForensicsError
from forensics.models import conventions as cv

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "forensics"
CONVENTIONS = PKG / "models" / "conventions"
RESOLVERS = {"system", "canonical_system", "resolve_trainer", "resolve_engine"}
MAX_SITES = 3
SAMPLE = ROOT / "sample_data"
DRAFT = str(SAMPLE / "draft_eagle3")


def resolution_sites(source: str) -> list[int]:
    """Line numbers of the name resolutions in ``source``: a call of a resolver (bare or as an attribute) or a
    subscript of ``ALIASES``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in RESOLVERS:
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript):
            v = node.value
            name = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None
            if name == "ALIASES":
                lines.append(node.lineno)
    return sorted(lines)


def _sites() -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n}" for p in sorted(PKG.rglob("*.py")) if CONVENTIONS not in p.parents
            for n in resolution_sites(p.read_text())]


def test_names_are_resolved_in_at_most_three_places():
    sites = _sites()
    assert len(sites) <= MAX_SITES, (
        f"{len(sites)} name resolutions outside forensics/models/conventions/ (at most {MAX_SITES}): {sites}. "
        "Take a System (resolved at the boundary: forensics.cli._resolve_names, or @cv.resolve_names on a public "
        "verb) instead of resolving a name again")


def test_the_count_sees_every_spelling_of_a_resolution():
    src = ("from forensics.models import conventions as cv\n"
           "a = cv.system(x)\n"
           "b = system(y).to_r([], 3)\n"
           "c = names.canonical_system(z)\n"
           "d = cv.ALIASES[w]\n"
           "e = cv.SGLANG.to_r([1], 3)\n")
    assert resolution_sites(src) == [2, 3, 4, 5]


def test_the_cli_and_stamp_are_the_resolutions_left():
    """The two that remain, by file: the CLI's one helper, and stamp's label that names a numbering only with
    --layer-ids (a stamp records any convention label; it is not always a system)."""
    files = sorted({s.split(":")[0] for s in _sites()})
    assert files == ["forensics/analysis/stamp.py", "forensics/cli/__init__.py"]


def test_a_system_is_resolved_once_and_keeps_the_callers_word():
    legacy = cv.system("speculators-v1")
    assert legacy == cv.system("LEGACY") == cv.system("speculators-legacy")
    assert hash(legacy) == hash(cv.system("speculators-legacy"))
    assert (legacy.name, str(legacy), legacy.given) == ("speculators-legacy", "speculators-legacy", "speculators-v1")
    assert cv.system(legacy) is legacy  # idempotent: a System passes through
    assert cv.system("vllm") is cv.VLLM  # the canonical spelling is the registry's own object
    assert [s.name for s in cv.ALL] == list(cv.SYSTEMS)


def test_of_format_agrees_with_the_format_registry():
    from forensics.io.formats import REGISTRY

    for f in REGISTRY:
        assert cv.of_format(f.name) == (cv.system(f.trainer) if f.trainer else None), f.name
    assert cv.of_format(None) is None


def test_resolve_names_refuses_a_parameter_the_verb_does_not_have():
    with pytest.raises(TypeError, match="no parameter"):
        @cv.resolve_names("engine")
        def verb(trainer=None):
            return trainer


def test_resolve_names_hands_the_body_a_system_or_none():
    seen = []

    @cv.resolve_names("engine", "trainer")
    def verb(x, engine=None, trainer=None):
        seen.append((engine, trainer))

    verb(1, "SGLang")
    verb(1, trainer=cv.SPECFORGE)
    verb(1)
    assert seen == [(cv.SGLANG, None), (None, cv.SPECFORGE), (None, None)]
    assert seen[0][0].given == "SGLang"
    with pytest.raises(ForensicsError, match="unknown system 'nosuch'"):
        verb(1, engine="nosuch")


def test_a_public_verb_takes_a_name_or_a_system_alike():
    from forensics.analysis.audit.core import audit

    layout = ["embed", "L3", "L16", "L30"]
    by_name = audit(data=layout, draft=DRAFT, engine="SGLang", trainer="Speculators", num_layers=30)
    by_system = audit(data=layout, draft=DRAFT, engine=cv.SGLANG, trainer=cv.SPECULATORS, num_layers=30)
    assert by_name.to_dict() == by_system.to_dict()
    assert by_name.context.engine == "sglang" and by_name.wiring == "mismatch"  # embed,L3,L16 vs SGLang's +1


def test_an_unknown_engine_is_one_line_in_the_api_and_exit_2_in_the_cli(capsys):
    from forensics.analysis.audit.core import audit
    from forensics.cli import main

    with pytest.raises(ForensicsError, match="^unknown system 'nosuch'; expected one of"):
        audit(data=["L2", "L15", "L27", "L30"], draft=DRAFT, engine="nosuch", num_layers=30)
    assert main(["audit", "--data", str(SAMPLE / "speculators_v1"), "--draft", DRAFT, "--engine", "nosuch"]) == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_the_callers_word_is_what_a_result_echoes():
    """A System carries the spelling it was resolved from: the trainer the user named stays in the result (the JSON
    said ``speculators-v1`` before names were resolved once; it still does), the canonical name is the identity."""
    from forensics.analysis.audit.doctor import preflight

    res = preflight(DRAFT, "vllm", trainer="speculators-v1", trained_layout=["embed", "L3", "L16", "L30"],
                    num_layers=30)
    assert res.context.trainer == "speculators-v1"
    res = preflight(DRAFT, "VLLM", trainer="Legacy", target_layer_ids=[2, 15, 27], num_layers=30)
    assert (res.context.trainer, res.context.engine) == ("Legacy", "vllm")  # the engine: its canonical name
    res = preflight(DRAFT, "vllm", trainer="Legacy", num_layers=30)
    assert any(f.message.startswith("Legacy was invoked without --target-layer-ids") for f in res.findings)


def test_draft_ids_r_takes_a_name_or_a_system_and_refuses_an_engine():
    from forensics.analysis.claims import draft_ids_r
    from forensics.models.draft_config import read_draft

    info = read_draft(DRAFT)  # eagle_aux_hidden_state_layer_ids = [0, 3, 16] (top level)
    by_name = draft_ids_r("speculators-legacy", info, 30)
    assert by_name == draft_ids_r(cv.system("legacy"), info, 30)
    assert (by_name.trainer, by_name.r) == ("speculators-v1", [0, 3, 16])  # vLLM ids, r = id (speculators#379)
    assert draft_ids_r(cv.SPECFORGE, info, 30).r == [1, 4, 17]  # SGLang's + 1
    assert draft_ids_r(None, info, 30).trainer == "speculators"
    with pytest.raises(ForensicsError, match="unknown trainer 'VLLM'"):
        draft_ids_r("VLLM", info, 30)
