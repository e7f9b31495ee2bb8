#!/usr/bin/env bash
# The OVA reranker against the plain tree and flat one-vs-all (issue 63, lines 2 and 3), in one
# run: every model trained with 2 threads, then evaluated with one thread per query, the models
# alternated round by round. Usage: experiments/rerank/run.sh DATASETS_DIR OUT_DIR [ROUNDS]
set -euo pipefail
data=${1:?datasets dir}
out=${2:?output dir}
rounds=${3:-2}
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"

train() { # name set dataset
  local name=$1 set=$2 ds=$3
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$xmc" train --quiet --train "$data/$ds/train.txt.gz" --out "$out/$name.xmcb" \
    --set threads=2 $set
  t1=$(date +%s.%N)
  echo "$name train_s $(echo "$t1 - $t0" | bc) bytes $(stat -c %s "$out/$name.xmcb")" \
    | tee -a "$out/train.txt"
}

evaluate() { # name model dataset [--set ...]
  local name=$1 model=$2 ds=$3
  shift 3
  "$xmc" eval --model "$out/$model.xmcb" --data "$data/$ds/test.txt.gz" --k 5 --json "$@" \
    > "$out/eval-$name-r$round.json"
  echo "$name round $round $(cat "$out/eval-$name-r$round.json")" >> "$out/eval.txt"
}

# citeulike-t: tree, tree + OVA rerank, flat (trained interleaved order: tree, ova, flat).
train cite-tree "" citeulike-t
train cite-ova "--set rerank_model=ova" citeulike-t
train cite-flat "--set model=flat" citeulike-t
# debian-deps: one tree, one tree + OVA rerank, three trees.
train deb-tree "" debian-deps
train deb-ova "--set rerank_model=ova" debian-deps
train deb-t3 "--set trees=3" debian-deps

for round in $(seq 1 "$rounds"); do
  evaluate cite-tree cite-tree citeulike-t
  evaluate cite-ova cite-ova citeulike-t
  evaluate cite-flat cite-flat citeulike-t
  evaluate deb-tree deb-tree debian-deps
  evaluate deb-ova deb-ova debian-deps
  evaluate deb-t3 deb-t3 debian-deps
done
# The combination weight α: the same OVA models, α swept per request (round 1 only).
round=alpha
for a in 0 0.2 0.35 0.5 0.65 0.8 1; do
  evaluate "cite-ova-a$a" cite-ova citeulike-t --set "rerank_ova_alpha=$a"
  evaluate "deb-ova-a$a" deb-ova debian-deps --set "rerank_ova_alpha=$a"
done
