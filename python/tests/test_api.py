"""Round trips, determinism, text models, metrics and the GIL."""

import logging
import threading
import time

import numpy as np
import scipy.sparse as sp

import xmc
from conftest import same_bundle


def test_save_open_round_trip(tmp_path, bibtex, bibtex_model):
    _, _, xte, _ = bibtex
    path = tmp_path / "m.xmcb"
    bibtex_model.save(path)
    opened = xmc.Model.open(path)
    verified = xmc.Model.open(str(path), verify=True)
    same_bundle(bibtex_model, opened)
    assert opened.info == bibtex_model.info == verified.info
    l0, s0 = bibtex_model.predict(xte, k=5)
    l1, s1 = opened.predict(xte, k=5)
    assert l0.shape == (xte.shape[0], 5) and l0.dtype == np.int64
    assert s0.dtype == np.float32
    np.testing.assert_array_equal(l0, l1)
    np.testing.assert_array_equal(s0, s1)
    assert opened.n_features == xte.shape[1] and opened.n_labels == 159
    assert opened.label_names is None


def test_predict_batch_equals_one_at_a_time(bibtex, bibtex_model):
    _, _, xte, _ = bibtex
    labels, scores = bibtex_model.predict(xte[:50], k=3)
    for i in range(50):
        li, si = bibtex_model.predict(xte[i], k=3)
        np.testing.assert_array_equal(li[0], labels[i])
        np.testing.assert_array_equal(si[0], scores[i])
    # Scores are best first and probabilities.
    assert np.all(np.diff(scores, axis=1) <= 0)
    assert np.all((scores >= 0) & (scores <= 1))


def test_float64_and_int64_inputs_give_the_same_answers(bibtex, bibtex_model):
    _, _, xte, _ = bibtex
    x64 = sp.csr_matrix(
        (xte.data.astype(np.float64), xte.indices.astype(np.int64), xte.indptr.astype(np.int64)),
        shape=xte.shape,
    )
    a = bibtex_model.predict(xte, k=5)
    b = bibtex_model.predict(x64, k=5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_training_is_the_same_on_any_thread_count(bibtex):
    xtr, ytr, xte, _ = bibtex
    one = xmc.train(xtr, ytr, threads=1, trees=2)
    two = xmc.train(xtr, ytr, threads=2, trees=2)
    same_bundle(one, two, ignore=("threads",))
    a = one.predict(xte, k=5, threads=1)
    b = two.predict(xte, k=5, threads=2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_labels_as_lists_train_the_same_model_as_a_matrix(bibtex, bibtex_model):
    xtr, ytr, _, _ = bibtex
    lists = [list(ytr.indices[ytr.indptr[i] : ytr.indptr[i + 1]]) for i in range(ytr.shape[0])]
    from_lists = xmc.train(xtr, [[int(v) for v in row] for row in lists], threads=2)
    same_bundle(from_lists, bibtex_model)


def test_evaluate_reports_the_metrics(bibtex, bibtex_model):
    _, _, xte, yte = bibtex
    report = bibtex_model.evaluate(xte, yte, k=5)
    for key in ("p@1", "p@3", "p@5", "ndcg@5", "psp@5", "coverage@5"):
        assert 0.0 <= report[key] <= 1.0, key
    assert report["n"] == xte.shape[0]
    # P@1 by hand from predict agrees.
    labels, _ = bibtex_model.predict(xte, k=1)
    hits = [labels[i, 0] in set(yte.indices[yte.indptr[i] : yte.indptr[i + 1]]) for i in range(xte.shape[0])]
    assert abs(report["p@1"] - float(np.mean(hits))) < 1e-12


def test_text_model(tmp_path, tags_text, text_model):
    texts, labels, test_texts, test_labels = tags_text
    names = text_model.label_names
    assert names is not None and len(names) == text_model.n_labels
    assert text_model.info["text"] is not None
    got = text_model.predict_names(test_texts[:20], k=3)
    assert len(got) == 20 and all(len(row) == 3 and set(row) <= set(names) for row in got)
    ids, scores = text_model.predict(test_texts[:20], k=3)
    assert [[names[i] for i in row] for row in ids] == got
    # A string is one query; vectorize gives the rows predict reads.
    x = text_model.vectorize(test_texts[:20])
    assert x.shape == (20, text_model.n_features) and x.dtype == np.float32
    np.testing.assert_array_equal(text_model.predict(x, k=3)[0], ids)
    np.testing.assert_array_equal(text_model.predict(test_texts[0], k=3)[0][0], ids[0])
    report = text_model.evaluate(test_texts, test_labels, k=5)
    assert report["n"] == len(test_texts) and report["p@1"] > 0.3
    path = tmp_path / "text.xmcb"
    text_model.save(path)
    same_bundle(xmc.Model.open(path), text_model)


def test_text_with_label_ids(tags_text):
    texts, labels, _, _ = tags_text
    vocab = sorted({n for row in labels for n in row})
    ids = [[vocab.index(n) for n in row] for row in labels[:400]]
    m = xmc.train(texts[:400], ids, label_names=vocab, text__min_df=1)
    assert m.label_names == vocab
    assert m.predict(texts[:3], k=2)[0].shape == (3, 2)


def test_predict_options_are_the_cli_s(bibtex, bibtex_model):
    _, _, xte, _ = bibtex
    a = bibtex_model.predict(xte[:100], k=5, beam=50, early_stop=False)
    b = bibtex_model.predict(xte[:100], k=5)
    assert a[0].shape == b[0].shape == (100, 5)


def test_training_logs_progress(bibtex, caplog):
    xtr, ytr, _, _ = bibtex
    with caplog.at_level(logging.INFO, logger="xmc"):
        xmc.train(xtr[:500], ytr[:500], threads=1)
    assert any(r.name == "xmc" and "classifiers" in r.getMessage() for r in caplog.records)


def test_predict_releases_the_gil(bibtex, bibtex_model):
    _, _, xte, _ = bibtex
    big = sp.vstack([xte] * 20).tocsr()
    counter = [0]
    done = threading.Event()

    def count():
        while not done.is_set():
            counter[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        time.sleep(0.05)
        before = counter[0]
        start = time.perf_counter()
        bibtex_model.predict(big, k=5, threads=1)
        elapsed = time.perf_counter() - start
        during = counter[0] - before
    finally:
        done.set()
        t.join()
    # Holding the GIL, the counter could advance only in the few switch intervals around the
    # call; released, it runs for the whole prediction.
    assert elapsed > 0.05, "the prediction was too short to tell"
    assert during > 100_000, f"the other thread counted {during} in {elapsed:.3f} s"
