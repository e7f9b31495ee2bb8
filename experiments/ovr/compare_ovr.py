#!/usr/bin/env python3
"""Flat one-vs-rest P@1 of liblinear and napkinxc, for comparison with `xmc train --set model=flat`.

Usage: experiments/ovr/compare_ovr.py DATASET_DIR [DATASET_DIR...]   (each holding train.txt.gz, test.txt.gz)
Needs: pip install liblinear-official napkinxc numpy scipy

Both use the loss and C of xmc's default (squared hinge, C = 1) on L2-normalized rows, with a
bias feature of value 1 (liblinear -B 1). liblinear is `-s 1` (L2-regularized squared hinge,
dual), unpruned; napkinxc's OVR uses liblinear inside and prunes weights below 0.1, as xmc does.
"""
import gzip
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp


def read_xc(path):
    with gzip.open(path, "rt") as f:
        n, d, l = map(int, f.readline().split())
        rows, cols, vals, labels = [], [], [], []
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split(" ")
            labels.append([int(x) for x in parts[0].split(",") if x])
            for tok in parts[1:]:
                if tok:
                    j, v = tok.split(":")
                    rows.append(i)
                    cols.append(int(j))
                    vals.append(float(v))
    x = sp.csr_matrix((vals, (rows, cols)), shape=(n, d), dtype=np.float64)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    x = sp.diags(1.0 / norms) @ x
    return x.tocsr(), labels, l


def p_at_1(top, labels):
    return sum(1 for t, y in zip(top, labels) if t in y) / len(labels)


def liblinear_ovr(xtr, ytr, xte, n_labels):
    from liblinear.liblinearutil import problem, parameter, train

    scores = np.full((xte.shape[0], n_labels), -np.inf)
    param = parameter("-s 1 -c 1 -B 1 -q")
    xte_b = sp.hstack([xte, np.ones((xte.shape[0], 1))]).tocsr()
    for l in range(n_labels):
        y = np.array([1 if l in ys else -1 for ys in ytr], dtype=np.float64)
        if (y > 0).sum() == 0:
            continue
        m = train(problem(y, xtr), param)
        w = np.array([m.w[j] for j in range(xtr.shape[1] + 1)])
        # liblinear makes the first label it sees the positive class; flip if that was -1.
        sign = 1.0 if m.get_labels()[0] == 1 else -1.0
        scores[:, l] = sign * (xte_b @ w)
    return list(np.argmax(scores, axis=1))


def napkinxc_ovr(xtr, ytr, xte):
    from napkinxc.models import OVR

    with tempfile.TemporaryDirectory() as out:
        m = OVR(output=out, loss="l2", liblinear_c=1.0, threads=2)
        m.fit(xtr, ytr)
        pred = m.predict(xte, top_k=1)
    return [p[0] if p else -1 for p in pred]


def main():
    for d in sys.argv[1:]:
        xtr, ytr, n_labels = read_xc(f"{d}/train.txt.gz")
        xte, yte, _ = read_xc(f"{d}/test.txt.gz")
        for name, run in [
            ("liblinear -s 1 OvR", lambda: liblinear_ovr(xtr, ytr, xte, n_labels)),
            ("napkinxc OVR l2", lambda: napkinxc_ovr(xtr, ytr, xte)),
        ]:
            t = time.time()
            top = run()
            print(f"{d}\t{name}\tP@1 {p_at_1(top, yte):.4f}\t{time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
