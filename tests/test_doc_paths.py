"""Every dotted ``forensics.…`` path named in a docstring, a comment of the package or the docs resolves: a module
that imports, then attributes that exist. A rename that leaves a stale name behind fails here."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w./-])forensics(?:\.[A-Za-z_]\w*)+")
SOURCES = [*sorted((ROOT / "forensics").rglob("*.py")), ROOT / "README.md", ROOT / "ARCHITECTURE.md",
           *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.py"))]


def dotted_paths() -> dict[str, str]:
    """``{path: where it is first named}``."""
    found: dict[str, str] = {}
    for src in SOURCES:
        for n, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
            for m in PATH.finditer(line):
                found.setdefault(m.group(0).rstrip("."), f"{src.relative_to(ROOT)}:{n}")
    return found


def resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:i]).startswith(e.name):
                raise  # a module that exists but fails to import is an error of its own
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


PATHS = dotted_paths()


def test_the_docs_name_dotted_paths():
    assert len(PATHS) > 50  # the scan itself works: the package and its docs name many


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_dotted_path_resolves(path):
    try:
        resolve(path)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{path} (named at {PATHS[path]}) does not resolve: {type(e).__name__}: {e}")
