"""xmc's Python `predict` beside omikuji's, napkinXC's and PECOS's, on one XC data set, in one run.

Usage: peers.py DATA_DIR [--rounds 3] [--single 2000] [--threads 2]

DATA_DIR holds `train.txt.gz` and `test.txt.gz` (XC format). Each library trains its own tree
model with one tree (xmc's defaults, `trees = 1`; omikuji with `n_trees = 1`; napkinXC's `PLT`;
PECOS's `XLinearModel` on a PIFA-indexed label tree), each with 2 threads. Then, in every round
and one library after another:

- batch: the whole test set as one CSR matrix, `--threads` threads, top 5; rows per second of
  the library's own call (turning its answer into ranked lists for P@k is not timed).
  omikuji's Python API predicts one row per call, so its batch is those calls spread over a
  thread pool of `--threads` workers (its calls release the GIL);
- single: the first `--single` test rows, one call per row, top 5; the mean time per call.
  Each library gets its rows in the form its single-row call takes, built before the clock
  starts.

Prints each library's P@1 and P@5 on the test set (so that the models can be seen to be
comparable), its training seconds, and per round the batch throughput and the single-query mean,
then the median of the rounds. Not part of the product: it needs the three peers from PyPI.
"""

import argparse
import gzip
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

import xmc

K = 5


def precision(pred_rows, truth, k):
    """P@k of ranked label lists against `truth` (a list of label sets)."""
    total = 0.0
    for ranked, want in zip(pred_rows, truth):
        total += sum(1 for label in ranked[:k] if label in want) / k
    return total / len(truth)


class Xmc:
    name = "xmc"

    def __init__(self, x, y, threads):
        self.threads = threads
        self.model = xmc.train(x, y)

    def prepare_single(self, x):
        return [x[i] for i in range(x.shape[0])]

    def single(self, row):
        return self.model.predict(row, k=K, threads=1)

    def batch(self, x):
        return self.model.predict(x, k=K, threads=self.threads)

    @staticmethod
    def ranked(out):
        return [[int(v) for v in r if v >= 0] for r in out[0]]


class Omikuji:
    name = "omikuji"

    def __init__(self, train_path, threads):
        import omikuji

        self.threads = threads
        hp = omikuji.Model.default_hyper_param()
        hp.n_trees = 1
        self.model = omikuji.Model.train_on_data(train_path, hp, n_threads=threads)

    @staticmethod
    def pairs(x, i):
        a, b = x.indptr[i], x.indptr[i + 1]
        return list(zip(x.indices[a:b].tolist(), x.data[a:b].tolist()))

    def prepare_single(self, x):
        return [self.pairs(x, i) for i in range(x.shape[0])]

    def single(self, row):
        return self.model.predict(row, top_k=K)

    def batch(self, x):
        rows = self.prepare_single(x)
        with ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(self.single, rows, chunksize=256))

    @staticmethod
    def ranked(out):
        return [[label for label, _ in r] for r in out]


class Napkin:
    name = "napkinXC"

    def __init__(self, x, y_lists, threads, workdir):
        from napkinxc.models import PLT

        self.threads = threads
        # napkinXC takes its thread count once, for training and prediction alike.
        self.model = PLT(os.path.join(workdir, "napkinxc-plt"), threads=threads)
        self.model.fit(x, y_lists)

    def prepare_single(self, x):
        return [x[i] for i in range(x.shape[0])]

    def single(self, row):
        return self.model.predict(row, top_k=K)

    def batch(self, x):
        return self.model.predict(x, top_k=K)

    @staticmethod
    def ranked(out):
        return [list(r) for r in out]


class Pecos:
    name = "PECOS"

    def __init__(self, x, y, threads):
        from pecos.xmc import Indexer, LabelEmbeddingFactory
        from pecos.xmc.xlinear.model import XLinearModel

        self.threads = threads
        x = x.astype(np.float32)
        y = y.astype(np.float32)
        label_feat = LabelEmbeddingFactory.create(y, x, method="pifa")
        tree = Indexer.gen(label_feat, threads=threads)
        self.model = XLinearModel.train(x, y, C=tree, threads=threads)

    def prepare_single(self, x):
        x = x.astype(np.float32)
        return [x[i] for i in range(x.shape[0])]

    def single(self, row):
        return self.model.predict(row, only_topk=K, threads=1)

    def batch(self, x):
        return self.model.predict(x, only_topk=K, threads=self.threads)

    @staticmethod
    def ranked(scores):
        scores = scores.tocsr()
        out = []
        for i in range(scores.shape[0]):
            a, b = scores.indptr[i], scores.indptr[i + 1]
            order = np.argsort(-scores.data[a:b], kind="stable")
            out.append(scores.indices[a:b][order].tolist())
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--single", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    x_train, y_train = xmc.read_data(os.path.join(args.data, "train.txt.gz"))
    x_test, y_test = xmc.read_data(os.path.join(args.data, "test.txt.gz"))
    y_lists = [y_train.indices[y_train.indptr[i] : y_train.indptr[i + 1]].tolist() for i in range(y_train.shape[0])]
    truth = [set(y_test.indices[y_test.indptr[i] : y_test.indptr[i + 1]].tolist()) for i in range(y_test.shape[0])]
    print(f"data {args.data}: train {x_train.shape}, test {x_test.shape}, labels {y_train.shape[1]}")

    with tempfile.TemporaryDirectory() as work:
        # omikuji trains from a plain XC file with its header line.
        train_plain = os.path.join(work, "train.txt")
        with gzip.open(os.path.join(args.data, "train.txt.gz"), "rb") as src, open(train_plain, "wb") as dst:
            dst.write(src.read())

        libs = []
        for make in (
            lambda: Xmc(x_train, y_train, args.threads),
            lambda: Omikuji(train_plain, args.threads),
            lambda: Napkin(x_train, y_lists, args.threads, work),
            lambda: Pecos(x_train, y_train, args.threads),
        ):
            start = time.perf_counter()
            lib = make()
            lib.train_s = time.perf_counter() - start
            libs.append(lib)

        n = min(args.single, x_test.shape[0])
        singles = {lib.name: lib.prepare_single(x_test[:n]) for lib in libs}
        # The test matrix in the dtype each library predicts from (PECOS: float32).
        test_as = {lib.name: x_test.astype(np.float32) if lib.name == "PECOS" else x_test for lib in libs}
        for lib in libs:
            ranked = lib.ranked(lib.batch(test_as[lib.name]))
            print(
                f"{lib.name}: trained in {lib.train_s:.1f} s; "
                f"P@1 {precision(ranked, truth, 1):.4f}, P@5 {precision(ranked, truth, 5):.4f}"
            )
            for row in singles[lib.name][:50]:  # warm
                lib.single(row)

        batch = {lib.name: [] for lib in libs}
        single = {lib.name: [] for lib in libs}
        for r in range(args.rounds):
            for lib in libs:
                start = time.perf_counter()
                lib.batch(test_as[lib.name])
                batch[lib.name].append(x_test.shape[0] / (time.perf_counter() - start))
                rows = singles[lib.name]
                start = time.perf_counter()
                for row in rows:
                    lib.single(row)
                single[lib.name].append((time.perf_counter() - start) / n * 1e6)
                print(
                    f"round {r + 1} {lib.name}: batch {batch[lib.name][-1]:.0f} rows/s "
                    f"({args.threads} threads), single {single[lib.name][-1]:.1f} us/query"
                )
        print(f"median of {args.rounds} rounds (batch: {x_test.shape[0]} rows, {args.threads} threads; single: {n} rows, one call each)")
        for lib in libs:
            print(
                f"{lib.name:9} batch {statistics.median(batch[lib.name]):9.0f} rows/s   "
                f"single {statistics.median(single[lib.name]):8.1f} us/query"
            )


if __name__ == "__main__":
    main()
