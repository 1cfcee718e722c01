#!/usr/bin/env bash
# Lint the project's YANG modules (yang/*.yang) with pyang and yanglint.
#
# Any error or warning from either tool fails the script.
#
# Environment:
#   PYANG     pyang executable (default: .venv/bin/pyang, from scripts/setup.sh)
#   YANGLINT  yanglint executable (default: yanglint on PATH)
#
# IETF/IANA modules are looked up in yang/ietf, which scripts/setup.sh fills
# from the pyang distribution (the directory is not committed).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

PYANG="${PYANG:-.venv/bin/pyang}"
YANGLINT="${YANGLINT:-yanglint}"
ietf_dir="yang/ietf"

fail() {
    echo "lint-yang: $*" >&2
    exit 1
}

if ! command -v "$PYANG" >/dev/null 2>&1; then
    fail "pyang not found at '$PYANG'; run scripts/setup.sh (or set PYANG)"
fi
if ! command -v "$YANGLINT" >/dev/null 2>&1; then
    fail "yanglint not found ('$YANGLINT'); install libyang2-tools (or set YANGLINT)"
fi
if [ ! -f "$ietf_dir/ietf-inet-types.yang" ]; then
    fail "IETF modules missing in $ietf_dir; run scripts/setup.sh"
fi

shopt -s nullglob
export LC_ALL=C
modules=(yang/*.yang)
if [ "${#modules[@]}" -eq 0 ]; then
    fail "no modules found in yang/"
fi

status=0

# pyang: strict RFC 7950 conformance plus the RFC 8407 generic checks, with
# 80-column lines.  Warnings are promoted to errors, and any output at all is
# treated as a failure.
if ! out="$("$PYANG" --strict --lint --max-line-length 80 -W error \
        -p "$ietf_dir" -p yang "${modules[@]}" 2>&1)"; then
    status=1
fi
if [ -n "$out" ]; then
    printf 'pyang:\n%s\n' "$out" >&2
    status=1
fi

# yanglint: load every module together.  libyang reports warnings on stderr
# with exit status 0, so any output fails the lint.
if ! out="$("$YANGLINT" -p "$ietf_dir" -p yang "${modules[@]}" 2>&1)"; then
    status=1
fi
if [ -n "$out" ]; then
    printf 'yanglint:\n%s\n' "$out" >&2
    status=1
fi

if [ "$status" -ne 0 ]; then
    fail "FAILED"
fi
echo "lint-yang: ${#modules[@]} modules clean (pyang --strict --lint, yanglint)"
