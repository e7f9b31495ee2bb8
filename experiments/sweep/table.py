#!/usr/bin/env python3
"""Prints the defaults sweep (experiments/sweep/run.sh's results.jsonl) as one markdown table per
data set, each configuration against the old defaults (branching 2, max_leaf 100) at the same T.

    python3 experiments/sweep/table.py OUT_DIR/results.jsonl
"""
import json
import sys
from collections import defaultdict

rows = defaultdict(dict)
order = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["set"] not in order:
        order.append(r["set"])
    rows[r["set"]][(r["branching"], r["max_leaf"], r["trees"])] = r

for ds in order:
    print(f"\n### {ds}\n")
    print("| branching | max_leaf | T | P@1 | ΔP@1 vs 2/100 | P@5 | PSP@5 | train s | bundle MB "
          "| mean µs | p50 µs | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (b, m, t), r in sorted(rows[ds].items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        e = r["eval"]
        base = rows[ds].get((2, 100, t))
        delta = f"{100 * (e['p@1'] - base['eval']['p@1']):+.2f}" if base else "n/a"
        print(f"| {b} | {m} | {t} | {e['p@1']:.4f} | {delta} | {e['p@5']:.4f} | {e['psp@5']:.4f} "
              f"| {r['train_s']:.1f} | {r['bytes'] / 1e6:.1f} | {e['latency_us_mean']:.1f} "
              f"| {e['latency_us_p50']:.1f} | {r['load']} |")
