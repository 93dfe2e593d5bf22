"""A pytest plugin that records each test's CPU seconds (this process and its waited-for children) and wall seconds,
one JSON line per test, whatever the machine's load: what ``tests/conftest.py``'s ``SLOW`` list is measured with.

Usage: ``PYTHONPATH=scripts python -m pytest -p cpu_times -m "not model and not browser"`` (``CPU_TIMES_OUT``: the
JSON Lines file, default ``cpu_times.jsonl``), then e.g. the tests over 1 s of CPU::

    python -c "import json; [print(x['cpu'], x['id']) for x in map(json.loads, open('cpu_times.jsonl'))
               if x['cpu'] > 1]"
"""

import json
import os
import resource
import time

import pytest

OUT = os.environ.get("CPU_TIMES_OUT", "cpu_times.jsonl")


def _cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu(), time.time()
    yield
    with open(OUT, "a") as f:
        f.write(json.dumps({"id": item.nodeid, "cpu": round(_cpu() - cpu, 3), "wall": round(time.time() - wall, 3)})
                + "\n")
