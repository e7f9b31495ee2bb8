#!/usr/bin/env bash
# The text vectorizer's settings sweep (docs/decisions/0100-text-vectorizer-defaults.md): for each
# setting, `xmc train` from the JSONL (default tree config, T = 3, 2 threads), its wall time, the
# fit/vectorize times it prints, and P@1/P@3/P@5 of `xmc eval` on the test JSONL.
#
#   scripts/text_defaults.sh DATASETS_DIR OUT_DIR [SET_NAME...]
#
# DATASETS_DIR holds debian-tags-text/ and debian-deps-text/ (train.jsonl.gz, test.jsonl.gz).
# Each remaining argument is one setting: `name:key=value,key=value` (keys of `--set`).
set -euo pipefail
DATA=${1:?datasets dir}
OUT=${2:?output dir}
shift 2
XMC=${XMC:-target/release/xmc}
mkdir -p "$OUT"
SETTINGS=("$@")
if [ ${#SETTINGS[@]} -eq 0 ]; then
    SETTINGS=("default:")
fi
printf 'dataset\tsetting\tfeatures\tfit_s\tvectorize_s\ttrain_wall_s\tp@1\tp@3\tp@5\n'
for set in debian-tags-text debian-deps-text; do
    for s in "${SETTINGS[@]}"; do
        name=${s%%:*}
        keys=${s#*:}
        args=(--set trees=3 --set threads=2)
        IFS=',' read -ra kv <<< "$keys"
        for k in "${kv[@]}"; do
            [ -n "$k" ] && args+=(--set "$k")
        done
        model="$OUT/$set-$name.xmcb"
        start=$(date +%s.%N)
        "$XMC" train --quiet --train "$DATA/$set/train.jsonl.gz" --out "$model" "${args[@]}" \
            2> "$OUT/$set-$name.train.log"
        end=$(date +%s.%N)
        wall=$(echo "$end - $start" | bc)
        line=$(grep '^text:' "$OUT/$set-$name.train.log")
        feats=$(echo "$line" | sed -E 's/.* ([0-9]+) terms kept.*/\1/')
        fit=$(echo "$line" | sed -E 's/.*fit ([0-9.]+) s, vectorize.*/\1/')
        vec=$(echo "$line" | sed -E 's/.*vectorize ([0-9.]+) s \(.*/\1/')
        json=$("$XMC" eval --model "$model" --data "$DATA/$set/test.jsonl.gz" --json 2>/dev/null)
        p1=$(echo "$json" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["p@1"])')
        p3=$(echo "$json" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["p@3"])')
        p5=$(echo "$json" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["p@5"])')
        printf '%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\n' "$set" "$name" "$feats" "$fit" "$vec" "$wall" "$p1" "$p3" "$p5"
        rm -f "$model"
    done
done
