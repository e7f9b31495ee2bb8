#!/usr/bin/env bash
# FIAT's held-out grid: for each bundle given, P@1 and P@5 on HELD at 0% and 50% erasure, with
# imputation off and at each weight. Usage: grid.sh HELD BUNDLE... (XMC: the xmc binary).
set -euo pipefail
X=${XMC:-target/release/xmc}
held=$1; shift
row() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.4f %.4f %.1f" % (d["p@1"], d["p@5"], d["latency_us_mean"]))'; }
for b in "$@"; do
  for e in 0 0.5; do
    echo "$b erase=$e off $($X eval --model "$b" --data "$held" --erase $e --erase-seed 1 --json --set impute=off | row)"
    for w in ${WEIGHTS:-0.25 0.5 1 2}; do
      echo "$b erase=$e w=$w $($X eval --model "$b" --data "$held" --erase $e --erase-seed 1 --json --set impute=on --set impute_weight=$w | row)"
    done
  done
done
