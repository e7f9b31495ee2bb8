#!/usr/bin/env python3
"""The scaling model of sharded training, from one measured 8-shard run per data set.

    experiments/sharded/scaling.py NAME=MEASURE_DIR:ESTIMATES ... > scaling.tsv

MEASURE_DIR is what experiments/sharded/measure.sh wrote (N = 8); ESTIMATES is a file of lines
"n ratio": the plan's estimated largest / mean shard cost at n shards (`xmc train plan --shards n`).
The model: wall(n) = plan + read + (W / n) * imbalance(n) + merge, where plan and merge are their
measured wall times, read is a shard's mean time outside training (data, plan, writing), W is
the sum of the 8 shards' own training times, and imbalance(n) is the estimated largest / mean at
n times the measured-over-estimated imbalance at 8 (1 at n = 1). Prints TSV rows
"name kind machines seconds": kind "predicted" at 1..64, "measured" at 1 (`xmc train` on one
machine) and 8 (plan + slowest shard + merge; the shards were run one after another, each with
the whole machine, as 8 machines would run them).
"""
import re
import sys


def wall(d, name):
    return float(open(f"{d}/{name}.time").read().split()[0])


print("name\tkind\tmachines\tseconds")
for arg in sys.argv[1:]:
    name, rest = arg.split("=", 1)
    d, est_file = rest.split(":")
    est = {int(a): float(b) for a, b in (l.split() for l in open(est_file) if l.strip())}
    log = open(f"{d}/log").read()
    train = {int(m[1]): float(m[2]) for m in re.finditer(
        r"wrote shard (\d+) of 8 .* in ([0-9.]+) s of training", log)}
    n = 8
    ts = [train[i] for i in range(n)]
    walls = [wall(d, f"shard{i}") for i in range(n)]
    plan, merge = wall(d, "plan"), wall(d, "merge")
    read = sum(w - t for w, t in zip(walls, ts)) / n
    work = sum(ts)
    fit = (max(ts) / (work / n)) / est[8]
    for m in [1, 2, 4, 8, 16, 32, 64]:
        imb = 1.0 if m == 1 else est[m] * fit
        print(f"{name}\tpredicted\t{m}\t{plan + read + work / m * imb + merge:.2f}")
    print(f"{name}\tmeasured\t1\t{wall(d, 'train'):.2f}")
    print(f"{name}\tmeasured\t8\t{plan + max(walls) + merge:.2f}")
    print(f"# {name}: plan {plan:.2f} s, merge {merge:.2f} s, shard read/write {read:.2f} s, "
          f"work {work:.2f} s, imbalance at 8 measured {max(ts) / (work / n):.3f} "
          f"(estimated {est[8]:.3f})", file=sys.stderr)
