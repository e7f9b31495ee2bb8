#!/usr/bin/env bash
# Trains what the flat-scorer benchmark compares: per data set, a flat model and a T = 1 tree with
# the defaults, timed; with `synth`, first generates the synthetic sets (10^3, 10^4, 10^5 labels).
#
#   experiments/flat/train.sh XMC OUT cite|deps|text|synth...
#
# XMC is the xmc binary, OUT a directory; data sets come from $XMC_DATASETS. Each model goes to
# OUT/<set>-<flat|tree>.xmcb, its wall time and peak memory to OUT/<set>-<flat|tree>.time.
set -euo pipefail
XMC=$1 OUT=$2
shift 2
mkdir -p "$OUT"
train() { # set model train-file
  local set=$1 model=$2 data=$3
  /usr/bin/time -f "%e s wall, %M KiB peak" -o "$OUT/$set-$model.time" \
    "$XMC" train --quiet --train "$data" --set "model=$model" --out "$OUT/$set-$model.xmcb"
  echo "$set $model: $(cat "$OUT/$set-$model.time"), $(stat -c %s "$OUT/$set-$model.xmcb") bytes"
}
for s in "$@"; do
  case $s in
    cite) train cite tree "$XMC_DATASETS/citeulike-t/train.txt.gz"
          train cite flat "$XMC_DATASETS/citeulike-t/train.txt.gz" ;;
    deps) train deps tree "$XMC_DATASETS/debian-deps/train.txt.gz"
          train deps flat "$XMC_DATASETS/debian-deps/train.txt.gz" ;;
    text) train text tree "$XMC_DATASETS/debian-deps-text/train.jsonl.gz"
          train text flat "$XMC_DATASETS/debian-deps-text/train.jsonl.gz" ;;
    synth)
      for l in 1000 10000 100000; do
        d="$OUT/synth-$l"
        mkdir -p "$d"
        "$XMC" data synth --out "$d/train.txt.gz" --n 20000 --d 20000 --l $l --seed 7 \
          --n-test 2000 --out-test "$d/test.txt.gz"
        train "synth-$l" tree "$d/train.txt.gz"
        train "synth-$l" flat "$d/train.txt.gz"
      done ;;
    *) echo "unknown set $s" >&2; exit 2 ;;
  esac
done
