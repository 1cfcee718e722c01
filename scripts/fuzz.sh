#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ (cargo-fuzz, libFuzzer) one after the other.
#
#   scripts/fuzz.sh [target|all] [seconds per target]      (default: all, 600)
#
# Needs `cargo install cargo-fuzz`. The toolchain is stable: RUSTC_BOOTSTRAP=1 lets
# cargo-fuzz pass -Zsanitizer=address, for this build only (never for the normal build).
# New inputs go to fuzz/work/<target>/ (not committed); crashes to fuzz/artifacts/<target>/.
# Afterwards `scripts/fuzz.sh cmin <target>` merges fuzz/work/<target> into the committed
# corpus fuzz/corpus/<target>/, minimised (the hand-made seed-* files are always kept).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL="framing xml_message subtree_filter xpath_filter restconf_decoders restconf_request yang_patch
sci_report sci_auth cps_wire push_params policy rpc"

# -max_len per target: a little above the largest realistic input of that decoder.
max_len() {
    case $1 in
        framing | xml_message | rpc | cps_wire) echo 8192 ;;
        xpath_filter | restconf_decoders | policy) echo 1024 ;;
        sci_auth) echo 2048 ;;
        *) echo 4096 ;;
    esac
}

dict() {
    case $1 in
        framing) echo framing ;;
        xpath_filter) echo xpath ;;
        restconf_decoders) echo restconf ;;
        policy) echo policy ;;
        sci_auth) echo auth ;;
        sci_report | cps_wire | yang_patch | restconf_request) echo json ;;
        *) echo xml ;;
    esac
}

export RUSTC_BOOTSTRAP=1

if [ "${1:-}" = cmin ]; then
    t=$2
    mkdir -p "fuzz/work/$t"
    cp -n "fuzz/corpus/$t"/* "fuzz/work/$t"/ 2>/dev/null || true
    rm -rf "fuzz/work/$t.min" && mkdir -p "fuzz/work/$t.min"
    (cd fuzz && nice -n 10 cargo fuzz run "$t" "work/$t.min" "work/$t" -- -merge=1 \
        -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10)
    cp "fuzz/corpus/$t"/seed-* "fuzz/work/$t.min"/
    rm -rf "fuzz/corpus/$t" && mv "fuzz/work/$t.min" "fuzz/corpus/$t"
    echo "$t: $(ls "fuzz/corpus/$t" | wc -l) files, $(du -sh "fuzz/corpus/$t" | cut -f1)"
    exit 0
fi

targets=${1:-all}
[ "$targets" = all ] && targets=$ALL
seconds=${2:-600}

(cd fuzz && nice -n 10 cargo fuzz build)
for t in $targets; do
    mkdir -p "fuzz/work/$t" "fuzz/artifacts/$t"
    echo "== $t: $seconds s, $(date -u +%FT%TZ)"
    # Stop at the first crash (it is written to fuzz/artifacts/$t/); the summary line
    # "Done N runs in S second(s)" is what docs/security.md records.
    (cd fuzz && nice -n 10 cargo fuzz run "$t" "work/$t" "corpus/$t" -- \
        -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10 -max_total_time="$seconds" \
        -dict="dict/$(dict "$t").dict" -print_final_stats=1) 2>&1 | tee "fuzz/work/$t.log" | grep -E "^(Done|stat::|==|SUMMARY)|panicked" || true
done
