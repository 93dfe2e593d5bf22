"""How a result is shown, without the compute layers importing a view: a renderer registry.

A result type lives in ``forensics.analysis`` and its text/HTML in ``forensics.views``, which sits above it. The
result's display hooks (``__repr__``, ``_repr_html_``, ``explain()``, ``table()``, …) therefore ask this registry
for a renderer by form name; the views register theirs with :func:`renders`. The first request loads the views'
registration module (``RENDERERS_MODULE``) by name — the way pandas finds its plotting backend — so no module of
``analysis``/``models``/``io`` imports a view, and importing compute never pulls in rendering code.

Example:
    >>> from forensics import display
    >>> class Point:
    ...     def __init__(self, x): self.x = x
    >>> @display.renders(Point, "text")
    ... def _text(p): return f"Point at {p.x}"
    >>> display.render(Point(3), "text")
    'Point at 3'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

RENDERERS_MODULE = "forensics.views.renderers"  # imports every view module that registers a renderer
FORMS = ("text", "html", "explain", "table", "headline", "line")

F = TypeVar("F", bound=Callable[..., Any])
_REGISTRY: dict[tuple[type, str], Callable[..., Any]] = {}
_loaded = False


def renders(cls: type, *forms: str) -> Callable[[F], F]:
    """Register the decorated function as ``cls``'s renderer for each of ``forms`` (subclasses inherit it)."""
    unknown = [f for f in forms if f not in FORMS]
    if unknown or not forms:
        raise ValueError(f"unknown display form(s) {unknown or forms}; known: {', '.join(FORMS)}")

    def register(fn: F) -> F:
        for form in forms:
            _REGISTRY[(cls, form)] = fn
        return fn

    return register


def renderer(obj: Any, form: str) -> Callable[..., Any]:
    """The function that renders ``obj`` as ``form`` (looked up along its class's MRO)."""
    global _loaded
    if not _loaded:
        importlib.import_module(RENDERERS_MODULE)
        _loaded = True
    for cls in type(obj).__mro__:
        fn = _REGISTRY.get((cls, form))
        if fn is not None:
            return fn
    raise LookupError(f"no {form!r} renderer registered for {type(obj).__name__}")


def render(obj: Any, form: str, *args: Any, **kwargs: Any) -> Any:
    """Render ``obj`` as ``form`` (``text``, ``html``, ``explain``, …) with its registered view."""
    return renderer(obj, form)(obj, *args, **kwargs)
