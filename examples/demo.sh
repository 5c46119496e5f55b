#!/usr/bin/env bash
# The main job behind `make demo`.
set -euo pipefail
OUT=${1:-runs/demo}
SWERL=${SWERL:-.venv/bin/swerl}
mkdir -p "$OUT"
"$SWERL" --help
