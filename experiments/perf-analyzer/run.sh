#!/usr/bin/env bash
# perf_analyzer (Triton's load tool) against `xmc serve --repository` over V2 REST and V2 gRPC,
# beside xmc-loadtest against /v1, on the shipped default model and debian-tags-text documents.
#
#   experiments/perf-analyzer/run.sh PERF_ANALYZER DATASETS_DIR OUT_DIR [ROUNDS]
#
# PERF_ANALYZER is the binary (the tritonclient 2.41.0 wheel from PyPI ships one under
# tritonclient-2.41.0.data/data/bin/; it needs libb64.so.0d, from Debian's libb64-0d, and
# libcudart.so.12, from PyPI's nvidia-cuda-runtime-cu12, on LD_LIBRARY_PATH). DATASETS_DIR holds
# debian-tags-text/. Each round: perf_analyzer at a constant 300 req/s over HTTP, then gRPC (the
# first 1,500 test documents, one per request), then xmc-loadtest's /v1 at 300 req/s (constant
# arrivals, all test documents); after the rounds, perf_analyzer closed-loop at concurrency 1
# and 2 over each. Build first: cargo build --release --bin xmc --bin xmc-loadtest.
set -eu
if [ $# -lt 3 ]; then
    echo "usage: $0 PERF_ANALYZER DATASETS_DIR OUT_DIR [ROUNDS]" >&2
    exit 2
fi
pa=$1
data=$2
out=$(realpath -m "$3")
rounds=${4:-2}
cd "$(dirname "$0")/../.."
mkdir -p "$out/repo/tags/1"
cp models/default.xmcb "$out/repo/tags/1/model.xmcb"
python3 - "$data/debian-tags-text/test.jsonl.gz" "$out/input.json" <<'PY'
import gzip, json, sys
docs = []
with gzip.open(sys.argv[1], "rt") as f:
    for line in f:
        docs.append(json.loads(line)["text"])
        if len(docs) == 1500:
            break
json.dump({"data": [{"text": {"content": [d], "shape": [1]}} for d in docs]}, open(sys.argv[2], "w"))
PY
cat > "$out/v1.toml" <<TOML
kind = "depth-vs-latency"
title = "/v1 at 300 req/s: default model, debian-tags-text test documents"
[data]
test = "$data/debian-tags-text/test.jsonl.gz"
k = 5
[load]
arrivals = "constant"
duration_s = 15
warmup_s = 2
timeout_ms = 2000
max_in_flight = 2048
[server]
xmc = "target/release/xmc"
[[models]]
label = "default"
bundle = "models/default.xmcb"
[depth_vs_latency]
rates = [300]
TOML
serve() {
    target/release/xmc serve --repository "$out/repo" --bind 127.0.0.1:18481 \
        --grpc-bind 127.0.0.1:18482 > "$out/serve-$1.log" 2>&1 &
    srv=$!
    for _ in $(seq 50); do curl -sf localhost:18481/v2/health/ready > /dev/null && return; sleep 0.2; done
    echo "the server did not start" >&2
    exit 1
}
analyze() {  # protocol, output name, mode flags...
    local proto=$1 name=$2 port=18481
    shift 2
    [ "$proto" = grpc ] && port=18482
    "$pa" -m tags --input-data "$out/input.json" --shape text:1 --measurement-interval 5000 \
        -i "$proto" -u "localhost:$port" "$@" > "$out/$name.txt" 2>&1 || echo "$name: perf_analyzer exit $?"
}
for r in $(seq "$rounds"); do
    serve "$r"
    analyze http "http-$r" --request-rate-range 300
    analyze grpc "grpc-$r" --request-rate-range 300
    kill "$srv"; wait "$srv" 2> /dev/null || true
    target/release/xmc-loadtest "$out/v1.toml" --out "$out/v1-$r" > "$out/v1-$r.txt" 2>&1
done
serve c
analyze http conc-http --concurrency-range 1:2
analyze grpc conc-grpc --concurrency-range 1:2
kill "$srv"; wait "$srv" 2> /dev/null || true
grep -H -E 'Throughput|p50 latency|p99 latency|Failed' "$out"/*-*.txt || true
