#!/usr/bin/env bash
# The OVA reranker against the plain tree and flat one-vs-all: every
# model trained with 2 threads (wall time, appended to OUT/train.txt; a model already in OUT is
# kept), then evaluated with one thread per query (`xmc eval` is sequential), the models and the
# reranker's query-time candidate counts alternated round by round, then the reranker's α swept
# per request on the test split, and (part `val:`) on a held-out fifth of the training data.
# Usage: experiments/rerank/run.sh DATASETS_DIR OUT_DIR ROUNDS PART...
#   PART: cite (citeulike-t: tree, tree + OVA, flat), deb (debian-deps: tree, tree + OVA, T = 3),
#   xc:DATASET (tree, tree + OVA, flat; e.g. xc:Bibtex), val:DATASET (α on held-out data)
set -euo pipefail
data=${1:?datasets dir}
out=${2:?output dir}
rounds=${3:?rounds}
shift 3
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"
# The query-time candidate counts compared in every round (the model's default is one of them).
counts=(5 10 20 30)
alphas=(0 0.2 0.35 0.5 0.65 0.8 1)

train() { # name train-file [train options...]
  local name=$1 file=$2
  shift 2
  [[ -f "$out/$name.xmcb" ]] && return 0
  local t0 t1
  t0=$(date +%s.%N)
  "$xmc" train --quiet --train "$file" --out "$out/$name.xmcb.tmp" --set threads=2 "$@"
  t1=$(date +%s.%N)
  mv "$out/$name.xmcb.tmp" "$out/$name.xmcb"
  echo "$name train_s $(echo "$t1 - $t0" | bc) bytes $(stat -c %s "$out/$name.xmcb")" \
    | tee -a "$out/train.txt"
}

evaluate() { # name model test-file round [eval options...]
  local name=$1 model=$2 file=$3 round=$4
  shift 4
  "$xmc" eval --model "$out/$model.xmcb" --data "$file" --k 5 --json "$@" \
    > "$out/eval-$name-r$round.json"
  echo "$name round $round $(cat "$out/eval-$name-r$round.json")" | tee -a "$out/eval.txt"
}

# Writes every fifth point of DATASET's training file to OUT/DATASET-val.txt and the others to
# OUT/DATASET-fit.txt, each with its own XC header.
split() {
  zcat "$data/$1/train.txt.gz" | awk -v fit="$out/$1-fit.txt" -v val="$out/$1-val.txt" '
    NR == 1 { d = $2; l = $3; next }
    { if ((NR - 2) % 5 == 4) v[++nv] = $0; else f[++nf] = $0 }
    END {
      print nf, d, l > fit; for (i = 1; i <= nf; i++) print f[i] > fit
      print nv, d, l > val; for (i = 1; i <= nv; i++) print v[i] > val
    }'
}

for part in "$@"; do
  case $part in
    cite) ds=citeulike-t; p=cite; third=(flat --set model=flat) ;;
    deb) ds=debian-deps; p=deb; third=(t3 --set trees=3) ;;
    xc:*) ds=${part#xc:}; p=$ds; third=(flat --set model=flat) ;;
    val:*)
      ds=${part#val:}
      [[ -f "$out/$ds-val.txt" ]] || split "$ds"
      train "$ds-fit-ova" "$out/$ds-fit.txt" --set rerank_model=ova
      for a in "${alphas[@]}"; do
        evaluate "$ds-fit-ova-a$a" "$ds-fit-ova" "$out/$ds-val.txt" val --set "rerank_ova_alpha=$a"
      done
      continue ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  test=$data/$ds/test.txt.gz
  train "$p-tree" "$data/$ds/train.txt.gz"
  train "$p-ova" "$data/$ds/train.txt.gz" --set rerank_model=ova
  train "$p-${third[0]}" "$data/$ds/train.txt.gz" "${third[@]:1}"
  for round in $(seq 1 "$rounds"); do
    evaluate "$p-tree" "$p-tree" "$test" "$round"
    for c in "${counts[@]}"; do
      evaluate "$p-ova-c$c" "$p-ova" "$test" "$round" --set "candidates=$c"
    done
    evaluate "$p-${third[0]}" "$p-${third[0]}" "$test" "$round"
  done
  for a in "${alphas[@]}"; do
    evaluate "$p-ova-a$a" "$p-ova" "$test" alpha --set "rerank_ova_alpha=$a"
  done
done
