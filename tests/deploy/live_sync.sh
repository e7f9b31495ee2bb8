#!/usr/bin/env bash
# The live-sync test (every replica on the new version within 2 poll intervals; a corrupt
# bundle counted as a failed reload while the old version answers): the sidecar's sync script, run against a local
# directory as the bucket, feeds 3 `xmc serve` replicas on 127.0.0.1, each with a sync loop and
# a model directory of its own, as in 3 pods.
#
#   tests/deploy/live_sync.sh            (from .ci/run; builds target/debug/xmc if needed)
#
# 1. Trains two small distinct bundles on the vendored Bibtex split (seeds 0 and 1).
# 2. Uploads A; each replica starts once its sync loop has copied it (the pod's startupProbe).
# 3. Uploads B: every replica reports B's version in GET /v1/model within 2 poll intervals of
#    B landing in its directory (the sync loop's rename).
# 4. Uploads a corrupt copy of B: every replica counts a failed reload
#    (xmc_model_reloads_total{result="error"}) and keeps answering predictions with B.
# Bounded: every wait has a deadline, and the whole run is under `timeout` in .ci/run. Every
# process it starts is killed on exit. Prints what it measured.
set -euo pipefail
cd "$(dirname "$0")/../.."

XMC=${XMC:-target/debug/xmc}
POLL_MS=${POLL_MS:-1000}         # the servers' poll_interval_ms (config/server.toml's)
SYNC_S=${SYNC_S:-0.5}            # the sync loops' interval
REPLICAS=3
# The sidecar's tool, from Debian's packages (the CI machine starts without it).
if ! command -v rclone >/dev/null; then
  echo "== installing rclone (Debian's package)"
  apt-get install -y -qq rclone >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq rclone >/dev/null; }
fi
if [ ! -x "$XMC" ] || [ -n "${XMC_BUILD:-}" ]; then
  cargo build --locked --quiet --bin xmc
fi
work=$(mktemp -d /tmp/xmc-live-sync.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for i in $(seq "$REPLICAS"); do
    echo "--- replica $i sync log" >&2; tail -5 "$work/sync$i.log" >&2 || true
    echo "--- replica $i server log" >&2; tail -5 "$work/serve$i.log" >&2 || true
  done
  exit 1
}
now_ms() { date +%s%3N; }

echo "== training two bundles (Bibtex, seeds 0 and 1)"
for seed in 0 1; do
  "$XMC" train --config config/default.toml --train tests/data/Bibtex/train.txt.gz \
    --quiet --set seed=$seed --set name=live-sync-$seed --out "$work/seed$seed.xmcb" >"$work/train$seed.log" 2>&1 \
    || { cat "$work/train$seed.log"; fail "training seed $seed"; }
done
mkdir -p "$work/bucket"
upload() { # An atomic upload to the bucket, as an object store's PUT is.
  cp "$1" "$work/bucket/.upload" && mv -f "$work/bucket/.upload" "$work/bucket/model.xmcb"
}

ports=()
for i in $(seq "$REPLICAS"); do
  mkdir -p "$work/replica$i"
  XMC_SYNC_SOURCE="$work/bucket/model.xmcb" XMC_SYNC_DEST="$work/replica$i/model.xmcb" \
    XMC_SYNC_INTERVAL_S=$SYNC_S sh deploy/kubernetes/overlays/live-sync/xmc-live-sync.sh \
    >"$work/sync$i.log" 2>"$work/sync$i.err" &
  pids+=($!)
done
upload "$work/seed0.xmcb"

echo "== starting $REPLICAS replicas (poll_interval_ms = $POLL_MS)"
for i in $(seq "$REPLICAS"); do
  deadline=$(( $(now_ms) + 20000 ))
  until [ -s "$work/replica$i/model.xmcb" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "replica $i: the first sync did not land in 20 s"
    sleep 0.05
  done
  XMC_POLL_INTERVAL_MS=$POLL_MS XMC_LOG=info XMC_LOG_FORMAT=text \
    "$XMC" serve --config config/server.toml --bind 127.0.0.1:0 \
    --model "$work/replica$i/model.xmcb" >"$work/serve$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq "$REPLICAS"); do
  deadline=$(( $(now_ms) + 60000 ))
  port=""
  until [ -n "$port" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "replica $i: no serving line in 60 s"
    port=$(sed -n 's/.* serving addr=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve$i.log" | head -1)
    sleep 0.05
  done
  ports+=("$port")
done

served_version() { # The version GET /v1/model reports, or nothing.
  curl -sf --max-time 2 "http://127.0.0.1:$1/v1/model" | jq -r '.model.meta.version // empty' 2>/dev/null || true
}
reload_errors() {
  curl -sf --max-time 2 "http://127.0.0.1:$1/metrics" \
    | awk '/^xmc_model_reloads_total\{result="error"\}/ { print $2; f = 1 } END { if (!f) print 0 }'
}
synced_ms() { # The epoch ms of replica $1's sync number $2 (1-based), or nothing yet.
  awk -v n="$2" '$1 == "synced" { c++; if (c == n) print $2 }' "$work/sync$1.log"
}

va=$(served_version "${ports[0]}")
for i in $(seq "$REPLICAS"); do
  v=$(served_version "${ports[i-1]}")
  [ -n "$v" ] && [ "$v" = "$va" ] || fail "replica $i serves '$v', replica 1 '$va'"
done
echo "all replicas serve A: $va"

echo "== uploading B"
upload_ms=$(now_ms)
upload "$work/seed1.xmcb"
limit=$(( 2 * POLL_MS ))
# Every replica is polled in one loop, so each one's first answer with B is timed alike.
declare -a seen served
deadline=$(( $(now_ms) + 30000 ))
while :; do
  pending=0
  for i in $(seq "$REPLICAS"); do
    [ -n "${seen[i]:-}" ] && continue
    v=$(served_version "${ports[i-1]}")
    t=$(now_ms)
    if [ -n "$v" ] && [ "$v" != "$va" ]; then seen[i]=$t; served[i]=$v; else pending=1; fi
  done
  [ "$pending" = 0 ] && break
  [ "$(now_ms)" -lt "$deadline" ] || fail "not every replica serves B 30 s after the upload"
  sleep 0.02
done
worst=0
vb=${served[1]}
# When a replica started serving B is the time its log gives for publishing it (microseconds,
# UTC); the loop above only confirms that GET /v1/model then reports it, and its own curl calls
# take up to hundreds of ms on a loaded machine.
published_ms() { # replica, version
  local ts
  ts=$(grep "model published" "$work/serve$1.log" | grep "version=$2 " | head -1 | awk '{print $1}')
  [ -n "$ts" ] && date -d "$ts" +%s%3N
}
for i in $(seq "$REPLICAS"); do
  [ "${served[i]}" = "$vb" ] || fail "replica $i serves ${served[i]}, replica 1 $vb"
  landed=$(synced_ms "$i" 2)
  [ -n "$landed" ] || fail "replica $i serves B, but its sync loop logged no second sync"
  published=$(published_ms "$i" "$vb")
  [ -n "$published" ] || fail "replica $i serves B, but its log has no \"model published\" line for it"
  took=$(( published - landed ))
  echo "replica $i: B landed $(( landed - upload_ms )) ms after the upload, published $took ms after landing (GET /v1/model saw it $(( seen[i] - landed )) ms after)"
  [ "$took" -gt "$worst" ] && worst=$took
done
echo "worst landing-to-publishing: $worst ms (limit: 2 poll intervals = $limit ms)"
[ "$worst" -le "$limit" ] || fail "a replica took $worst ms > $limit ms to serve B"

echo "== uploading a corrupt copy of B"
python3 - "$work/seed1.xmcb" "$work/corrupt.xmcb" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0xFF
open(sys.argv[2], "wb").write(b)
PY
declare -a before_err
for i in $(seq "$REPLICAS"); do before_err[i]=$(reload_errors "${ports[i-1]}"); done
upload "$work/corrupt.xmcb"
for i in $(seq "$REPLICAS"); do
  port=${ports[i-1]}
  deadline=$(( $(now_ms) + 30000 ))
  until [ "$(reload_errors "$port")" -gt "${before_err[i]}" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "replica $i counted no failed reload in 30 s"
    sleep 0.05
  done
  v=$(served_version "$port")
  [ "$v" = "$vb" ] || fail "replica $i serves '$v' after the corrupt upload, not B ($vb)"
  answer=$(curl -sf --max-time 2 -H 'content-type: application/json' \
    -d '{"features": [[1, 1.0], [5, 0.5]]}' "http://127.0.0.1:$port/v1/predict") \
    || fail "replica $i: predict failed after the corrupt upload"
  av=$(echo "$answer" | jq -r '.model.version')
  [ "$av" = "$vb" ] || fail "replica $i answered with model $av, not $vb"
  err=$(curl -sf --max-time 2 "http://127.0.0.1:$port/v1/model" | jq -r '.reloads.last_error')
  echo "replica $i: failed reloads $(reload_errors "$port") (was ${before_err[i]}), still answers with B; last_error: ${err:0:100}"
done
echo "live-sync: every replica converged on B and refused the corrupt bundle"
