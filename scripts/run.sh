#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), builds the release binary and runs the
# agent with its embedded default configuration. Extra arguments are passed to
# `cats-sma run`, e.g. ./scripts/run.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

# setup.sh may have installed Rust with rustup in a child shell: make sure
# this shell finds that toolchain too.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
if [ -x "$cargo_home/bin/cargo" ]; then
    case ":$PATH:" in
        *":$cargo_home/bin:"*) ;;
        *) PATH="$cargo_home/bin:$PATH" ;;
    esac
fi

cargo build --release

target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in
    /*) ;;
    *) target_dir=$PWD/$target_dir ;;
esac
exec "$target_dir/release/cats-sma" run "$@"
