#!/usr/bin/env bash
# The defaults sweep (which branching, max_leaf and tree count to ship): trains one model per (data set, branching, max_leaf, trees)
# with 2 threads, evaluates it with one query thread (`xmc eval` is sequential), and appends one
# JSON object per model to OUT/results.jsonl. A model whose result is already there is skipped,
# so an interrupted sweep resumes.
#
#   experiments/sweep/run.sh DATASETS_DIR OUT_DIR SET... -- CONFIG...
#
#   SET     a data set folder under DATASETS_DIR: XC sets (train.txt.gz, test.txt.gz) are trained
#           with the compiled-in defaults, text sets (train.jsonl.gz) with config/default-text.toml
#   CONFIG  BRANCHING/MAX_LEAF/TREES, e.g. 16/100/1
#
# Every other key keeps its default, so a row differs from the old defaults (2/100/1 and 2/100/3)
# only in the swept keys. Bundles are deleted after evaluation unless KEEP=1. XMC overrides the
# binary (default target/release/xmc).
set -euo pipefail
data=${1:?datasets dir}
out=${2:?output dir}
shift 2
sets=()
while [[ $# -gt 0 && $1 != -- ]]; do sets+=("$1"); shift; done
shift
configs=("$@")
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"
touch "$out/results.jsonl"
for ds in "${sets[@]}"; do
  if [[ -f "$data/$ds/train.jsonl.gz" ]]; then
    train_file=$data/$ds/train.jsonl.gz test_file=$data/$ds/test.jsonl.gz
    base=(--config config/default-text.toml)
  else
    train_file=$data/$ds/train.txt.gz test_file=$data/$ds/test.txt.gz
    base=()
  fi
  for cfg in "${configs[@]}"; do
    IFS=/ read -r b m t <<<"$cfg"
    key="\"set\":\"$ds\",\"branching\":$b,\"max_leaf\":$m,\"trees\":$t,"
    grep -qF "$key" "$out/results.jsonl" && continue
    model=$out/$ds-$b-$m-$t.xmcb
    t0=$(date +%s.%N)
    "$xmc" train --quiet "${base[@]}" --train "$train_file" --out "$model" \
      --set threads=2 --set branching="$b" --set max_leaf="$m" --set trees="$t"
    t1=$(date +%s.%N)
    eval_json=$("$xmc" eval --model "$model" --data "$test_file" --k 5 --json)
    printf '{%s"train_s":%.2f,"bytes":%d,"load":"%s","eval":%s}\n' "$key" \
      "$(echo "$t1 - $t0" | bc)" "$(stat -c %s "$model")" \
      "$(cut -d' ' -f1 /proc/loadavg)" "$eval_json" | tee -a "$out/results.jsonl"
    [[ ${KEEP:-0} == 1 ]] || rm -f "$model"
  done
done
