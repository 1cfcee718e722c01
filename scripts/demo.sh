#!/usr/bin/env bash
# End-to-end demo: three C-SMAs, simulated SCIs with shifting load, the reference C-PS, and
# a live view of the chosen site per service. Run scripts/setup.sh once first.
#   ./scripts/demo.sh                 # 75 s, redrawn in place
#   ./scripts/demo.sh --duration 120 --no-clear
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "demo: .venv missing: run scripts/setup.sh first" >&2; exit 1; }
echo "demo: building cats-sma and the reference C-PS (first time: a few minutes)..." >&2
cargo build --quiet --bin cats-sma --example ref_cps
exec .venv/bin/python scripts/demo.py "$@"
