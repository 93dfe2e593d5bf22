"""The layer contract beyond import-linter: compute never imports a view or the CLI at module level.

import-linter (``make lint``) checks every import; it ignores exactly the display delegations
(``__repr__``/``_repr_html_`` → ``forensics.views.*``). This test makes sure those stay inside methods, so importing
any compute module never pulls in a view.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "forensics"
LOWER = ("analysis", "models", "io")
UPPER = ("forensics.views", "forensics.cli")


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


def test_the_check_sees_a_module_level_view_import():
    tree = ast.parse("from forensics.views.format import esc\n\ndef f():\n    from forensics.views import plots\n")
    assert _module_level_imports(tree) == ["forensics.views.format"]
