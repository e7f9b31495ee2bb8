#!/usr/bin/env bash
# Runs benches/flat.rs on the three sets, one quiet run each: scan, the default flat scorer
# (postings / scan with its selection pass), block indexes of the shapes in $SHAPES, and one tree,
# interleaved per query, one thread, on the first $QUERIES test points.
#
#   experiments/flat/prune.sh BENCH MODELS OUT
#
# BENCH is the built bench binary (target/release/deps/flat-*), MODELS the directory that
# experiments/flat/train.sh filled, OUT where each set's output goes (OUT/<set>.txt). Data sets
# come from $XMC_DATASETS; PERMUTE=1 adds the arrays-level table with the block index over the
# tree's leaf order.
set -euo pipefail
BENCH=$1 MODELS=$2 OUT=$3
mkdir -p "$OUT"
for p in "cite citeulike-t" "deps debian-deps" "text debian-deps-text"; do
  set -- $p
  env XMC_BENCH_SET="$2" XMC_BENCH_FLAT="$MODELS/$1-flat.xmcb" XMC_BENCH_TREE="$MODELS/$1-tree.xmcb" \
    XMC_BENCH_PASSES=${PASSES:-1} XMC_BENCH_QUERIES=${QUERIES:-2000} \
    XMC_BENCH_SHAPES=${SHAPES:-4:16,6:64,8:64} ${PERMUTE:+XMC_BENCH_PERMUTE=1} \
    /work/bin/quiet-run "$BENCH" 2>&1 | grep -v "label occurrences" | tee "$OUT/$1.txt"
done
