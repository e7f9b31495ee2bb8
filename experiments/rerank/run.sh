#!/usr/bin/env bash
# The OVA reranker against the plain tree and flat one-vs-all (issue 63, lines 2 and 3): every
# model trained with 2 threads (wall time, appended to OUT/train.txt; a model already in OUT is
# kept), then evaluated with one thread per query (`xmc eval` is sequential), the models
# alternated round by round, then the reranker's α swept per request.
# Usage: experiments/rerank/run.sh DATASETS_DIR OUT_DIR ROUNDS PART...
#   PART: cite (citeulike-t: tree, tree + OVA, flat) or deb (debian-deps: tree, tree + OVA, T = 3)
set -euo pipefail
data=${1:?datasets dir}
out=${2:?output dir}
rounds=${3:?rounds}
shift 3
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"

train() { # name dataset [train options...]
  local name=$1 ds=$2
  shift 2
  [[ -f "$out/$name.xmcb" ]] && return 0
  local t0 t1
  t0=$(date +%s.%N)
  "$xmc" train --quiet --train "$data/$ds/train.txt.gz" --out "$out/$name.xmcb.tmp" \
    --set threads=2 "$@"
  t1=$(date +%s.%N)
  mv "$out/$name.xmcb.tmp" "$out/$name.xmcb"
  echo "$name train_s $(echo "$t1 - $t0" | bc) bytes $(stat -c %s "$out/$name.xmcb")" \
    | tee -a "$out/train.txt"
}

evaluate() { # name model dataset round [eval options...]
  local name=$1 model=$2 ds=$3 round=$4
  shift 4
  "$xmc" eval --model "$out/$model.xmcb" --data "$data/$ds/test.txt.gz" --k 5 --json "$@" \
    > "$out/eval-$name-r$round.json"
  echo "$name round $round $(cat "$out/eval-$name-r$round.json")" | tee -a "$out/eval.txt"
}

for part in "$@"; do
  case $part in
    cite) ds=citeulike-t; models=(cite-tree cite-ova cite-flat)
      train cite-tree $ds
      train cite-ova $ds --set rerank_model=ova
      train cite-flat $ds --set model=flat ;;
    deb) ds=debian-deps; models=(deb-tree deb-ova deb-t3)
      train deb-tree $ds
      train deb-ova $ds --set rerank_model=ova
      train deb-t3 $ds --set trees=3 ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  for round in $(seq 1 "$rounds"); do
    for m in "${models[@]}"; do evaluate "$m" "$m" $ds "$round"; done
  done
  ova=${models[1]}
  for a in 0 0.2 0.35 0.5 0.65 0.8 1; do
    evaluate "$ova-a$a" "$ova" $ds alpha --set "rerank_ova_alpha=$a"
  done
done
