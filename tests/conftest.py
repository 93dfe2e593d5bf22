"""Shared fixtures: the repository's sample data and one session-wide load of the real SmolLM2 model."""

from __future__ import annotations

import os
import pathlib

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return ROOT


@pytest.fixture(scope="session")
def sample_data() -> pathlib.Path:
    path = ROOT / "sample_data"
    if not path.is_dir():
        pytest.skip("sample_data/ is not in this checkout")
    return path


@pytest.fixture(scope="session")
def smollm2():
    """``(model, tokenizer)`` of the packaged SmolLM2-135M-Instruct, loaded once per test session."""
    from forensics.models.target import load_model

    return load_model()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a test module (``pytestmark = pytest.mark.usefixtures(...)``): on a
    shared, oversubscribed CPU two threads thrash (measured 6–13× slower in the draft tests)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


MODEL_FIXTURES = {"smollm2"}


def pytest_collection_modifyitems(config, items):
    """A test that uses a fixture loading SmolLM2 is a ``model`` test, so ``-m "not model"`` is a real fast suite."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def _model_loads_are_marked(request, monkeypatch):
    """Loading the real model in a test not marked ``model`` fails loudly instead of slowing the fast suite."""
    if request.node.get_closest_marker("model") is not None:
        return
    import forensics.models.target as target

    real = target.load_model

    def guarded(path=None, *args, **kwargs):
        if path is None or path == "default" or "smollm2" in str(path).lower():
            raise AssertionError(f"{request.node.nodeid} loads SmolLM2: mark it @pytest.mark.model")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(target, "load_model", guarded)
    import forensics.models.verifier as verifier

    real_plain = verifier.load_plain

    def guarded_plain(folder, *args, **kwargs):  # the probe's plain-torch SmolLM2 (fp32 cache folder)
        if "smollm2" in str(folder).lower():
            raise AssertionError(f"{request.node.nodeid} loads SmolLM2: mark it @pytest.mark.model")
        return real_plain(folder, *args, **kwargs)

    monkeypatch.setattr(verifier, "load_plain", guarded_plain)
