#!/usr/bin/env bash
# Regenerate docs/report-verdict.png, the README's picture: the top of the report `make demo` writes (header and
# verdicts) as headless Chromium draws it at 1100 x 760 px. Needs the demo install (.venv; `make install-demo`) and
# Debian's chromium. Run from the repository root: bash scripts/screenshot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
HSF=${HSF:-.venv/bin/hsf}
PYTHON=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the same command as `make demo`; its exit code is 1 (the audit finds a mismatch), which is the point
"$HSF" report sample_data --draft sample_data/draft_eagle3 --engine sglang --trainer speculators-v1 \
  -o "$tmp/report.html" >/dev/null 2>&1 || [ -s "$tmp/report.html" ]
# --no-sandbox: Chromium refuses to start as root without it (containers, CI)
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size=1100,760 --virtual-time-budget=3000 --screenshot="$tmp/shot.png" "file://$tmp/report.html" \
  >/dev/null 2>&1
# a 64-colour palette keeps the PNG small (~45 KB instead of ~140 KB: text and flat boxes)
"$PYTHON" - "$tmp/shot.png" docs/report-verdict.png <<'PY'
import sys

from PIL import Image

Image.open(sys.argv[1]).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(
    sys.argv[2], optimize=True)
PY
echo "docs/report-verdict.png: $(wc -c < docs/report-verdict.png) bytes"
