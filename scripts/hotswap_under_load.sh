#!/usr/bin/env bash
# Hot swap under load (the server issue's acceptance 3), with loopback load generators from
# Debian (`apt-get install wrk hey`):
#
#   scripts/hotswap_under_load.sh MODEL_A.xmcb MODEL_B.xmcb QUERY.json [SWAPS]
#
# 1. Starts `xmc serve` on a symlink to MODEL_A (poll interval 100 ms).
# 2. Measures the maximum rate with wrk (closed loop, 16 connections, 10 s).
# 3. At half that rate (hey, rate-limited workers), runs 20 s without swaps, then keeps the same
#    load while swapping the served model SWAPS times (default 100), every second: each swap flips
#    the symlink by an atomic rename; half are left to the poller, half are followed by
#    POST /v1/admin/reload.
# 4. Prints failed requests, p50/p99 before and during the swaps, the server's peak RSS (VmHWM)
#    and the two bundle sizes.
#
# QUERY.json is one /v1/predict body. Work files go to $OUT (default /tmp/xmc-hotswap).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1"); B=$(realpath "$2"); Q=$(realpath "$3"); SWAPS=${4:-100}
OUT=${OUT:-/tmp/xmc-hotswap}; PORT=${PORT:-8197}; TOKEN=hotswap-token
mkdir -p "$OUT"; rm -f "$OUT"/model.xmcb "$OUT"/link.xmcb
cargo build --release --quiet --bin xmc
ln -s "$A" "$OUT/link.xmcb"
URL="http://127.0.0.1:$PORT"
XMC_POLL_INTERVAL_MS=100 XMC_ADMIN_TOKEN=$TOKEN XMC_LOG=warn \
    target/release/xmc serve --model "$OUT/link.xmcb" --bind "127.0.0.1:$PORT" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "$URL/readyz" >/dev/null && break; sleep 0.1; done

cat >"$OUT/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open("$Q"):read("a")
EOF
max=$(wrk -t 2 -c 16 -d 10s -s "$OUT/post.lua" "$URL/v1/predict" | awk '/Requests\/sec/ {print int($2)}')
half=$((max / 2)); workers=16; per=$(( (half + workers - 1) / workers ))
echo "max rate (wrk, 16 connections): $max req/s; load: $workers workers x $per req/s"

load() { hey -z "$1" -c $workers -q $per -m POST -T application/json -D "$Q" "$URL/v1/predict" >"$2"; }
load 20s "$OUT/before.txt"
# hey itself in the background (not a function's subshell), so that SIGINT reaches it and it
# prints its report.
hey -z 1000s -c $workers -q $per -m POST -T application/json -D "$Q" "$URL/v1/predict" \
    >"$OUT/during.txt" &
LOAD=$!
sleep 1
start=$(date +%s.%N)
for i in $(seq "$SWAPS"); do
  target=$([ $((i % 2)) -eq 1 ] && echo "$B" || echo "$A")
  ln -sfn "$target" "$OUT/link.tmp" && mv -T "$OUT/link.tmp" "$OUT/link.xmcb"
  if [ $((i % 4)) -ge 2 ]; then
    # Half the swaps are picked up by the poller, half are asked for on the admin route.
    curl -sf -X POST -H "authorization: Bearer $TOKEN" "$URL/v1/admin/reload" >/dev/null \
      || echo "reload call $i failed"
  fi
  sleep 1
done
end=$(date +%s.%N)
kill -INT $LOAD 2>/dev/null || true
wait $LOAD 2>/dev/null || true
echo "swaps: $SWAPS in $(python3 -c "print(round($end - $start, 1))") s"
reloads=$(curl -s "$URL/metrics" | grep '^xmc_model_reloads_total' || true)
echo "$reloads"
for f in before during; do
  p50=$(awk '/50% in/ {print $3}' "$OUT/$f.txt"); p99=$(awk '/99% in/ {print $3}' "$OUT/$f.txt")
  codes=$(awk '/Status code distribution/,0' "$OUT/$f.txt" | grep -E '^\s+\[' | tr -s ' ' | tr '\n' ';')
  errs=$(awk '/Error distribution/,0' "$OUT/$f.txt" | grep -E '^\s+\[' | tr -s ' ' | tr '\n' ';' || true)
  rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/$f.txt")
  echo "$f: $rps req/s, p50 ${p50}s, p99 ${p99}s, status: $codes errors: ${errs:-none}"
done
echo "server peak RSS: $(grep VmHWM /proc/$SERVER/status | awk '{print $2}') kB"
echo "bundles: $(stat -c %s "$A") + $(stat -c %s "$B") bytes"
