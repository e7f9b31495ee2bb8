#!/usr/bin/env bash
# The memory of one `xmc serve` replica per bundle, to size a pod's requests and limits
# (docs/deploy.md, "Sizing a replica"):
#
#   scripts/replica_memory.sh BUNDLE.xmcb [BUNDLE.xmcb ...]
#
# For each bundle: starts the server (XMC=target/release/xmc by default) on 127.0.0.1 with the
# shipped config, reads /proc/PID/status once it is ready (VmRSS, and its file-backed part
# RssFile: the bundle's pre-faulted pages, which a cgroup charges to the pod), sends 2000
# predictions from 8 parallel clients (curl), forces two reloads of the same file (each maps a
# second copy of the bundle while the first still serves), and reads VmHWM, the peak. Prints
# one Markdown row per bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
XMC=${XMC:-target/release/xmc}
PORT=${PORT:-18290}
echo "| bundle | bytes | ready: VmRSS MiB | of it RssFile MiB | RssAnon MiB | after load + 2 swaps: VmRSS MiB | VmHWM (peak) MiB | peak − bundle MiB |"
echo "|---|---|---|---|---|---|---|---|"
for bundle in "$@"; do
  XMC_ADMIN_TOKEN=measure XMC_LOG=warn "$XMC" serve --config config/server.toml \
    --bind "127.0.0.1:$PORT" --model "$bundle" >/dev/null 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done
  sleep 1
  st() { awk -v k="$1:" '$1 == k { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }
  rss0=$(st VmRSS); file0=$(st RssFile); anon0=$(st RssAnon)
  n_features=$(curl -sf "http://127.0.0.1:$PORT/v1/model" | jq '.model.meta.n_features')
  for c in $(seq 8); do
    (
      for r in $(seq 250); do
        f=$(( (c * 7919 + r * 104729) % n_features ))
        curl -sf -o /dev/null -H 'content-type: application/json' \
          -d "{\"features\": [[$f, 1.0], [$(( (f + 17) % n_features )), 0.5]]}" \
          "http://127.0.0.1:$PORT/v1/predict"
      done
    ) &
  done
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
  for _ in 1 2; do
    curl -s -o /dev/null -w "%{http_code} " -X POST -H "authorization: Bearer measure" \
      "http://127.0.0.1:$PORT/v1/admin/reload?force=true" >&2
  done
  sleep 1
  rss1=$(st VmRSS); hwm=$(st VmHWM)
  bytes=$(stat -L -c %s "$bundle")
  echo "| $(basename "$bundle") | $bytes | $rss0 | $file0 | $anon0 | $rss1 | $hwm | $(python3 -c "print(round($hwm - $bytes / 2**20, 1))") |"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  trap - EXIT
done
