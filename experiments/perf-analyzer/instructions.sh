#!/usr/bin/env bash
# User-space instructions per request of /v1 REST, V2 REST (JSON) and V2 gRPC: the release
# server under callgrind, sent N documents of debian-deps-text over one protocol (one request
# at a time, scripts/v2_cost.py's clients), then stopped; once with no request as the base.
#
#   experiments/perf-analyzer/instructions.sh PYTHON DATASETS_DIR OUT_DIR [N...]
#
# PYTHON has tritonclient[grpc] and numpy. Serves models/default.xmcb as `tags` version 1, with
# the heap trimmer off (rustix's auxv reader crashes under valgrind). Prints the instructions
# each run collected. Build first: cargo build --release --bin xmc.
set -eu
if [ $# -lt 3 ]; then
    echo "usage: $0 PYTHON DATASETS_DIR OUT_DIR [N...]" >&2
    exit 2
fi
py=$1
data=$2
out=$(realpath -m "$3")
shift 3
counts=${*:-1000 2000}
cd "$(dirname "$0")/../.."
mkdir -p "$out/repo/tags/1"
cp models/default.xmcb "$out/repo/tags/1/model.xmcb"
run() {  # protocol, count
    local tag="$1-$2"
    XMC_HEAP_TRIM_MIB=0 valgrind --tool=callgrind --callgrind-out-file="$out/cg-$tag.out" \
        target/release/xmc serve --repository "$out/repo" --bind 127.0.0.1:18491 \
        --grpc-bind 127.0.0.1:18492 > "$out/serve-$tag.log" 2>&1 &
    local srv=$!
    for _ in $(seq 300); do curl -sf localhost:18491/v2/health/ready > /dev/null && break; sleep 0.5; done
    "$py" - "$1" "$2" "$data" <<'PY'
import json, pathlib, sys
sys.path.insert(0, "scripts")
import v2_cost as v
proto, n, data = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
docs = v.documents(data)
c = {
    "v1": lambda: v.Rest("127.0.0.1:18491", "/v1/predict",
                         lambda d: json.dumps({"text": d, "k": 5}).encode()),
    "v2json": lambda: v.Rest("127.0.0.1:18491", "/v2/models/tags/infer", lambda d: json.dumps({
        "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [d]}],
        "parameters": {"k": 5}}).encode()),
    "grpc": lambda: v.Grpc("127.0.0.1:18492", "tags", 5),
}[proto]() if n else None
for i in range(n):
    c.send(docs[i % len(docs)])
PY
    kill -INT "$srv"
    wait "$srv" || true
    echo "$tag $(grep -o 'Collected : [0-9]*' "$out/serve-$tag.log" | tr -dc 0-9)"
}
run none 0
for n in $counts; do
    for proto in v1 v2json grpc; do run "$proto" "$n"; done
done
