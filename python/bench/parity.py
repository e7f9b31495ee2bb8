"""Python against the `xmc` CLI on one data set: the bundle trained from Python must equal the
CLI's but for `created`, and Python's predictions must equal `xmc predict`'s (labels, and scores
bit for bit). Prints what it found; exits non-zero on a difference.

    python parity.py XMC_BIN TRAIN TEST OUTDIR [key=value ...]
"""

import gzip
import pathlib
import subprocess
import sys
import time

import numpy as np

import xmc


def names_beside(train: pathlib.Path, stem: str):
    for name in (f"{stem}.txt", f"{stem}.txt.gz"):
        p = train.parent / name
        if p.is_file():
            opener = gzip.open if name.endswith(".gz") else open
            with opener(p, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
    return None


def main():
    binary, train, test, out = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
    settings = dict(a.split("=", 1) for a in sys.argv[5:])
    out.mkdir(parents=True, exist_ok=True)
    sets = [x for k, v in settings.items() for x in ("--set", f"{k}={v}")]
    t = time.perf_counter()
    subprocess.run([binary, "train", "--train", train, "--out", out / "cli.xmcb", "--quiet", *sets], check=True)
    print(f"cli train {time.perf_counter() - t:.1f} s")
    x, y = xmc.read_data(train)
    t = time.perf_counter()
    kw = {}
    if not isinstance(x, list):
        kw = {"label_names": names_beside(train, "labels"), "feature_names": names_beside(train, "features")}
    model = xmc.train(x, y, **kw, **settings)
    print(f"python train {time.perf_counter() - t:.1f} s")
    model.save(out / "py.xmcb")
    cli = xmc.Model.open(out / "cli.xmcb", verify=True)
    ok = True
    a = [s for s in model._section_crcs() if s[0] != "meta"]
    b = [s for s in cli._section_crcs() if s[0] != "meta"]
    print(f"sections other than meta: {len(a)} vs {len(b)}, equal CRCs: {a == b}")
    ok &= a == b
    ia, ib = dict(model.info), dict(cli.info)
    ia.pop("created"), ib.pop("created")
    print(f"metadata without created equal: {ia == ib}; version {model.info['version']} vs {cli.info['version']}")
    ok &= ia == ib
    size_py, size_cli = (out / "py.xmcb").stat().st_size, (out / "cli.xmcb").stat().st_size
    print(f"bundle bytes: python {size_py}, cli {size_cli}")

    k = 5
    subprocess.run([binary, "predict", "--model", out / "cli.xmcb", "--data", test, "--k", str(k), "--labels", "ids", "--out", out / "pred.txt"], check=True)
    cl, cs = [], []
    for line in (out / "pred.txt").read_text().splitlines():
        pairs = [tok.rsplit(":", 1) for tok in line.split()]
        cl.append([int(p[0]) for p in pairs] + [-1] * (k - len(pairs)))
        cs.append([np.float32(p[1]) for p in pairs] + [np.float32(0)] * (k - len(pairs)))
    cl, cs = np.array(cl), np.array(cs, dtype=np.float32)
    xt, _ = xmc.read_data(test)
    pl, ps = model.predict(xt, k=k)
    same_labels = bool(np.array_equal(pl, cl))
    same_scores = ps.tobytes() == cs.tobytes()
    print(f"test rows {pl.shape[0]}: labels equal {same_labels}, scores bit-identical {same_scores}")
    ok &= same_labels and same_scores
    print("PARITY HOLDS" if ok else "PARITY FAILS")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
