"""The layer contract beyond import-linter: compute never imports a view or the CLI, not even inside a function.

import-linter (``make lint``) checks every import with no exception; this test walks every statement of the compute
layers too (function bodies included), and checks that a result reaches its view only through the renderer
registry (``forensics.display``), so importing any compute module never pulls in a view.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "forensics"
LOWER = ("analysis", "models", "io")
UPPER = ("forensics.views", "forensics.cli")


def _all_imports(tree: ast.Module) -> list[str]:
    """Every import anywhere in the module (function bodies included), TYPE_CHECKING blocks left out."""
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    names = []
    for sub in ast.walk(tree):
        if id(sub) in skip:
            continue
        if isinstance(sub, ast.ImportFrom) and sub.module:
            names.append(sub.module)
        elif isinstance(sub, ast.Import):
            names.extend(a.name for a in sub.names)
    return names


def _module_level_imports(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:  # module level only; TYPE_CHECKING blocks are for the type checker
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in [node] if not isinstance(node, (ast.If, ast.Try)) else list(ast.walk(node)):
            if isinstance(sub, ast.ImportFrom) and sub.module:
                names.append(sub.module)
            elif isinstance(sub, ast.Import):
                names.extend(a.name for a in sub.names)
    return names


@pytest.mark.parametrize("path", sorted(p for d in LOWER for p in (ROOT / d).rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_compute_does_not_import_views_or_cli_at_module_level(path):
    bad = [m for m in _module_level_imports(ast.parse(path.read_text())) if m.startswith(UPPER)]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad} at module level"


@pytest.mark.parametrize("path", sorted(p for d in LOWER for p in (ROOT / d).rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_compute_does_not_import_views_or_cli_even_inside_a_function(path):
    bad = [m for m in _all_imports(ast.parse(path.read_text())) if m.startswith(UPPER)]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad} (a result reaches its view through forensics.display)"


def test_every_display_hook_of_a_result_has_a_registered_view():
    """Each result's display methods resolve to a view function through the registry."""
    from forensics import display
    from forensics.analysis.audit.core import AuditResult
    from forensics.analysis.fingerprint.core import Fingerprint
    from forensics.analysis.probe import ProbeResult
    from forensics.analysis.scan.result import ScanResult
    from forensics.analysis.stamp import StampResult, VerifyResult
    from forensics.analysis.stats import CaptureStats, NormSummary, SlotStats

    wanted = {Fingerprint: ("text", "html", "explain"), AuditResult: ("line", "html", "text", "explain"),
              ProbeResult: ("text", "html", "explain"), ScanResult: ("headline", "text", "html"),
              StampResult: ("line",), VerifyResult: ("line",), NormSummary: ("text",), SlotStats: ("line", "html"),
              CaptureStats: ("text", "table", "html")}
    for cls, forms in wanted.items():
        obj = cls.__new__(cls)  # the lookup needs only the type
        for form in forms:
            fn = display.renderer(obj, form)
            assert fn.__module__.startswith("forensics.views."), (cls.__name__, form, fn.__module__)


def test_an_unregistered_form_is_a_lookup_error():
    from forensics import display

    with pytest.raises(LookupError, match="no 'table' renderer registered for object"):
        display.render(object(), "table")
    with pytest.raises(ValueError, match="unknown display form"):
        display.renders(object, "nope")


def test_the_all_imports_check_sees_a_function_level_view_import():
    tree = ast.parse("def f():\n    from forensics.views import plots\n")
    assert _all_imports(tree) == ["forensics.views"]


def test_the_check_sees_a_module_level_view_import():
    tree = ast.parse("from forensics.views.format import esc\n\ndef f():\n    from forensics.views import plots\n")
    assert _module_level_imports(tree) == ["forensics.views.format"]
