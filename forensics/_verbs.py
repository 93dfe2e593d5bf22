"""Keep the flat verb API working: ``forensics.audit(...)`` after ``import forensics.audit``.

Importing a submodule rebinds the package attribute of the same name to the module, which would
shadow the verb (``forensics.audit`` becomes a module, "module object is not callable"). Each verb
module calls :func:`callable_module` at its end so the module itself forwards calls to its verb.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def callable_module(module_name: str, verb: str) -> None:
    """Make ``sys.modules[module_name]`` callable as its function ``verb``."""

    class _VerbModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(self, verb)(*args, **kwargs)

    _VerbModule.__name__ = f"{verb}_module"
    _VerbModule.__doc__ = f"``forensics.{verb}`` is both this module and its verb; calls go to ``{verb}()``."
    sys.modules[module_name].__class__ = _VerbModule
