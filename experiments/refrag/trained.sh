#!/usr/bin/env bash
# REFRAG with the weights the trainer chooses on a held-out fold (refrag_search = on), against the
# same model without REFRAG: each REFRAG model is evaluated twice on the test split, once with
# REFRAG (its default) and once with `--set rerank=off` (the same bundle, the search alone).
# Models are trained with T = 1 and 2 threads (wall time in OUT/train.txt; a model already in OUT
# is kept); evaluation is `xmc eval --k 5 --json`, one query at a time on one thread.
# Usage: experiments/refrag/trained.sh DATASETS_DIR OUT_DIR PART...
#   PART: cite-plain, cite-xy, deb-plain, deb-xy (plain: no DEFRAG; xy: DEFRAG-XY with d0 = 8)
set -euo pipefail
data=${1:?datasets dir}
out=${2:?output dir}
shift 2
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"

train() { # name dataset [train options...]
  local name=$1 ds=$2
  shift 2
  [[ -f "$out/$name.xmcb" ]] && return 0
  local t0 t1
  t0=$(date +%s.%N)
  "$xmc" train --quiet --train "$data/$ds/train.txt.gz" --out "$out/$name.xmcb.tmp" \
    --set threads=2 --set trees=1 --set refrag=on "$@"
  t1=$(date +%s.%N)
  mv "$out/$name.xmcb.tmp" "$out/$name.xmcb"
  echo "$name train_s $(echo "$t1 - $t0" | bc) bytes $(stat -c %s "$out/$name.xmcb")" \
    | tee -a "$out/train.txt"
  "$xmc" inspect "$out/$name.xmcb" --json > "$out/$name.inspect.json"
}

evaluate() { # name model dataset [eval options...]
  local name=$1 model=$2 ds=$3
  shift 3
  "$xmc" eval --model "$out/$model.xmcb" --data "$data/$ds/test.txt.gz" --k 5 --json "$@" \
    > "$out/eval-$name.json"
  echo "$name $(cat "$out/eval-$name.json")" | tee -a "$out/eval.txt"
}

for part in "$@"; do
  case $part in
    cite-*) ds=citeulike-t ;;
    deb-*) ds=debian-deps ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  case $part in
    *-plain) opts=() ;;
    *-xy) opts=(--set defrag=xy --set d0=8) ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  train "$part" "$ds" "${opts[@]}"
  evaluate "$part-norefrag" "$part" "$ds" --set rerank=off
  evaluate "$part-refrag" "$part" "$ds"
done
