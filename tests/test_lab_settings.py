"""``make lab`` opens without the kernel picker and the news toast: the install step copies
``requirements/jupyterlab-overrides.json`` into the venv's JupyterLab settings, and every setting it names exists
in the installed JupyterLab's schemas (a renamed setting is ignored silently, so it is checked here)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
OVERRIDES = ROOT / "requirements" / "jupyterlab-overrides.json"


def test_the_install_step_copies_the_overrides_into_the_venv():
    make = (ROOT / "Makefile").read_text()
    assert "LAB_OVERRIDES := requirements/jupyterlab-overrides.json" in make
    assert "cp $(LAB_OVERRIDES) $(VENV)/share/jupyter/lab/settings/overrides.json" in make


def test_every_override_is_a_setting_of_the_installed_jupyterlab():
    doc = json.loads(OVERRIDES.read_text())
    assert doc["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert doc["@jupyterlab/notebook-extension:tracker"]["autoStartDefaultKernel"] is True
    schemas = pathlib.Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    if not schemas.is_dir():
        pytest.skip("JupyterLab is not installed here (the notebooks extra)")
    for plugin, settings in doc.items():
        package, name = plugin.split(":")
        schema = json.loads((schemas / package / f"{name}.json").read_text())
        assert set(settings) <= set(schema["properties"]), (plugin, set(settings) - set(schema["properties"]))
