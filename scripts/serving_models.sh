#!/usr/bin/env bash
# Trains the bundles the load-test scenarios serve (loadtest/scenarios/max-rate.toml and
# hot-swap.toml):
#
#   scripts/serving_models.sh [DATA_DIR] [OUT]
#
#   DATA_DIR  a directory with train.txt.gz (default $XMC_DATASETS/debian-deps)
#   OUT       where the bundles go (default out/serve-debian-deps)
#
# OUT/b8.xmcb and OUT/b8-seed1.xmcb: config/debian-deps.toml (one tree, branching 8) with seeds
# 0 and 1, the two bundles the hot swap alternates between. OUT/b2.xmcb: the binary tree of
# config/default.toml (T = 1, the depth sweep's λ' = 0 model), which max-rate measures beside
# B = 8. Bundles already present are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then
  DATA=$1
elif [ -n "${XMC_DATASETS:-}" ]; then
  DATA=$XMC_DATASETS/debian-deps
else
  echo "serving_models.sh: give DATA_DIR, or set XMC_DATASETS to a directory holding debian-deps/" >&2
  exit 1
fi
[ -f "$DATA/train.txt.gz" ] || { echo "serving_models.sh: $DATA/train.txt.gz does not exist" >&2; exit 1; }
OUT=${2:-out/serve-debian-deps}
mkdir -p "$OUT"
cargo build --release --quiet --bin xmc
train() { # OUT_FILE CONFIG SET...
  local out=$1 config=$2
  shift 2
  if [ -f "$out" ]; then
    echo "keeping $out" >&2
    return
  fi
  target/release/xmc train --config "$config" --quiet --train "$DATA/train.txt.gz" --out "$out" "$@"
}
train "$OUT/b8.xmcb" config/debian-deps.toml
train "$OUT/b8-seed1.xmcb" config/debian-deps.toml --set seed=1 --set name=debian-deps-b8-seed1
train "$OUT/b2.xmcb" config/default.toml --set trees=1 --set name=debian-deps-b2
