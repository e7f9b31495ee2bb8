#!/usr/bin/env bash
# Mean per-query latency with and without FIAT, interleaved in one run (run it under
# /work/bin/quiet-run or on an otherwise idle machine): per data set, the plain model and the FIAT
# model of erasure.sh, twice each, at 0% and 50% erasure. Prints TSV rows:
# set model erase round latency_us_mean p@1.
# Usage: latency.sh MODELS_DIR (the bundles erasure.sh wrote; XMC_DATASETS, XMC).
set -euo pipefail
X=${XMC:-target/release/xmc}
dir=$1
row() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.1f\t%.4f" % (d["latency_us_mean"], d["p@1"]))'; }
for set in citeulike-t debian-deps; do
  for e in 0 0.5; do
    for round in 1 2; do
      for m in plain fiat; do
        printf '%s\t%s\t%s\t%s\t%s\n' "$set" "$m" "$e" "$round" \
          "$($X eval --model "$dir/$set-$m.xmcb" --data "$XMC_DATASETS/$set/test.txt.gz" --erase $e --erase-seed 1 --json | row)"
      done
    done
  done
done
