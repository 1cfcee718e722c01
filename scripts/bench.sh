#!/bin/bash
# The benchmark set (issue 14 goal 6): builds the release binaries, runs every benchmark with
# its baseline beside it in the same run (Debian's netconfd from ../shared/peers/ for the
# management plane, the bare loop for the engine), and prints one markdown table of figures
# and ratios — the table in docs/performance.md is this script's output.
#
#   scripts/bench.sh                 # everything (4.5 minutes on a quiet 2-core machine, after the build)
#   scripts/bench.sh netconf engine  # some sections only
#   ROUNDS=5 scripts/bench.sh        # more rounds per comparison (the median is printed)
#
# Sections: netconf (round trips vs netconfd), reads (typed reads of engine state),
# push (periodic YANG-Push at scale), edits (bulk edits vs netconfd), engine (ingest vs the
# bare loop, memory per SCI, HTTP ingest). Needs root for the netconfd peer (it installs
# netconfd and runs a private sshd on loopback). The machine is usually shared: every ratio
# is taken from rounds that alternate the two sides, and the median of the rounds is given.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECTIONS=("$@")
[[ ${#SECTIONS[@]} -gt 0 ]] || SECTIONS=(netconf reads push edits engine)
PEER=../shared/peers/netconfd-peer.sh
NC_PORT=${NC_PORT:-18830}
# netconfd writes ~/.yuma in the passwd home of its user, which the peer script sets only
# when it creates the user: reuse the directory of an existing one.
PEER_DIR=$(getent passwd ncpeer | cut -d: -f6 || true)
PEER_DIR=${PEER_DIR:+$(dirname "$PEER_DIR")}
PEER_DIR=${PEER_DIR:-/tmp/netconfd-peer}
WORK=$(mktemp -d /tmp/cats-bench.XXXXXX)
chmod 755 "$WORK"   # the netconfd peer runs as its own user and keeps its files below
ROWS=()
EXTRA=()
PIDS=()

cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done
  [[ -x $PEER ]] && "$PEER" stop "$NC_PORT" "$PEER_DIR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

want() { local s; for s in "${SECTIONS[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 |"); }
# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "n/a"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# the value of key=value in a RESULT line
field() { sed -n "s/.*RESULT.* $1=\([^ ]*\).*/\1/p" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "n/a"; else printf "%.2f×", a / b }'; }

echo "building release binaries ..." >&2
cargo build --release --quiet --bin cats-sma --examples

# A cats-sma agent on loopback with a fresh state directory; sets AGENT_PORT.
start_agent() {
  local dir="$WORK/agent-$1"
  mkdir -p "$dir"
  AGENT_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # The ready line is logged at info; everything else at warn.
  CATS_SMA_ADMIN_PASSWORD=bench RUST_LOG=warn,cats_sma::agent=info NO_COLOR=1 target/release/cats-sma run \
    --state-dir "$dir" --netconf-listen "127.0.0.1:$AGENT_PORT" --restconf-listen 127.0.0.1:0 \
    --sci-listen 127.0.0.1:0 >"$dir.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    grep -q "cats-sma ready" "$dir.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "agent did not start: $(cat "$dir.log")" >&2
  exit 1
}

start_peer() {
  [[ -n ${PEER_UP:-} ]] && return 0
  "$PEER" start "$NC_PORT" "$PEER_DIR" >/dev/null
  PEER_UP=1
}

# netconf_load against us and netconfd, alternating, ROUNDS times; prints the medians
# "ours_rps peer_rps ours_server_us peer_server_us client_us": server-side CPU per RPC is the
# whole machine's busy time minus the client's (netconfd's work is spread over netconfd, its
# subsystem and sshd; ours is one process), client_us the client's own CPU per RPC (ours).
nc_once() {  # PORT USER PASSWORD ARGS...: prints "rps server_us client_us" of one run
  local out m c
  out=$(target/release/examples/netconf_load --port "$1" --user "$2" --password "$3" "${@:4}")
  m=$(field machine_cpu_us <<<"$out"); c=$(field client_cpu_us <<<"$out")
  echo "$(field rps <<<"$out") $((m - c)) $c"
}

nc_compare() {
  local args=("$@") ours=() peer=() os=() ps=() oc=() r rps srv cl
  for r in $(seq "$ROUNDS"); do
    read -r rps srv cl < <(nc_once "$AGENT_PORT" admin bench "${args[@]}")
    ours+=("$rps"); os+=("$srv"); oc+=("$cl")
    read -r rps srv cl < <(nc_once "$NC_PORT" ncpeer ncpeer "${args[@]}")
    peer+=("$rps"); ps+=("$srv")
  done
  echo "$(printf '%s\n' "${ours[@]}" | median) $(printf '%s\n' "${peer[@]}" | median)" \
    "$(printf '%s\n' "${os[@]}" | median) $(printf '%s\n' "${ps[@]}" | median) $(printf '%s\n' "${oc[@]}" | median)"
}

# The server-side CPU rows beside a round-trip row.
cpu_rows() {
  row "$1: server-side CPU per RPC (µs, machine minus client)" "$2" "netconfd $3" "$(ratio "$3" "$2") less" "—"
  row "$1: the client's own CPU per RPC (µs)" "$4" "—" "—" "—"
}

if want netconf; then
  echo "netconf: round trips vs netconfd ($ROUNDS rounds each) ..." >&2
  start_peer
  start_agent netconf
  read -r o p os ps oc < <(nc_compare --rpcs 5000 --warmup 200)
  row "1 session × 5000 small get-config (RPC/s)" "$o" "netconfd $p" "$(ratio "$o" "$p")" "≥ 3×"
  cpu_rows "small get-config" "$os" "$ps" "$oc"
  read -r o p os ps oc < <(nc_compare --rpc get --rpcs 2000 --warmup 100)
  row "1 session × 2000 \`<get>\`, small subtree filter (RPC/s)" "$o" "netconfd $p" "$(ratio "$o" "$p")" "≥ 2×"
  cpu_rows "\`<get>\` small filter" "$os" "$ps" "$oc"
  read -r o p os ps oc < <(nc_compare --sessions 100 --rpcs 100 --warmup 10)
  row "100 sessions × 100 small get-config (RPC/s)" "$o" "netconfd $p" "$(ratio "$o" "$p")" "≥ 3×"
fi

if want reads; then
  echo "reads: typed reads of engine state at 100 000 SCIs, get-config beside them ..." >&2
  EXTRA+=("" "Typed reads (\`target/release/examples/typed_read --scis 100000 --repeat 20\`; goals: one entry and \`statistics\` ≤ 1 ms, the whole metric-cache ≤ 100 ms and no slower than the get-config row):" "")
  EXTRA+=("$(target/release/examples/typed_read --scis 100000 --repeat 20 2>/dev/null)")
fi

if want push; then
  echo "push: periodic YANG-Push, 1 s period ..." >&2
  late() { sed -n 's/^push-update lateness.*p99=\([0-9.]*\) ms.*/\1/p' | head -1; }
  p=$(target/release/examples/push_load periodic --startup --scis 100000 --period-cs 100 --seconds 20 2>/dev/null | late)
  row "periodic push, 1 subscriber × 100 000 SCIs, 1 s: p99 lateness (ms)" "${p:-n/a}" "—" "—" "≤ 100 ms"
  p=$(target/release/examples/push_load periodic --scis 10000 --subscribers 10 --period-cs 100 --seconds 20 2>/dev/null | late)
  row "periodic push, 10 subscribers × 10 000 SCIs, 1 s: p99 lateness (ms)" "${p:-n/a}" "—" "—" "≤ 100 ms"
fi

if want edits; then
  echo "edits: one edit-config of N NACM groups, create and delete, vs netconfd ..." >&2
  start_peer
  start_agent edits
  apid=${PIDS[-1]}
  # netconfd is quadratic in N (285 s for 30 000 here, docs/performance.md): it gets 10 000 only.
  ours=$(target/release/examples/bulk_edit --port "$AGENT_PORT" --user admin --password bench --pid "$apid" \
    --label cats-sma --kind nacm-groups --sizes 10000 --sizes 30000 --sizes 100000)
  peer=$(target/release/examples/bulk_edit --port "$NC_PORT" --user ncpeer --password ncpeer \
    --pid "$(cat "$PEER_DIR/netconfd.pid")" --label netconfd --kind nacm-groups --sizes 10000)
  for n in 10000 30000 100000; do
    for op in create delete; do
      o=$(sed -n "s/^cats-sma $op *$n: *\([0-9.]*\) s.*/\1/p" <<<"$ours")
      p=$(sed -n "s/^netconfd $op *$n: *\([0-9.]*\) s.*/\1/p" <<<"$peer")
      row "edit-config $op of $n NACM groups (s, client wall time)" "${o:-n/a}" "netconfd ${p:-not run}" \
        "$( [[ -n $p && -n $o ]] && ratio "$p" "$o" || echo n/a)" "≤ 1 s at 100 000, never above netconfd"
    done
  done
  ours=$(target/release/examples/bulk_edit --port "$AGENT_PORT" --user admin --password bench --pid "$apid" \
    --label cats-sma --kind scis --sizes 100000)
  for op in create delete; do
    o=$(sed -n "s/^cats-sma $op *100000: *\([0-9.]*\) s.*/\1/p" <<<"$ours")
    row "edit-config $op of 100 000 SCIs (s)" "${o:-n/a}" "—" "—" "≤ 1 s"
  done
fi

if want engine; then
  echo "engine: in-process ingest vs the bare loop, memory per SCI ..." >&2
  crit=$(cargo bench --quiet --bench engine -- --measurement-time 4 'ingest/(core_ingest_batch_100k|core_ingest_100k|bare_hashmap_100k)' 2>/dev/null)
  # criterion prints "name  time: [low mid high]"; the middle value, in ms
  mid() { awk -v n="$1" '$0 ~ n {f=1} f && /time:/ {v=$(NF-3); u=$(NF-2); if (u=="s") v*=1000; if (u=="µs") v/=1000; print v; exit}' <<<"$crit"; }
  # The batch path is what the transports call (Engine::ingest_from: a message of reports
  # at a time); one call per report is printed beside it.
  batch=$(mid core_ingest_batch_100k); core=$(mid 'core_ingest_100k'); bare=$(mid bare_hashmap_100k)
  row "in-process ingest of 100 000 reports, batch path (ms)" "${batch:-n/a}" "bare hash-map loop ${bare:-n/a}" \
    "$(ratio "${batch:-0}" "${bare:-0}") of the bare loop" "≥ 3 M reports/s, ≤ 4× the bare loop"
  row "in-process ingest, batch path (M reports/s)" "$(awk -v t="${batch:-0}" 'BEGIN {if (t > 0) printf "%.2f", 100 / t; else print "n/a"}')" \
    "bare loop $(awk -v t="${bare:-0}" 'BEGIN {if (t > 0) printf "%.2f", 100 / t; else print "n/a"}')" "—" "≥ 3 M reports/s"
  row "in-process ingest of 100 000 reports, one call per report (ms)" "${core:-n/a}" "bare hash-map loop ${bare:-n/a}" \
    "$(ratio "${core:-0}" "${bare:-0}") of the bare loop" "—"
  mem=$(target/release/examples/engine_memory 2>/dev/null | sed -n 's/^after one report each: .* = \([0-9]*\) B\/SCI.*/\1/p')
  row "live heap per SCI at 1 000 000 SCIs (B)" "${mem:-n/a}" "—" "—" "≤ 300 B"
fi

echo
echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) at $(git rev-parse --short HEAD), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), median of $ROUNDS rounds."
echo
echo "| benchmark | cats-sma | baseline (same run) | ratio | goal |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
printf '%s\n' "${EXTRA[@]:-}"
