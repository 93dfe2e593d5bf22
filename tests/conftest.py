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
# ``slow``: left out of ``make test-fast``. Whole files of hostile-input sweeps, and single tests over 1 s of CPU each
# (a console script in a subprocess, a whole report or scan, a Dask cluster), measured per test with
# process + children CPU time on the 2-core machine (scripts/cpu_times.py); None: every test of the file.
SLOW_PREFIXES = ("test_hardening",)  # every hostile-input sweep file (test_hardening_threads: seconds per test)
SLOW: dict[str, set[str] | None] = {
    "test_fuzz.py": None,
    "test_audit_scenarios.py": {"test_served_format_scenarios_say_one_verdict_everywhere",
                                "test_the_final_state_a_format_stores_is_not_an_fc_input"},
    "test_bad_input.py": {"test_real_console_script_has_no_traceback"},
    "test_cli.py": {"test_closed_pipe_is_not_a_traceback"},
    "test_cli_output.py": {"test_every_command_fits_100_columns"},
    "test_consistency.py": {"test_a_cannot_tell_probe_says_one_verdict_everywhere"},
    "test_fingerprint.py": {"test_ladder_subsets_embedding_and_depth_order"},
    "test_inspect_cli.py": {"test_console_script_multiple_paths"},
    "test_one_verdict.py": None,  # every view of six captures with --model: ~35 s of CPU per case
    "test_plots.py": {"test_32_slot_ladder_figures_fit"},
    "test_probe.py": {"test_batched_blocked_counts_match_one_float64_forward_per_wiring",
                      "test_cli_json_and_exit_codes", "test_exit_code_headline_json_and_report_state_one_verdict"},
    "test_readme.py": {"test_generated_blocks_are_what_the_commands_print"},
    "test_report.py": {"test_audit_verdict_and_fix_in_the_verdict_block", "test_report_object_and_cli_json"},
    "test_report_figures.py": {"test_every_figure_of_the_demo_report_is_well_formed_svg",
                               "test_the_report_path_does_not_import_matplotlib"},
    "test_report_training.py": {"test_audit_uses_the_trainers_format_not_the_first_file"},
    "test_scan.py": {"test_dask_gives_the_same_rows",
                     "test_parquet_scan_killed_with_sigkill_resumes_to_the_uninterrupted_result"},
    "test_tokens.py": {"test_a_model_of_the_same_shape_that_matches_nothing_is_named_and_lends_no_layer_count"},
    "test_user_first_hour.py": {"test_key_numbers_say_audited_only_when_an_audit_ran",
                                "test_a_short_capture_does_not_blame_a_working_draft",
                                "test_a_speculators_file_without_its_layer_count_says_its_format_claim_is_unchecked",
                                "test_a_report_whose_audit_could_not_run_says_so_on_its_first_screen",
                                "test_a_one_slot_capture_is_one_slot"},
}


def pytest_collection_modifyitems(config, items):
    """A test that uses a fixture loading SmolLM2 is a ``model`` test, so ``-m "not model"`` is a real fast suite;
    the tests in ``SLOW`` are ``slow``."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)
        names = None if item.path.name.startswith(SLOW_PREFIXES) else SLOW.get(item.path.name, set())
        if names is None or getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.slow)


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
