"""Conformance of xmc's Open Inference Protocol REST routes with the real client.

Talks to the suite's `xmc serve --repository` (conftest.py) with `tritonclient.http`: health
and metadata, inference with text and with the ragged feature triple, JSON and binary tensors,
classification, two models and two versions, and the refused requests.
"""

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import DOC, feature_arrays


@pytest.fixture(scope="module")
def server(xmc):
    """The REST client of the suite's server (conftest.py), and its port."""
    return httpclient.InferenceServerClient(url=f"127.0.0.1:{xmc.http_port}"), xmc.http_port


def text_input(docs, binary):
    t = httpclient.InferInput("text", [len(docs)], "BYTES")
    t.set_data_from_numpy(np.array(docs, dtype=np.object_), binary_data=binary)
    return t


def feature_inputs(rows, binary):
    out = []
    for name, arr, dt in feature_arrays(rows):
        t = httpclient.InferInput(name, list(arr.shape), dt)
        t.set_data_from_numpy(arr, binary_data=binary)
        out.append(t)
    return out


def test_health_and_metadata(server):
    client, _ = server
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "xmc"
    assert "binary_tensor_data" in meta["extensions"]
    assert client.is_model_ready("tags")
    assert client.is_model_ready("small", "2")
    assert not client.is_model_ready("small", "3")
    m = client.get_model_metadata("tags")
    assert [i["name"] for i in m["inputs"]][0] == "text"
    assert [o["name"] for o in m["outputs"]] == ["labels", "scores", "names"]
    assert client.get_model_metadata("small")["versions"] == ["1", "2"]


@pytest.mark.parametrize("binary", [False, True])
def test_text_inference(server, binary):
    client, _ = server
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary)
               for n in ("labels", "scores", "names")]
    r = client.infer("tags", [text_input([DOC, "web browser"], binary)], outputs=outputs,
                     parameters={"k": 4})
    labels, scores, names = r.as_numpy("labels"), r.as_numpy("scores"), r.as_numpy("names")
    assert labels.shape == (2, 4) and labels.dtype == np.int64
    assert scores.shape == (2, 4) and scores.dtype == np.float32
    assert names.shape == (2, 4)
    assert np.all(np.diff(scores, axis=1) <= 0)
    names0 = [n.decode() if isinstance(n, bytes) else n for n in names[0]]
    assert "uitoolkit::gtk" in names0
    assert r.get_response()["model_version"] == "1"


@pytest.mark.parametrize("binary", [False, True])
def test_feature_inference_on_two_versions(server, binary):
    client, _ = server
    rows = [[(0, 1.0), (5, 0.5)], [(9, 1.0)]]
    got = []
    for version in ("1", "2"):
        r = client.infer("small", feature_inputs(rows, binary), model_version=version)
        assert r.get_response()["model_version"] == version
        got.append(r.as_numpy("labels"))
        assert r.as_numpy("labels").shape[0] == 2
    # The same bundle in both versions answers the same.
    assert np.array_equal(got[0], got[1])


def test_classification(server):
    client, _ = server
    out = httpclient.InferRequestedOutput("scores", class_count=3)
    r = client.infer("tags", [text_input([DOC], True)], outputs=[out])
    cls = r.as_numpy("scores")
    assert cls.shape == (1, 3)
    # "score:index:name"; debtags names hold "::" themselves.
    score, index, name = cls[0][0].decode().split(":", 2)
    plain = client.infer("tags", [text_input([DOC], True)], parameters={"k": 3})
    assert int(index) == plain.as_numpy("labels")[0][0]
    assert np.float32(score) == plain.as_numpy("scores")[0][0]
    assert name == plain.as_numpy("names")[0][0].decode()


def expect_error(fn, status_hint=None):
    with pytest.raises(InferenceServerException) as e:
        fn()
    return str(e.value)


def test_refused_requests(server):
    client, port = server
    doc = [text_input([DOC], False)]
    expect_error(lambda: client.infer("nope", doc))
    expect_error(lambda: client.infer("tags", doc, model_version="9"))
    expect_error(lambda: client.infer("tags", doc, parameters={"k": 0}))
    expect_error(lambda: client.infer(
        "tags", doc, outputs=[httpclient.InferRequestedOutput("probs")]))
    bad = httpclient.InferInput("txt", [1], "BYTES")
    bad.set_data_from_numpy(np.array([DOC], dtype=np.object_))
    expect_error(lambda: client.infer("tags", [bad]))
    wrong = httpclient.InferInput("text", [1], "FP32")
    wrong.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    expect_error(lambda: client.infer("tags", [wrong]))
    ids, vals, offs = feature_inputs([[(0, 1.0)]], False)
    expect_error(lambda: client.infer("small", [ids, vals]))
    ragged = httpclient.InferInput("row_offsets", [2], "INT64")
    ragged.set_data_from_numpy(np.array([0, 5], dtype=np.int64))
    expect_error(lambda: client.infer("small", [ids, vals, ragged]))
    # Raw HTTP: a binary section shorter than its header says, and a body over the limit.
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    head = b'{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":100}}]}'
    conn.request("POST", "/v2/models/tags/infer", body=head + b"\x03\x00\x00\x00abc",
                 headers={"Inference-Header-Content-Length": str(len(head))})
    resp = conn.getresponse()
    assert resp.status == 400
    assert "binary" in resp.read().decode()
    conn.request("POST", "/v2/models/tags/infer", body=b" " * (2 << 20))
    resp = conn.getresponse()
    assert resp.status == 413
    resp.read()
