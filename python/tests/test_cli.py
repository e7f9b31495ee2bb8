"""Python and the `xmc` CLI give the same answers: the same bundle from the same data and
settings (but for `created`), the same labels and bit-identical scores, the same metrics."""

import json
import subprocess

import numpy as np
import pytest

import xmc
from conftest import DATA, same_bundle, xmc_binary


def run(*args):
    out = subprocess.run([str(xmc_binary()), *map(str, args)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def read_predictions(path, k):
    labels, scores = [], []
    for line in path.read_text().splitlines():
        pairs = [tok.rsplit(":", 1) for tok in line.split()]
        labels.append([p[0] for p in pairs] + [None] * (k - len(pairs)))
        scores.append([np.float32(p[1]) for p in pairs] + [np.float32(0)] * (k - len(pairs)))
    return labels, np.array(scores, dtype=np.float32)


@pytest.mark.parametrize(
    "train,test,settings",
    [
        (DATA / "Bibtex" / "train.txt.gz", DATA / "Bibtex" / "test.txt.gz", {"trees": 1}),
        (
            DATA / "debian-tags-text" / "train.jsonl.gz",
            DATA / "debian-tags-text" / "test.jsonl.gz",
            {"trees": 2},
        ),
    ],
    ids=["xc", "text"],
)
def test_python_and_cli_agree(tmp_path, train, test, settings):
    cli_model = tmp_path / "cli.xmcb"
    sets = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    run("train", "--train", train, "--out", cli_model, "--quiet", *sets)
    x, y = xmc.read_data(train)
    py_model = xmc.train(x, y, **settings)
    cli = xmc.Model.open(cli_model)
    same_bundle(py_model, cli)

    k = 5
    pred = tmp_path / "pred.txt"
    run("predict", "--model", cli_model, "--data", test, "--k", k, "--labels", "ids", "--out", pred)
    cli_labels, cli_scores = read_predictions(pred, k)
    xt, yt = xmc.read_data(test)
    labels, scores = py_model.predict(xt, k=k)
    expect = np.array([[-1 if l is None else int(l) for l in row] for row in cli_labels])
    np.testing.assert_array_equal(labels, expect)
    assert scores.tobytes() == cli_scores.tobytes(), "scores differ in some bit"

    cli_report = json.loads(run("eval", "--model", cli_model, "--data", test, "--k", k, "--json"))
    report = py_model.evaluate(xt, yt, k=k)
    timings = lambda r: {key: v for key, v in r.items() if not key.startswith("latency_")}
    assert timings(report) == timings(cli_report)
