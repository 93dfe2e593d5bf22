"""Compile what ``hsf`` imports into the bytecode cache, once, at install time (``make demo``/``make install``).

The install passes ``--no-compile`` (compiling all of torch cost 49 s instead of 16 s), so nothing is compiled
until it is imported. ``make`` sets ``PYTHONPYCACHEPREFIX=.venv/pycache``, and ``hsf`` reads that folder from any
shell (``forensics.cli._venv_bytecode``); without this step a shell with ``PYTHONDONTWRITEBYTECODE=1`` recompiled
~2,500 modules on every ``--model`` run (2-3x slower). Importing is enough to compile: every module of the project,
the command modules, and the model stack (a tiny Llama built from a config and run once, so transformers' lazy
modules load too; no weights are read, the packaged model's fp32 cache is built on its first real use).

    .venv/bin/python scripts/warm_bytecode.py    # with PYTHONPYCACHEPREFIX set, as make does
"""

from __future__ import annotations

import importlib
import pkgutil


def main() -> int:
    import forensics

    for m in pkgutil.walk_packages(forensics.__path__, "forensics."):
        try:
            importlib.import_module(m.name)
        except Exception:  # noqa: BLE001 - an extra that is not installed (anywidget, pyarrow, dask): skipped
            pass
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig  # noqa: F401 - the imports are the point

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model(torch.arange(4)[None], output_hidden_states=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
