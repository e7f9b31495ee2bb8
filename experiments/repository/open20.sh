#!/usr/bin/env bash
# Opens a repository of 20 models with `xmc serve --repository` and prints how long the server
# took from its start until /v2/health/ready answered 200 (every model open, checked and warm),
# its RSS then, and the sum of the bundles' sizes. Usage: open20.sh XMC_BIN BUNDLE...
# (the bundles are used in turn, as models m01..m20, version 1).
set -euo pipefail
bin=$1; shift
bundles=("$@")
repo=$(mktemp -d)
trap 'rm -rf "$repo"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true' EXIT
total=0
for i in $(seq -w 1 20); do
    b=${bundles[$(( (10#$i - 1) % ${#bundles[@]} ))]}
    mkdir -p "$repo/m$i/1"
    cp "$b" "$repo/m$i/1/model.xmcb"
    total=$(( total + $(stat -c %s "$b") ))
done
sync
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s%N)
XMC_LOG=warn XMC_POLL_INTERVAL_MS=0 "$bin" serve --repository "$repo" --bind "127.0.0.1:$port" &
pid=$!
until curl -sf "127.0.0.1:$port/v2/health/ready" >/dev/null; do sleep 0.005; done
end=$(date +%s%N)
rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
echo "models: 20; ready after $(( (end - start) / 1000000 )) ms (process start included)"
echo "RSS: $(( rss_kib / 1024 )) MiB; bundles: $(( total / 1048576 )) MiB; RSS - bundles: $(( rss_kib / 1024 - total / 1048576 )) MiB"
