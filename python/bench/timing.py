"""Timings of the Python package against the same work in Rust, in one run:

- `overhead MODEL TEST`: one query per call. For each of the first N test rows, the mean time of
  `model.predict(row)` from Python and of the same prediction in Rust (`Model.predict_into`
  with a reused scratch, timed inside Rust); prints both means and their difference.
- `train XMC_BIN TRAIN_JSONL`: training from the file's strings in Python (`xmc.train` on the
  texts and label names already in memory) against `xmc train` on the file, interleaved.
- `rss BUNDLE`: the process's resident set before and after `Model.open`, before any
  prediction.
"""

import subprocess
import sys
import time

import xmc


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def overhead(model_path, test, n=300, repeats=200):
    model = xmc.Model.open(model_path)
    x, _ = xmc.read_data(test)
    rows = [x[i] for i in range(n)]
    py_total = rust_total = 0.0
    for row in rows:
        model.predict(row, k=5)  # warm
        start = time.perf_counter()
        for _ in range(repeats):
            model.predict(row, k=5)
        py_total += (time.perf_counter() - start) / repeats
        rust_total += model._time_rust_predict(row, k=5, repeats=repeats)
    py_us, rust_us = py_total / n * 1e6, rust_total / n * 1e6
    print(f"rows {n}, {repeats} calls each, k = 5")
    print(f"python predict(row): mean {py_us:.2f} us")
    print(f"rust predict_into:   mean {rust_us:.2f} us")
    print(f"python call overhead: {py_us - rust_us:.2f} us per query")


def train(binary, path, rounds=2):
    rounds = int(rounds)
    texts, labels = xmc.read_data(path)
    for r in range(rounds):
        start = time.perf_counter()
        subprocess.run([binary, "train", "--train", path, "--out", "/tmp/h72-train-cli.xmcb", "--quiet"], check=True, capture_output=True)
        cli = time.perf_counter() - start
        start = time.perf_counter()
        xmc.train(texts, labels)
        py = time.perf_counter() - start
        print(f"round {r + 1}: cli (whole process, file) {cli:.2f} s, python xmc.train(strings) {py:.2f} s, ratio {py / cli:.3f}")


def rss(bundle):
    import os
    before = rss_kb()
    start = time.perf_counter()
    model = xmc.Model.open(bundle)
    took = time.perf_counter() - start
    after = rss_kb()
    print(f"bundle {os.path.getsize(bundle) / 1e6:.1f} MB; open {took * 1e3:.2f} ms")
    print(f"RSS before {before / 1024:.1f} MiB, after {after / 1024:.1f} MiB, increase {(after - before) / 1024:.2f} MiB ({model.n_labels} labels)")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"overhead": overhead, "train": train, "rss": rss}[cmd](*args)
