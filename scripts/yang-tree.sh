#!/usr/bin/env bash
# Print the schema tree of the cats-sma module, with every project module that
# augments it merged in, as one pyang tree on stdout.
#
# docs/yang-tree.txt is the committed output; regenerate it with
#   scripts/yang-tree.sh > docs/yang-tree.txt
#
# Environment:
#   PYANG  pyang executable (default: .venv/bin/pyang, from scripts/setup.sh)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

PYANG="${PYANG:-.venv/bin/pyang}"
ietf_dir="yang/ietf"

if ! command -v "$PYANG" >/dev/null 2>&1; then
    echo "yang-tree: pyang not found at '$PYANG'; run scripts/setup.sh" \
        "(or set PYANG)" >&2
    exit 1
fi

export LC_ALL=C

# Augmented nodes appear in the order their modules are given: the known
# modules first in a fixed, readable order, then any other module that
# augments /csma:cats-sma, in file-name order.
modules=(
    yang/cats-sma.yang
    yang/cats-sma-policy.yang
    yang/cats-sma-cps.yang
    yang/cats-sma-overload.yang
    yang/cats-ip-metrics.yang
    yang/cats-sma-routing.yang
    yang/cats-sma-hierarchy.yang
)
for f in yang/*.yang; do
    case " ${modules[*]} " in
        *" $f "*) continue ;;
    esac
    if grep -q 'augment "/csma:cats-sma' "$f"; then
        modules+=("$f")
    fi
done

"$PYANG" -f tree -p "$ietf_dir" -p yang "${modules[@]}"

# Project modules that augment IETF modules instead (the receivers of configured
# subscriptions), each as its own tree.
for f in yang/*.yang; do
    case " ${modules[*]} " in
        *" $f "*) continue ;;
    esac
    if grep -q '^  augment "/' "$f"; then
        echo
        "$PYANG" -f tree -p "$ietf_dir" -p yang "$f"
    fi
done
