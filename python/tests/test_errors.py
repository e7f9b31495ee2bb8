"""Every bad input raises a named exception, carrying the library's message."""

import numpy as np
import pytest
import scipy.sparse as sp

import xmc


def tiny():
    x = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [1.0, 1.0, 0.0]], dtype=np.float32))
    y = [[0], [1], [0, 1]]
    return x, y


def test_exceptions_are_value_errors():
    assert issubclass(xmc.BundleError, ValueError)
    assert issubclass(xmc.DataError, ValueError)


def test_wrong_dtype():
    x, y = tiny()
    with pytest.raises(xmc.DataError, match="float32 or float64"):
        xmc.train(x.astype(np.int32), y)
    with pytest.raises(TypeError):
        xmc.train(x, 3)
    with pytest.raises(TypeError):
        xmc.train(np.zeros((3, 3)), y)
    with pytest.raises(xmc.DataError, match="CSR"):
        xmc.train(x.tocsc(), y)


def test_wrong_dtype_at_predict(bibtex_model, bibtex):
    _, _, xte, _ = bibtex
    bad = sp.csr_matrix((xte.data.astype(np.complex64), xte.indices, xte.indptr), shape=xte.shape)
    with pytest.raises(xmc.DataError, match="dtype"):
        bibtex_model.predict(bad)


def test_shapes_that_disagree():
    x, y = tiny()
    with pytest.raises(xmc.DataError, match="3 rows but Y has 2"):
        xmc.train(x, y[:2])
    with pytest.raises(xmc.DataError, match="3 rows but Y has 4"):
        xmc.train(x, y + [[1]])  # a label list longer than X
    broken = sp.csr_matrix((x.data, x.indices, x.indptr), shape=x.shape)
    broken.indptr = broken.indptr[:-1]
    with pytest.raises(xmc.DataError, match="indptr"):
        xmc.train(broken, y)


def test_text_labels_longer_than_texts():
    with pytest.raises(xmc.DataError, match="2 rows but Y has 3"):
        xmc.train(["a b", "b c"], [["x"], ["y"], ["z"]])


def test_non_finite_values(bibtex_model, bibtex):
    x, y = tiny()
    x.data[0] = np.nan
    with pytest.raises(xmc.DataError, match="not finite"):
        xmc.train(x, y)
    _, _, xte, _ = bibtex
    q = xte[:2].copy()
    q.data[-1] = np.inf
    with pytest.raises(xmc.DataError, match="row 1.*not finite"):
        bibtex_model.predict(q)


def test_negative_or_too_large_ids(bibtex_model, bibtex):
    x, y = tiny()
    with pytest.raises(xmc.DataError, match="negative"):
        xmc.train(x, [[0], [-1], [1]])
    neg = x.copy()
    neg.indices = neg.indices.copy()
    neg.indices[0] = -2
    with pytest.raises(xmc.DataError, match="negative"):
        xmc.train(neg, y)
    wide = sp.csr_matrix(([1.0], ([0], [bibtex_model.n_features + 5])), shape=(1, bibtex_model.n_features + 6), dtype=np.float32)
    with pytest.raises(xmc.DataError, match="out of range"):
        bibtex_model.predict(wide)
    _, _, xte, _ = bibtex
    with pytest.raises(xmc.DataError, match="label"):
        bibtex_model.evaluate(xte[:1], [[bibtex_model.n_labels + 1]])
    with pytest.raises(xmc.DataError, match="too large"):
        xmc.train(x, [[0], [2**40], [1]])


def test_unknown_setting_or_bad_value_names_the_key(bibtex_model, bibtex):
    x, y = tiny()
    with pytest.raises(ValueError, match="`no_such_key`"):
        xmc.train(x, y, no_such_key=1)
    with pytest.raises(ValueError, match="`trees`"):
        xmc.train(x, y, trees="many")
    with pytest.raises(ValueError, match="`trees`"):
        xmc.train(x, y, trees=0)
    with pytest.raises(ValueError, match="text.min_df"):
        xmc.train(["a", "b", "a"], [["x"], ["y"], ["x"]], text__min_df="x")
    _, _, xte, _ = bibtex
    with pytest.raises(ValueError, match="`beam`"):
        bibtex_model.predict(xte[:1], beam=0)
    with pytest.raises(ValueError, match="unknown prediction option `bogus`"):
        bibtex_model.predict(xte[:1], bogus=1)
    with pytest.raises(ValueError, match="`k`"):
        bibtex_model.predict(xte[:1], k=0)


def test_text_for_a_model_without_text(bibtex_model):
    with pytest.raises(xmc.DataError, match="not trained from text"):
        bibtex_model.predict(["some words"])


def test_truncated_or_corrupt_bundle(tmp_path, bibtex_model):
    good = tmp_path / "good.xmcb"
    bibtex_model.save(good)
    raw = good.read_bytes()
    truncated = tmp_path / "truncated.xmcb"
    truncated.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(xmc.BundleError, match="truncated.xmcb"):
        xmc.Model.open(truncated)
    header = tmp_path / "header.xmcb"
    header.write_bytes(b"XXXX" + raw[4:])
    with pytest.raises(xmc.BundleError):
        xmc.Model.open(header)
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    corrupt = tmp_path / "corrupt.xmcb"
    corrupt.write_bytes(bytes(flipped))
    with pytest.raises(xmc.BundleError):
        xmc.Model.open(corrupt, verify=True)
    with pytest.raises(xmc.BundleError):
        xmc.Model.open(tmp_path / "missing.xmcb")
    empty = tmp_path / "empty.xmcb"
    empty.write_bytes(b"")
    with pytest.raises(xmc.BundleError):
        xmc.Model.open(empty)


def test_malformed_data_files(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("2 3 2\n0 0:1.0\n1 1:x\n")
    with pytest.raises(xmc.DataError, match="line 3"):
        xmc.read_data(bad)
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "a", "labels": ["x"]}\n{"text": 3}\n')
    with pytest.raises(xmc.DataError, match="line 2.*text"):
        xmc.read_data(bad_json)
    with pytest.raises(xmc.DataError):
        xmc.read_data(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="format"):
        xmc.read_data(bad, format="csv")
