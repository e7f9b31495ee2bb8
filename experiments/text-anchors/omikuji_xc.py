#!/usr/bin/env python3
"""omikuji (Parabel/Bonsai-style trees, PyPI `omikuji`) trained on an XC-format file, such as
`xmc data vectorize`'s output, with its default settings (3 trees), and scored on a test file in
the same feature space. Prints one JSON object of figures.
Usage: omikuji_xc.py TRAIN.txt TEST.txt [--threads 2]
omikuji needs the XC header line ("rows features labels") and a plain (not gzip) file."""
import argparse, json, time
import omikuji

ap = argparse.ArgumentParser()
ap.add_argument("train")
ap.add_argument("test")
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()


def read_xc(path):
    """Rows of (labels, [(feature, value)]); the header line is skipped."""
    rows = []
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            line = line.rstrip("\n")
            head, _, rest = line.partition(" ")
            if ":" in head:  # no labels: the first token is a feature
                head, rest = "", line
            labels = [int(l) for l in head.split(",") if l]
            feats = [(int(i), float(v)) for i, v in (t.split(":") for t in rest.split() if t)]
            rows.append((labels, feats))
    return rows


hp = omikuji.Model.default_hyper_param()
t0 = time.time()
model = omikuji.Model.train_on_data(args.train, hp, n_threads=args.threads)
t_train = time.time() - t0
test = read_xc(args.test)
model.init_prediction_thread_pool(args.threads)
hits = {1: 0, 3: 0, 5: 0}
t0 = time.time()
for labels, feats in test:
    top = [l for l, _ in model.predict(feats, top_k=5)]
    truth = set(labels)
    for k in hits:
        hits[k] += len(truth.intersection(top[:k]))
t_pred = time.time() - t0
n = len(test)
print(json.dumps({"train": args.train, "trees": hp.n_trees, "train_s": round(t_train, 2),
                  "predict_s": round(t_pred, 2), "test_rows": n,
                  **{f"p@{k}": round(h / (k * n), 4) for k, h in hits.items()}}))
