#!/usr/bin/env bash
# REFRAG on a plain model (no DEFRAG) against the same model without it: every
# model trained with T = 3 and 2 threads (wall time, appended to OUT/train.txt; a model already in
# OUT is kept), evaluated with `xmc eval` (one thread, one query at a time) on the test split.
# Usage: experiments/refrag/run.sh DATASETS_DIR OUT_DIR PART...
#   PART: cite   citeulike-t: plain and REFRAG (default prototype entries), alternated twice, then
#                the (alpha, gamma_r) grid per request on the REFRAG model
#         entries citeulike-t: REFRAG with refrag_entries = 25 and 0 (all), at the chosen defaults
#         deb    debian-deps: plain and REFRAG, alternated twice
#         debgrid debian-deps: gamma_r in {2, 5, 10} at alpha = 0.8 on the REFRAG model
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
    --set threads=2 --set trees=3 "$@"
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
    cite)
      train cite-plain citeulike-t
      train cite-refrag citeulike-t --set refrag=on
      for round in 1 2; do
        evaluate cite-plain cite-plain citeulike-t "$round"
        evaluate cite-refrag cite-refrag citeulike-t "$round"
      done
      for a in 0.5 0.65 0.8 0.9; do
        for g in 5 10 20 40; do
          evaluate "cite-refrag-a$a-g$g" cite-refrag citeulike-t grid \
            --set "rerank_alpha=$a" --set "rerank_gamma=$g"
        done
      done ;;
    entries)
      train cite-refrag-e25 citeulike-t --set refrag=on --set refrag_entries=25
      train cite-refrag-e0 citeulike-t --set refrag=on --set refrag_entries=0
      for m in cite-plain cite-refrag cite-refrag-e25 cite-refrag-e0; do
        evaluate "$m" "$m" citeulike-t entries
      done ;;
    deb)
      train deb-plain debian-deps
      train deb-refrag debian-deps --set refrag=on
      for round in 1 2; do
        evaluate deb-plain deb-plain debian-deps "$round"
        evaluate deb-refrag deb-refrag debian-deps "$round"
      done ;;
    debgrid)
      for g in 2 5 10; do
        evaluate "deb-refrag-a0.8-g$g" deb-refrag debian-deps grid \
          --set rerank_alpha=0.8 --set "rerank_gamma=$g"
      done ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
