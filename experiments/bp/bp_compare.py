#!/usr/bin/env python3
"""BP against the same model without BP, on one data set, in one run (the paper's Table 2).

    experiments/bp/bp_compare.py DATASET_DIR BLOCK_MODEL [--lambdas 0.03,0.1,...] [--rounds 5]
                          [--q 0] [--set key=value ...] [--out DIR]

Trains the model without BP (`model=BLOCK_MODEL`) and one BP model per λ_bp (`bp=on`,
`block_model=BLOCK_MODEL`, q automatic unless --q), evaluates each on the test split (P@1, P@5,
classifier evaluations and nodes per query), then picks the "accuracy" point (best P@1) and the
"speed" point (the largest λ_bp within 2 points of the base P@1), and times the base, accuracy and
speed models back to back, interleaved, for --rounds rounds of `xmc eval` (one query at a time,
one thread). Latency ratios are per round, then the median is reported. Prints a Markdown table
and writes everything as JSON to DIR/compare-<set>-<model>.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

XMC = os.environ.get("XMC", "target/release/xmc")


def run(args):
    return subprocess.run([XMC, *args], check=True, capture_output=True, text=True).stdout


def train(data, out, sets):
    start = time.time()
    cmd = ["train", "--quiet", "--train", f"{data}/train.txt.gz", "--out", out]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    wall = time.time() - start
    meta = json.loads(run(["inspect", out, "--json"]))["meta"]
    return wall, meta


def evaluate(data, model):
    return json.loads(run(["eval", "--model", model, "--data", f"{data}/test.txt.gz", "--json"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("block_model", choices=["flat", "tree"])
    ap.add_argument("--lambdas", default="0.01,0.03,0.1,0.3,1,3")
    ap.add_argument("--q", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out", default="/tmp/xmc-bp")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    name = os.path.basename(os.path.normpath(args.data))
    tag = f"{name}-{args.block_model}"
    base_path = f"{args.out}/{tag}-base.xmcb"
    base_wall, base_meta = train(args.data, base_path, [f"model={args.block_model}", *args.set])
    base = evaluate(args.data, base_path)
    points = []
    for lam in args.lambdas.split(","):
        path = f"{args.out}/{tag}-bp{lam}.xmcb"
        sets = ["bp=on", f"block_model={args.block_model}", f"bp_lambda={lam}",
                f"bp_q={args.q}", *args.set]
        wall, meta = train(args.data, path, sets)
        ev = evaluate(args.data, path)
        secs = meta["created"]["seconds"]
        bp_s = secs.get("bp_partition", 0) + secs.get("bp_router", 0)
        total_s = sum(v for k, v in secs.items() if k != "read")
        points.append({"lambda": float(lam), "path": path, "eval": ev, "q": meta["bp"]["q"],
                       "block_labels_mean": statistics.mean(meta["bp"]["block_labels"]),
                       "bp_share": bp_s / total_s if total_s else 0.0,
                       "train_s": total_s, "wall_s": wall})
    acc = max(points, key=lambda p: (p["eval"]["p@1"], -p["lambda"]))
    within = [p for p in points if base["p@1"] - p["eval"]["p@1"] <= 0.02]
    speed = max(within, key=lambda p: p["lambda"]) if within else None
    timed = [("base", base_path), ("accuracy", acc["path"])]
    if speed is not None and speed["path"] != acc["path"]:
        timed.append(("speed", speed["path"]))
    lat = {k: [] for k, _ in timed}
    for _ in range(args.rounds):
        for k, path in timed:
            lat[k].append(evaluate(args.data, path)["latency_us_mean"])
    ratio = {k: statistics.median(b / x for b, x in zip(lat["base"], lat[k])) for k, _ in timed}
    med = {k: statistics.median(v) for k, v in lat.items()}
    if speed is not None and "speed" not in lat:
        med["speed"], ratio["speed"] = med["accuracy"], ratio["accuracy"]

    def row(label, ev, extra, lat_key):
        evals = ev["classifier_evals_mean"]
        return (f"| {label} | {extra} | {ev['p@1']:.4f} | {ev['p@5']:.4f} | {evals:.1f} | "
                f"{base['classifier_evals_mean'] / evals:.1f}x | {ev['nodes_evaluated_mean']:.1f} | "
                f"{med[lat_key]:.1f} | {ratio[lat_key]:.2f}x |")

    print(f"\n### {name}, {args.block_model} (latency: median of {args.rounds} interleaved rounds)\n")
    print("| model | λ_bp, q, labels/block | P@1 | P@5 | classifier evals/query | fewer evals | "
          "nodes/query | latency µs | speed-up |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    print(row("no BP", base, "-", "base"))
    for label, p in [("BP accuracy", acc), ("BP speed", speed)]:
        if p is None:
            print(f"| {label} | none within 2 points of P@1 | | | | | | | |")
            continue
        print(row(label, p["eval"], f"{p['lambda']}, {p['q']}, {p['block_labels_mean']:.0f}",
                  "speed" if label == "BP speed" else "accuracy"))
    print("\nall λ_bp: " + "; ".join(
        f"λ={p['lambda']} q={p['q']} P@1={p['eval']['p@1']:.4f} "
        f"evals={p['eval']['classifier_evals_mean']:.1f} BP share={p['bp_share']:.1%}"
        for p in points))
    print(f"base training {sum(v for k, v in base_meta['created']['seconds'].items() if k != 'read'):.1f} s")
    with open(f"{args.out}/compare-{tag}.json", "w") as f:
        json.dump({"base": base, "points": points, "latency_us": lat, "ratio": ratio,
                   "accuracy_lambda": acc["lambda"],
                   "speed_lambda": speed["lambda"] if speed else None}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
