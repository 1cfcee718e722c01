#!/usr/bin/env bash
# End-to-end demo: three C-SMAs, simulated SCIs with shifting load, the reference C-PS, and
# a live view of the chosen site per service. Sets everything up first (scripts/setup.sh,
# quick when nothing is missing).
#   ./scripts/demo.sh                 # 75 s, redrawn in place
#   ./scripts/demo.sh --duration 120 --no-clear
#   ./scripts/demo.sh --grpc          # the C-SMAs report over the gRPC stream (grpc://)
#   ./scripts/demo.sh --ip-metrics    # seed 000: A-ER counters (softflowd) move the site choice
#   ./scripts/demo.sh --hierarchy     # seed 004: site-a is a coordinator over two subordinate C-SMAs
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh >&2

# setup.sh may have installed Rust with rustup in a child shell: find that toolchain too.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
if [ -x "$cargo_home/bin/cargo" ]; then
    case ":$PATH:" in
        *":$cargo_home/bin:"*) ;;
        *) PATH="$cargo_home/bin:$PATH" ;;
    esac
fi

echo "demo: building cats-sma and the reference C-PS (first time: a few minutes)..." >&2
cargo build --quiet --bin cats-sma --example ref_cps
exec .venv/bin/python scripts/demo.py "$@"
