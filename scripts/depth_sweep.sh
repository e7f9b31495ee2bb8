#!/usr/bin/env bash
# Trains one model per λ' on a data set and load-tests them over HTTP (depth-vs-latency):
#
#   scripts/depth_sweep.sh DATA_DIR [OUT] [RATES] [LAMBDA_PRIMES]
#
#   DATA_DIR       a directory with train.txt.gz and test.txt.gz (XC format)
#   OUT            work and report directory (default out/depth-sweep-<data set>)
#   RATES          offered rates, comma-separated (default 100,400)
#   LAMBDA_PRIMES  comma-separated λ' values (default 0,1,2,6,30,1000); λ = 2λ'/(1+λ')
#
# Models are T = 1 trees (config/default.toml with --set), served with early stopping on (the
# server's default). Models already present in OUT/models are reused. The report
# (report.md, report.json, depth*_latency.{svg,png}, precision_depth.*, latency_rate.*) goes to OUT.
# Extra training keys: TRAIN_SET="max_leaf=50 solver.c=2". Load settings: DURATION (s, default 10),
# LIMIT (queries, default 0 = all), K (top-k per query, default 5; K=1 isolates the depth@1 effect),
# LOAD_CPUS and SERVER_CPUS (comma-separated CPU ids: pin the generator and the servers apart,
# e.g. LOAD_CPUS=0 SERVER_CPUS=1; see loadtest/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$(realpath "$1")
NAME=$(basename "$DATA")
OUT=${2:-out/depth-sweep-$NAME}
RATES=${3:-100,400}
LPS=${4:-0,1,2,6,30,1000}
DURATION=${DURATION:-10}
LIMIT=${LIMIT:-0}
K=${K:-5}
LOAD_CPUS=${LOAD_CPUS:-}
SERVER_CPUS=${SERVER_CPUS:-}
mkdir -p "$OUT/models"
cargo build --release --quiet --bin xmc --bin xmc-loadtest
SETS=()
for kv in ${TRAIN_SET:-}; do SETS+=(--set "$kv"); done

scenario="$OUT/depth-vs-latency.toml"
cat >"$scenario" <<TOML
kind = "depth-vs-latency"
title = "Expected depth versus latency over HTTP: $NAME, T = 1, k = $K, early stopping on"

[data]
test = "$DATA/test.txt.gz"
k = $K
limit = $LIMIT

[load]
arrivals = "poisson"
duration_s = $DURATION
warmup_s = 2
cpus = [$LOAD_CPUS]

[server]
xmc = "target/release/xmc"
cpus = [$SERVER_CPUS]

[depth_vs_latency]
rates = [$RATES]
TOML
for lp in ${LPS//,/ }; do
  model="$OUT/models/lp-$lp.xmcb"
  if [ ! -f "$model" ]; then
    echo "training λ'=$lp -> $model" >&2
    target/release/xmc train --config config/default.toml --quiet \
      --train "$DATA/train.txt.gz" --out "$model" \
      --set trees=1 --set lambda_prime="$lp" --set name="$NAME-lp$lp" "${SETS[@]}"
  fi
  printf '\n[[models]]\nlabel = "λ'"'"'=%s"\nbundle = "%s"\n' "$lp" "$model" >>"$scenario"
done
target/release/xmc-loadtest "$scenario" --out "$OUT"
