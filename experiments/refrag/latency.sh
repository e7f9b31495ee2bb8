#!/usr/bin/env bash
# REFRAG's latency against the same model without it, in one run: for each round and each model,
# `xmc eval` (one query at a time, one thread) with `--set rerank=off`, then with REFRAG (the
# model's default), so the two settings alternate; with XMC_OLD set, a third run with REFRAG on
# through that binary (an earlier build, on the same bundle) follows. Run it under
# /work/bin/quiet-run.
# Usage: experiments/refrag/latency.sh DATASETS_DIR OUT_DIR ROUNDS MODEL...
#   MODEL: a name whose bundle is OUT_DIR/MODEL.xmcb, `cite-*` on citeulike-t, `deb-*` on
#   debian-deps (the models experiments/refrag/trained.sh writes). Appends to OUT_DIR/latency.txt.
set -euo pipefail
data=${1:?datasets dir}
out=${2:?output dir}
rounds=${3:?rounds}
shift 3
xmc=${XMC:-target/release/xmc}
for round in $(seq "$rounds"); do
  for m in "$@"; do
    case $m in
      cite-*) ds=citeulike-t ;;
      deb-*) ds=debian-deps ;;
      *) echo "unknown model $m" >&2; exit 2 ;;
    esac
    for setting in off on ${XMC_OLD:+old}; do
      bin=$xmc rerank=$setting
      if [[ $setting == old ]]; then bin=$XMC_OLD rerank=on; fi
      mean=$("$bin" eval --model "$out/$m.xmcb" --data "$data/$ds/test.txt.gz" --k 5 --json \
        --set "rerank=$rerank" | python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_us_mean"])')
      echo "$m round $round $setting latency_us_mean $mean" | tee -a "$out/latency.txt"
    done
  done
done
