#!/usr/bin/env bash
# A fleet on one machine: N `xmc serve` replicas behind HAProxy (Debian's `haproxy`), driven by
# xmc-loadtest through a live model rollout, to check that the rollout drops no request.
#
#   scripts/fleet.sh [OUT]          (default out/fleet; needs `apt-get install haproxy`)
#
# 1. Builds xmc and xmc-loadtest (release), and trains two distinct bundles on the vendored
#    Bibtex split (seeds 0 and 1): A, served first, and B, the rollout's.
# 2. Starts REPLICAS (3) replicas on 127.0.0.1, each serving its own model path (a symlink to
#    A, polled every POLL_MS), and HAProxy in front of them (round robin, health check on
#    /readyz, retries with redispatch).
# 3. Measures, in one run, the max rate of the fleet (through HAProxy) and of one replica
#    (directly): xmc-loadtest's max-rate search, p99 target 10 ms.
# 4. At half the fleet's max rate, three back-to-back fixed-rate runs: before (BEFORE_S), during
#    (DURING_S; the rollout starts ROLLOUT_AT_S into it: each replica's model path is renamed
#    to B in turn, STAGGER_S apart, as each pod's sync sidecar would), and after (AFTER_S).
#    A fixed-rate run is a max-rate scenario whose start rate is its ceiling, with no retries
#    and a p99 target of 1 s, so that it runs once at that rate and reports what it saw.
# 5. Reports failed requests (the load generator's and HAProxy's counts), p50/p99 of each run,
#    and each replica's version and reload counts at the end, into OUT/fleet.md.
# Traffic goes to 127.0.0.1 only. Every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=$(realpath -m "${1:-out/fleet}")
REPLICAS=${REPLICAS:-3}
POLL_MS=${POLL_MS:-100}
BEFORE_S=${BEFORE_S:-15}; DURING_S=${DURING_S:-20}; AFTER_S=${AFTER_S:-15}
ROLLOUT_AT_S=${ROLLOUT_AT_S:-6}; STAGGER_S=${STAGGER_S:-2}
LB_PORT=${LB_PORT:-18300}; STATS_PORT=${STATS_PORT:-18399}; BASE_PORT=${BASE_PORT:-18301}
QUERIES=${QUERIES:-tests/data/Bibtex/test.txt.gz}
command -v haproxy >/dev/null || { echo "haproxy is not installed (apt-get install haproxy)" >&2; exit 1; }

rm -rf "$OUT"; mkdir -p "$OUT"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

cargo build --release --locked --quiet --bin xmc --bin xmc-loadtest
XMC=target/release/xmc; LT=target/release/xmc-loadtest
for seed in 0 1; do
  "$XMC" train --config config/default.toml --train tests/data/Bibtex/train.txt.gz --quiet \
    --set seed=$seed --set name=fleet-$seed --out "$OUT/seed$seed.xmcb" >"$OUT/train$seed.log" 2>&1
done
A="$OUT/seed0.xmcb"; B="$OUT/seed1.xmcb"

ports=()
for i in $(seq "$REPLICAS"); do
  port=$((BASE_PORT + i - 1)); ports+=("$port")
  mkdir -p "$OUT/replica$i"
  ln -sfn "$A" "$OUT/replica$i/model.xmcb"
  XMC_POLL_INTERVAL_MS=$POLL_MS XMC_LOG=info XMC_LOG_FORMAT=text \
    "$XMC" serve --config config/server.toml --bind "127.0.0.1:$port" \
    --model "$OUT/replica$i/model.xmcb" >"$OUT/serve$i.log" 2>&1 &
  pids+=($!)
done

{
  cat <<CFG
global
    maxconn 8000
    # One thread: the replicas and the load generator share the machine's two cores.
    nbthread 1
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 30s
    option http-keep-alive
    # A connection refused by a replica (one restarting) is retried on another.
    retries 3
    option redispatch
frontend fleet
    bind 127.0.0.1:$LB_PORT
    default_backend xmc
frontend stats
    bind 127.0.0.1:$STATS_PORT
    stats enable
    stats uri /stats
backend xmc
    balance roundrobin
    http-reuse always
    option httpchk GET /readyz
    http-check expect status 200
CFG
  for i in $(seq "$REPLICAS"); do
    echo "    server r$i 127.0.0.1:${ports[i-1]} check inter 500 fall 2 rise 1"
  done
} >"$OUT/haproxy.cfg"
haproxy -c -f "$OUT/haproxy.cfg" >/dev/null
haproxy -db -f "$OUT/haproxy.cfg" >"$OUT/haproxy.log" 2>&1 &
pids+=($!)

version_at() { curl -sf --max-time 2 "http://127.0.0.1:$1/v1/model" | jq -r '.model.meta.version // empty' || true; }
deadline=$((SECONDS + 60))
for port in "${ports[@]}" "$LB_PORT"; do
  until [ -n "$(version_at "$port")" ]; do
    [ $SECONDS -lt $deadline ] || { echo "port $port not serving in 60 s" >&2; exit 1; }
    sleep 0.1
  done
done
# HAProxy's health checks mark every replica up.
sleep 2
VA=$(version_at "${ports[0]}")

scenario() { # NAME, then the [[models]] tables and the [max_rate] table's lines
  local name=$1; shift
  {
    echo "kind = \"max-rate\""
    echo "title = \"fleet: $name\""
    echo "[data]"
    echo "test = \"$QUERIES\""
    echo "k = 5"
    printf '%s\n' "$@"
  } >"$OUT/$name.toml"
}

echo "== max rate: the fleet (HAProxy) and one replica, in one run"
scenario max-rate \
  "[load]" "arrivals = \"poisson\"" "duration_s = 5" "warmup_s = 1" \
  "[[models]]" "label = \"fleet\"" "url = \"http://127.0.0.1:$LB_PORT\"" \
  "[[models]]" "label = \"replica\"" "url = \"http://127.0.0.1:${ports[0]}\"" \
  "[max_rate]" "target_p99_ms = 10" "start_rate = 1000" "refine = 3" \
  "endpoints = [\"predict\"]" "half_s = 0"
"$LT" "$OUT/max-rate.toml" --out "$OUT/max-rate" >"$OUT/max-rate.log" 2>&1
FLEET_MAX=$(jq '.max_rate[] | select(.label == "fleet") | .max_rate' "$OUT/max-rate/report.json")
ONE_MAX=$(jq '.max_rate[] | select(.label == "replica") | .max_rate' "$OUT/max-rate/report.json")
RATE=$(python3 -c "print(round($FLEET_MAX / 2))")
echo "fleet max $FLEET_MAX req/s, one replica $ONE_MAX req/s; the rollout runs at $RATE req/s"

fixed_rate() { # NAME SECONDS
  scenario "$1" \
    "[load]" "arrivals = \"poisson\"" "duration_s = $2" "warmup_s = 1" \
    "[[models]]" "label = \"fleet\"" "url = \"http://127.0.0.1:$LB_PORT\"" \
    "[max_rate]" "target_p99_ms = 1000" "start_rate = $RATE" "ceiling = $RATE" "refine = 0" \
    "retries = 0" "endpoints = [\"predict\"]" "half_s = 0"
  "$LT" "$OUT/$1.toml" --out "$OUT/$1" >"$OUT/$1.log" 2>&1 || true
}
reloads_at() { curl -sf --max-time 2 "http://127.0.0.1:$1/metrics" | grep '^xmc_model_reloads_total' | tr '\n' ' ' || true; }

echo "== before ($BEFORE_S s at $RATE req/s)"
fixed_rate before "$BEFORE_S"
echo "== during ($DURING_S s; the rollout to B starts ${ROLLOUT_AT_S} s in, ${STAGGER_S} s between replicas)"
(
  # The fixed-rate run's warm-up (1 s) comes first.
  sleep "$((ROLLOUT_AT_S + 1))"
  for i in $(seq "$REPLICAS"); do
    ln -sfn "$B" "$OUT/replica$i/.model.tmp" && mv -T "$OUT/replica$i/.model.tmp" "$OUT/replica$i/model.xmcb"
    echo "$(date +%s.%N) replica $i renamed to B" >>"$OUT/rollout.log"
    sleep "$STAGGER_S"
  done
) &
roll=$!
fixed_rate during "$DURING_S"
wait $roll
echo "== after ($AFTER_S s)"
fixed_rate after "$AFTER_S"

curl -sf "http://127.0.0.1:$STATS_PORT/stats;csv" >"$OUT/haproxy-stats.csv"
{
  echo "# Fleet run: $REPLICAS replicas behind HAProxy, a live rollout under load"
  echo
  echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
  echo "- machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- bundles: A $(stat -c %s "$A") bytes (version $VA), B $(stat -c %s "$B") bytes"
  echo "- replicas poll every $POLL_MS ms; HAProxy $(haproxy -v | head -1 | awk '{print $3}'), one thread, round robin"
  echo
  echo "## Max rate (p99 ≤ 10 ms, no errors, ≥ 95% achieved), measured in one run"
  echo
  echo "| target | max rate (req/s) |"
  echo "|---|---|"
  echo "| fleet of $REPLICAS through HAProxy | $FLEET_MAX |"
  echo "| one replica, directly | $ONE_MAX |"
  echo
  echo "## At half the fleet's max rate ($RATE req/s), before, during and after the rollout"
  echo
  echo "| run | seconds | offered | achieved | ok | failed | p50 ms | p99 ms | max ms |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for run in before during after; do
    jq -r --arg run "$run" '.max_rate[0].steps[-1] as $s | $s.summary as $m |
      "| \($run) | \(.load.duration_s) | \($m.offered_rps | round) | \($m.achieved_rps | round) | \($m.ok) | \($m.errors) \($m.error_kinds) | \($m.latency.p50_ms * 1000 | round / 1000) | \($m.latency.p99_ms * 1000 | round / 1000) | \($m.latency.max_ms * 1000 | round / 1000) |"' \
      "$OUT/$run/report.json"
  done
  echo
  echo "HAProxy's backend counts over the whole script (max-rate search included):"
  echo
  echo '```'
  awk -F, 'NR == 1 || $1 == "xmc" { print $1 "," $2 ",req_tot=" $49 ",5xx=" $44 ",econ=" $14 ",eresp=" $15 ",wretr=" $16 ",wredis=" $17 }' "$OUT/haproxy-stats.csv" | sed 1d
  echo '```'
  echo
  echo "## Replicas at the end"
  echo
  for i in $(seq "$REPLICAS"); do
    echo "- replica $i: version $(version_at "${ports[i-1]}"); $(reloads_at "${ports[i-1]}")"
  done
  echo
  echo "Rollout times (Unix s): $(tr '\n' ';' <"$OUT/rollout.log")"
} >"$OUT/fleet.md"
cat "$OUT/fleet.md"
# The acceptance: no failed request in the three runs, and every replica on B.
fail=0
for run in before during after; do
  e=$(jq '.max_rate[0].steps[-1].summary.errors' "$OUT/$run/report.json")
  [ "$e" = 0 ] || { echo "FAIL: $e failed requests in $run" >&2; fail=1; }
done
VB=$(version_at "${ports[0]}")
for i in $(seq "$REPLICAS"); do
  v=$(version_at "${ports[i-1]}")
  [ -n "$v" ] && [ "$v" != "$VA" ] && [ "$v" = "$VB" ] \
    || { echo "FAIL: replica $i serves '$v' (A: $VA, replica 1: $VB)" >&2; fail=1; }
done
exit $fail
