"""One number formatter: ``forensics.views.format.num`` is the style of every view (CLI, notebook, report tables,
the report's SVG figures and the matplotlib plots); the explorer's JavaScript ``fmt`` follows the same rule, checked
here value by value under Node when it is installed."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from forensics.views.format import num

ROOT = pathlib.Path(__file__).resolve().parents[1]
VALUES = [25012.3, 629.48, 2.8017, 0.00012, 1.5e-5, 2.5e7, 123456789.0, -0.5, 0.0, 100.0, 99.95, 999.96, 1e-3,
          0.001234, 7.0, -1234.5, 1e300, 3.14159, -2.5e-9, 9_999_999.0]
RUN = """const fs = require("fs");
const src = fs.readFileSync(process.argv[1], "utf8").replace("export default { render };", "");
const fmt = new Function(src + "\\nreturn fmt;")();
console.log(JSON.stringify(JSON.parse(process.argv[2]).map(fmt)));"""


def test_explorer_js_formats_numbers_as_the_python_views_do():
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("Node.js is not installed")
    js = ROOT / "forensics" / "views" / "explore" / "static" / "explore.js"
    out = subprocess.run([node, "-e", RUN, str(js), json.dumps(VALUES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [num(v) for v in VALUES]


def test_figures_and_tables_share_the_formatter():
    from forensics.views.plots import slots
    from forensics.views.report import svg

    assert slots.num is num and svg.num is num and not hasattr(slots, "_fmt")
