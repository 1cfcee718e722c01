#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ (cargo-fuzz, libFuzzer) one after the other.
#
#   scripts/fuzz.sh [target|all] [seconds per target]      (default: all, 600)
#
# Needs `cargo install cargo-fuzz`. The toolchain is stable: RUSTC_BOOTSTRAP=1 lets
# cargo-fuzz pass -Zsanitizer=address, for this build only (never for the normal build).
# New inputs go to fuzz/work/<target>/ (not committed); crashes to fuzz/artifacts/<target>/.
# Afterwards `scripts/fuzz.sh cmin <target> [N]` merges fuzz/work/<target> into the
# committed corpus fuzz/corpus/<target>/: the hand-made seed-* files plus the N inputs (30)
# that add the most coverage.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL="framing xml_message subtree_filter xpath_filter restconf_decoders restconf_request yang_patch
sci_report sci_grpc cps_grpc sse_event sci_auth cps_wire push_params policy rpc client_cert notif_decoders
bgp_message grasp_message flow_message stamp_packet overload_wire"

# -max_len per target: a little above the largest realistic input of that decoder.
max_len() {
    case $1 in
        framing | xml_message | rpc | cps_wire) echo 8192 ;;
        xpath_filter | restconf_decoders | policy) echo 1024 ;;
        sci_auth | overload_wire) echo 2048 ;;
        bgp_message) echo 16384 ;;
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
        sse_event) echo sse ;;
        bgp_message) echo bgp ;;
        grasp_message) echo grasp ;;
        flow_message) echo flow ;;
        stamp_packet) echo stamp ;;
        overload_wire) echo overload ;;
        sci_report | cps_wire | yang_patch | restconf_request | notif_decoders) echo json ;;
        *) echo xml ;;
    esac
}

export RUSTC_BOOTSTRAP=1
# The one-time yang2 leak when the YANG context is built (see fuzz/lsan.supp).
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

if [ "${1:-}" = cmin ]; then
    # Merge (coverage edges only) what was found with the committed corpus, then keep the
    # seeds plus at most N (default 30) inputs chosen by coverage gain (fuzz/select.py), so
    # the committed corpora stay a few hundred small files in all.
    t=$2
    n=${3:-30}
    bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release/$t"
    work="fuzz/work/$t"
    mkdir -p "$work"
    rm -rf "$work.min" "$work.control" && mkdir -p "$work.min"
    nice -n 10 "$bin" -merge=1 -use_counters=0 -merge_control_file="$work.control" \
        -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10 "$work.min" "fuzz/corpus/$t" "$work" \
        >"$work.cmin.log" 2>&1
    python3 fuzz/select.py "$work.control" "$n" >"$work.chosen"
    rm -rf "$work.min" && mkdir -p "$work.min"
    xargs -a "$work.chosen" -d '\n' cp -t "$work.min"
    rm -rf "fuzz/corpus/$t" && mv "$work.min" "fuzz/corpus/$t"
    echo "$t: $(ls "fuzz/corpus/$t" | wc -l) files, $(du -sb "fuzz/corpus/$t" | cut -f1) bytes"
    exit 0
fi

# FUZZ_ARGS adds libFuzzer flags (e.g. -fork=1 -ignore_crashes=1 to go on after a known
# crash). CATS_SMA_FUZZ_SKIP_NUL=1 makes the XML targets that reach libyang skip inputs
# holding NUL (it was needed while NUL findings were open; they are fixed).
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
        -dict="dict/$(dict "$t").dict" -print_final_stats=1 ${FUZZ_ARGS:-}) 2>&1 | tee "fuzz/work/$t.log" | grep -E "^(Done|stat::|==|SUMMARY)|panicked" || true
done
