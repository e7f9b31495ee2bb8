#!/usr/bin/env python3
"""DEFRAG-XY against the same model without it, and FIAT under feature erasure.

Usage: experiments/defrag/issue61.py OUT_DIR PLAN DATASET_DIR [DATASET_DIR...]
       (each DATASET_DIR holds train.txt.gz and test.txt.gz; XMC defaults to target/release/xmc)

PLAN is one of:
  defaults  T = 1: DEFRAG-XY d0 = 8 with the sampled representation only (defrag_fill=off), with
            the fill, with every point (defrag_points=1), and with more labels (defrag_labels).
  tables    the plain model and DEFRAG-XY at the default d0 for T = 3 and T = 1, and DEFRAG-XY
            at d0 = 4, 8, 16, 32 for T = 3; then FIAT at 50% and 0% erasure (T = 3).

Every model trains with threads=2 and the same seed; training time is `xmc train`'s own figure
(clustering included, reading excluded). Every model is then evaluated one query at a time on one
thread (`xmc eval --json`) twice, once right after training and once in a second pass over all
models, and the lower mean latency kept, since the machine is shared with concurrent builds.
ONLY=tag,tag,... trains only those models, in that order. It writes `results-PLAN.json` and `tables-PLAN.md`.
"""
import json
import os
import subprocess
import sys

XMC = os.environ.get("XMC", "target/release/xmc")
D0S = [4, 8, 16, 32]


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import defrag_tables  # noqa: E402  (the shared train and evaluate steps)

evaluate = defrag_tables.evaluate


def train(data, out, sets):
    """`defrag_tables.train` with two threads, plus every member's clustering time and the first
    member's DEFRAG stats."""
    base = defrag_tables.train(data, out, ["threads=2"] + sets)
    info = json.loads(subprocess.run([XMC, "inspect", out, "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    secs = info["meta"]["created"]["seconds"]
    stats = [t.get("defrag", {}) for t in info["meta"]["tree_stats"]]
    return {
        "sets": sets,
        "train_s": base["train_s"],
        "clustering_s": sum(v for k, v in secs.items() if k.endswith("_defrag_clustering")),
        "bytes": base["bytes"],
        "defrag": stats[0] if stats else {},
    }


def plan_models(plan):
    if plan == "defaults":
        xy = ["trees=1", "defrag=xy", "d0=8"]
        return {
            "plain-T1": ["trees=1"],
            "xy8-sample": xy + ["defrag_fill=off", "defrag_points=0.25", "defrag_labels=0.05"],
            "xy8-fill": xy + ["defrag_fill=on", "defrag_points=0.25", "defrag_labels=0.05"],
            "xy8-allpoints": xy + ["defrag_fill=on", "defrag_points=1", "defrag_labels=0.05"],
            "xy8-labels20": xy + ["defrag_fill=on", "defrag_points=0.25", "defrag_labels=0.2"],
        }
    # The most needed first: a run cut short still answers acceptance lines 1 and 3.
    models = {
        "plain-T3": ["trees=3"],
        "xy8-T3": ["trees=3", "defrag=xy", "d0=8"],
        "plain-T1": ["trees=1"],
        "xy-default-T1": ["trees=1", "defrag=xy"],
        "fiat-T3": ["trees=3", "defrag=xy", "d0=8", "fiat=on"],
    }
    for d0 in D0S:
        models.setdefault(f"xy{d0}-T3", ["trees=3", "defrag=xy", f"d0={d0}"])
    # The defaults chosen from the above (d0 = 4, every point), and FIAT on them.
    p1 = ["defrag=xy", "d0=4", "defrag_points=1"]
    models["xy4p1-T3"] = ["trees=3"] + p1
    models["xy4p1-T1"] = ["trees=1"] + p1
    models["xy8p1-T3"] = ["trees=3", "defrag=xy", "d0=8", "defrag_points=1"]
    models["fiat4p1-T3"] = ["trees=3"] + p1 + ["fiat=on"]
    return models


def run_dataset(data, work, plan, prior):
    name = os.path.basename(data.rstrip("/"))
    m = lambda tag: f"{work}/{name}-{tag}.xmcb"
    models = plan_models(plan)
    r = prior or {"dataset": name, "train": {}, "eval": {}, "erase": {}}
    def keep_faster(tag):
        e = evaluate(data, m(tag))
        prev = r["eval"].get(tag)
        if prev is None or e["latency_us_mean"] < prev["latency_us_mean"]:
            r["eval"][tag] = e

    # Each model is evaluated once as soon as it is trained (so a run cut short keeps its
    # figures), then once more in a second pass over all of them.
    only = [t for t in os.environ.get("ONLY", "").split(",") if t]
    for tag in only or list(models):
        sets = models[tag]
        if tag in r["train"]:
            continue
        r["train"][tag] = train(data, m(tag), sets)
        print(f"{name} {tag}: {r['train'][tag]}", file=sys.stderr, flush=True)
        keep_faster(tag)
        yield r
    for tag in r["train"]:
        keep_faster(tag)
    yield r
    if plan == "tables":
        for erase in [0.5, 0.0]:
            for tag, sets in [("plain-T3", []), ("xy8-T3", []), ("fiat-T3", []),
                              ("fiat-T3/impute-off", ["impute=off"]), ("xy4p1-T3", []),
                              ("fiat4p1-T3", []), ("fiat4p1-T3/impute-off", ["impute=off"])]:
                model = tag.split("/")[0]
                if model not in r["train"] or f"{tag}@{erase}" in r["erase"]:
                    continue
                r["erase"][f"{tag}@{erase}"] = evaluate(data, m(model), sets, erase)
            yield r


def table(results, plan):
    out = []
    for r in results:
        base_tag = "plain-T1" if plan == "defaults" else "plain-T3"
        out.append(f"\n### {r['dataset']}\n")
        out.append("| model | train s | (ratio) | clustering s | bundle bytes | (ratio) | latency µs "
                   "| (ratio) | P@1 | P@5 | ΔP@1 pts | clusters | unrepresented (sample → after fill) |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for tag, t in r["train"].items():
            e = r["eval"].get(tag)
            base = "plain-T1" if tag.endswith("T1") else base_tag
            b, be = r["train"].get(base), r["eval"].get(base)
            dg = t["defrag"]
            cells = [tag, f"{t['train_s']:.1f}", f"{t['train_s'] / b['train_s']:.2f}" if b else "-",
                     f"{t['clustering_s']:.2f}", str(t["bytes"]),
                     f"{t['bytes'] / b['bytes']:.2f}" if b else "-"]
            if e:
                cells += [f"{e['latency_us_mean']:.1f}",
                          f"{e['latency_us_mean'] / be['latency_us_mean']:.2f}" if be else "-",
                          f"{e['p@1']:.4f}", f"{e['p@5']:.4f}",
                          f"{100 * (e['p@1'] - be['p@1']):+.2f}" if be else "-"]
            else:
                cells += ["-"] * 5
            cells += [str(dg.get("clusters", "-")),
                      f"{dg['unrepresented_sampled']} → {dg['unrepresented']}"
                      if "unrepresented" in dg else "-"]
            out.append("| " + " | ".join(cells) + " |")
        if r.get("erase"):
            out.append("\n| erase | plain T=3 | DEFRAG-XY d0=8 | + FIAT | FIAT model, impute off "
                       "| DEFRAG-XY d0=4 all points | + FIAT | FIAT model, impute off |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for erase in [0.5, 0.0]:
                p = lambda k: r["erase"].get(f"{k}@{erase}", {}).get("p@1", float("nan"))
                tags = ["plain-T3", "xy8-T3", "fiat-T3", "fiat-T3/impute-off", "xy4p1-T3",
                        "fiat4p1-T3", "fiat4p1-T3/impute-off"]
                out.append(f"| {erase} | " + " | ".join(f"{p(t):.4f}" for t in tags) + " |")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out_dir, plan = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    path = f"{out_dir}/results-{plan}.json"
    results = json.load(open(path)) if os.path.exists(path) else []
    for data in sys.argv[3:]:
        name = os.path.basename(data.rstrip("/"))
        prior = next((r for r in results if r["dataset"] == name), None)
        for r in run_dataset(data, out_dir, plan, prior):
            if prior is None:
                results.append(r)
                prior = r
            with open(path, "w") as f:
                json.dump(results, f, indent=1)
            with open(f"{out_dir}/tables-{plan}.md", "w") as f:
                f.write(table(results, plan))


if __name__ == "__main__":
    main()
