#!/usr/bin/env bash
# Server CPU per request of /v1 REST, V2 REST (JSON) and V2 gRPC at one request rate:
# scripts/v2_cost.py against one release server that serves models/default.xmcb as `tags`,
# the three protocols interleaved in each round.
#
#   experiments/perf-analyzer/cpu.sh PYTHON DATASETS_DIR OUT_DIR [ROUNDS] [XMC_BINARY]
#
# PYTHON has tritonclient[grpc] and numpy. ROUNDS defaults to 8, XMC_BINARY to
# target/release/xmc (build it first). Run it alone on the machine: it measures CPU time.
# Writes OUT_DIR/cpu.txt (v2_cost.py's table) and the server's log.
set -eu
if [ $# -lt 3 ]; then
    echo "usage: $0 PYTHON DATASETS_DIR OUT_DIR [ROUNDS] [XMC_BINARY]" >&2
    exit 2
fi
py=$1
data=$2
out=$(realpath -m "$3")
rounds=${4:-8}
xmc=$(realpath "${5:-target/release/xmc}")
cd "$(dirname "$0")/../.."
mkdir -p "$out/repo/tags/1"
cp models/default.xmcb "$out/repo/tags/1/model.xmcb"
"$xmc" serve --repository "$out/repo" --bind 127.0.0.1:18481 --grpc-bind 127.0.0.1:18482 \
    > "$out/serve.log" 2>&1 &
srv=$!
trap 'kill -INT "$srv" 2>/dev/null; wait "$srv" || true' EXIT
for _ in $(seq 300); do curl -sf localhost:18481/v2/health/ready > /dev/null && break; sleep 0.2; done
"$py" scripts/v2_cost.py "$data" --http 127.0.0.1:18481 --grpc 127.0.0.1:18482 --pid "$srv" \
    --model tags --rate 300 --seconds 5 --rounds "$rounds" | tee "$out/cpu.txt"
