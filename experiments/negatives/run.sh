#!/usr/bin/env bash
# Trains and scores one model per (set, negatives, branching, max_leaf, T) and appends one JSON
# object per model to OUT/results.jsonl (record: bench/results/2026-12-02-matcher-negatives.md).
#
#   experiments/negatives/run.sh DATASETS OUT SET NEG B M T [--set key=value ...]
#
# NEG is `tfn` or `man`; extra `--set` arguments (e.g. `--set man_beam=1`) go to `xmc train` and
# are recorded in the `extra` field. Text sets (train.jsonl.gz) use config/default-text.toml.
set -euo pipefail
data=${1:?datasets dir} out=${2:?output dir} ds=${3:?set} neg=${4:?tfn|man}
b=${5:?branching} m=${6:?max_leaf} t=${7:?trees}
shift 7
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"
if [[ -f $data/$ds/train.jsonl.gz ]]; then
  tr=$data/$ds/train.jsonl.gz te=$data/$ds/test.jsonl.gz base=(--config config/default-text.toml)
else
  tr=$data/$ds/train.txt.gz te=$data/$ds/test.txt.gz base=()
fi
tag=$(printf %s "$*" | tr -c "a-zA-Z0-9=" _)
model=$out/$ds-$neg-$b-$m-$t${tag:+-$tag}.xmcb
t0=$(date +%s.%N)
"$xmc" train --quiet "${base[@]}" --train "$tr" --out "$model" --set threads=2 \
  --set negatives="$neg" --set branching="$b" --set max_leaf="$m" --set trees="$t" "$@"
t1=$(date +%s.%N)
ev=$("$xmc" eval --model "$model" --data "$te" --k 5 --json)
printf '{"set":"%s","negatives":"%s","branching":%d,"max_leaf":%d,"trees":%d,"extra":"%s","train_s":%.1f,"bytes":%d,"load":"%s","eval":%s}\n' \
  "$ds" "$neg" "$b" "$m" "$t" "$*" "$(echo "$t1 - $t0" | bc)" "$(stat -c %s "$model")" \
  "$(cut -d' ' -f1 /proc/loadavg)" "$ev" | tee -a "$out/results.jsonl"
