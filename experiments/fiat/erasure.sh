#!/usr/bin/env bash
# The FIAT erasure benchmark: per data set, trains the plain T = 1 model, FIAT in the input space
# (query-only, and with the training rows imputed: the default recipe) and today's DEFRAG + FIAT,
# then evaluates each on the test set with 0, 25, 50 and 75% of every point's features erased
# (the same points for every model: --erase-seed 1). Prints TSV rows:
# set model erase p@1 p@5 latency_us_mean.
# Usage: erasure.sh OUT_DIR (XMC_DATASETS, XMC: the xmc binary).
set -euo pipefail
X=${XMC:-target/release/xmc}
out=$1; mkdir -p "$out"
row() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.4f\t%.4f\t%.1f" % (d["p@1"], d["p@5"], d["latency_us_mean"]))'; }
for set in citeulike-t debian-deps; do
  dir=$XMC_DATASETS/$set
  declare -A sets=(
    [plain]=""
    [fiat-query]="--set fiat.input=true --set fiat.train=false"
    [fiat]="--set fiat.input=true"
    [defrag-fiat]="--set defrag=xy --set fiat=on"
  )
  for m in plain fiat-query fiat defrag-fiat; do
    # shellcheck disable=SC2086
    $X train --train "$dir/train.txt.gz" --out "$out/$set-$m.xmcb" ${sets[$m]} --quiet >&2
    for e in 0 0.25 0.5 0.75; do
      printf '%s\t%s\t%s\t%s\n' "$set" "$m" "$e" \
        "$($X eval --model "$out/$set-$m.xmcb" --data "$dir/test.txt.gz" --erase $e --erase-seed 1 --json | row)"
    done
  done
done
