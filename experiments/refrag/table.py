"""Prints OUT/eval.txt (written by run.sh) as a Markdown table: one row per evaluation."""
import json
import sys

KEYS = ["p@1", "p@5", "psp@5", "coverage@5", "latency_us_mean", "reranked_mean"]

out = sys.argv[1]
print("| run | round | " + " | ".join(KEYS) + " |")
print("|---|---|" + "---:|" * len(KEYS))
with open(f"{out}/eval.txt") as f:
    for line in f:
        name, _, rnd, js = line.split(" ", 3)
        d = json.loads(js)
        cells = [f"{d[k]:.1f}" if k.startswith(("latency", "reranked")) else f"{d[k]:.4f}" for k in KEYS]
        print(f"| {name} | {rnd} | " + " | ".join(cells) + " |")
