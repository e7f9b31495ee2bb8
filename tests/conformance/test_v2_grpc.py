"""Conformance of xmc's Open Inference Protocol gRPC service with the real client.

Talks to the suite's server (conftest.py) with `tritonclient.grpc`, which sends
`raw_input_contents` and reads `raw_output_contents`: health and metadata, inference with text
and with the ragged feature triple, classification, two models and two versions, each refused
request with its status code, and the same answers as /v1 and V2 REST for the vendored
debian-tags-text test documents.
"""

import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import BODY_LIMIT, DOC, TEXT_DOCS, feature_arrays
import same_answers


@pytest.fixture(scope="module")
def client(xmc):
    c = grpcclient.InferenceServerClient(url=f"127.0.0.1:{xmc.grpc_port}")
    deadline = time.time() + 30
    while True:
        try:
            if c.is_server_live():
                return c
        except InferenceServerException:
            pass
        assert time.time() < deadline, "the gRPC port never answered"
        time.sleep(0.1)


def text_input(docs):
    t = grpcclient.InferInput("text", [len(docs)], "BYTES")
    t.set_data_from_numpy(np.array(docs, dtype=np.object_))
    return t


def feature_inputs(rows):
    out = []
    for name, arr, dt in feature_arrays(rows):
        t = grpcclient.InferInput(name, list(arr.shape), dt)
        t.set_data_from_numpy(arr)
        out.append(t)
    return out


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "xmc"
    assert "classification" in meta["extensions"]
    assert client.is_model_ready("tags")
    assert client.is_model_ready("small", "2")
    assert not client.is_model_ready("small", "3")
    assert not client.is_model_ready("nope")
    m = client.get_model_metadata("tags", as_json=True)
    assert m["platform"] == "xmc"
    assert [i["name"] for i in m["inputs"]] == ["text", "feature_ids", "feature_values",
                                                "row_offsets"]
    assert m["inputs"][0]["datatype"] == "BYTES"
    assert [o["name"] for o in m["outputs"]] == ["labels", "scores", "names"]
    assert [o["datatype"] for o in m["outputs"]] == ["INT64", "FP32", "BYTES"]
    assert m["outputs"][0]["shape"] == ["-1", "-1"]
    assert client.get_model_metadata("small", as_json=True)["versions"] == ["1", "2"]
    assert client.get_model_metadata("small", "1", as_json=True)["name"] == "small"


def test_text_inference(client, xmc):
    outputs = [grpcclient.InferRequestedOutput(n) for n in ("labels", "scores", "names")]
    r = client.infer("tags", [text_input([DOC, "web browser"])], outputs=outputs,
                     parameters={"k": 4}, request_id="req-7")
    labels, scores, names = r.as_numpy("labels"), r.as_numpy("scores"), r.as_numpy("names")
    assert labels.shape == (2, 4) and labels.dtype == np.int64
    assert scores.shape == (2, 4) and scores.dtype == np.float32
    assert names.shape == (2, 4)
    assert np.all(np.diff(scores, axis=1) <= 0)
    assert "uitoolkit::gtk" in [n.decode() for n in names[0]]
    resp = r.get_response(as_json=True)
    assert resp["model_version"] == "1" and resp["id"] == "req-7"
    # Without outputs named, every output comes back; a subset when asked for.
    r = client.infer("tags", [text_input([DOC])])
    assert {o["name"] for o in r.get_response(as_json=True)["outputs"]} == {
        "labels", "scores", "names"}
    r = client.infer("tags", [text_input([DOC])], outputs=[grpcclient.InferRequestedOutput(
        "scores")])
    assert [o["name"] for o in r.get_response(as_json=True)["outputs"]] == ["scores"]
    # Prediction options other than k go as parameters too.
    r = client.infer("tags", [text_input([DOC])], parameters={"k": 3, "beam": 2})
    assert r.as_numpy("labels").shape == (1, 3)


def test_feature_inference_on_two_versions(client):
    rows = [[(0, 1.0), (5, 0.5)], [(9, 1.0)]]
    got = []
    for version in ("1", "2"):
        r = client.infer("small", feature_inputs(rows), model_version=version)
        assert r.get_response(as_json=True)["model_version"] == version
        got.append(r.as_numpy("labels"))
        assert r.as_numpy("labels").shape[0] == 2
    # The same bundle in both versions answers the same.
    assert np.array_equal(got[0], got[1])
    # The highest version serves when none is named.
    r = client.infer("small", feature_inputs(rows))
    assert r.get_response(as_json=True)["model_version"] == "2"


def test_classification(client):
    out = grpcclient.InferRequestedOutput("scores", class_count=3)
    r = client.infer("tags", [text_input([DOC])], outputs=[out])
    cls = r.as_numpy("scores")
    assert cls.shape == (1, 3)
    # "score:index:name"; debtags names hold "::" themselves.
    score, index, name = cls[0][0].decode().split(":", 2)
    plain = client.infer("tags", [text_input([DOC])], parameters={"k": 3})
    assert int(index) == plain.as_numpy("labels")[0][0]
    assert np.float32(score) == plain.as_numpy("scores")[0][0]
    assert name == plain.as_numpy("names")[0][0].decode()


def test_model_config_matches_rest_and_marks_inputs_optional(client, xmc):
    # perf_analyzer reads this; every input is optional, since a request gives the text or the
    # feature triple.
    config = client.get_model_config("tags", as_json=True)["config"]
    assert config["name"] == "tags"
    assert config.get("max_batch_size", 0) == 0
    assert [(i["name"], i["data_type"], i["optional"]) for i in config["input"]] == [
        ("text", "TYPE_STRING", True), ("feature_ids", "TYPE_INT64", True),
        ("feature_values", "TYPE_FP32", True), ("row_offsets", "TYPE_INT64", True)]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("labels", "TYPE_INT64", ["-1", "-1"]), ("scores", "TYPE_FP32", ["-1", "-1"]),
        ("names", "TYPE_STRING", ["-1", "-1"])]
    rest = httpclient.InferenceServerClient(url=f"127.0.0.1:{xmc.http_port}").get_model_config(
        "tags")
    assert [i["name"] for i in rest["input"]] == [i["name"] for i in config["input"]]
    assert all(i["optional"] for i in rest["input"])
    assert config["parameters"]["bundle_version"]["string_value"] == \
        rest["parameters"]["bundle_version"]["string_value"]
    expect_status(lambda: client.get_model_config("nope"), "NOT_FOUND")


def expect_status(fn, code, says=None):
    with pytest.raises(InferenceServerException) as e:
        fn()
    assert e.value.status() == f"StatusCode.{code}", str(e.value)
    if says is not None:
        assert says in e.value.message(), e.value.message()
    return e.value.message()


def test_refused_requests_get_their_status(client):
    doc = [text_input([DOC])]
    expect_status(lambda: client.infer("nope", doc), "NOT_FOUND", "no model named")
    expect_status(lambda: client.infer("tags", doc, model_version="9"), "NOT_FOUND",
                  "no version 9")
    expect_status(lambda: client.infer("tags", doc, model_version="x"), "INVALID_ARGUMENT",
                  "positive integer")
    expect_status(lambda: client.get_model_metadata("nope"), "NOT_FOUND")
    expect_status(lambda: client.infer("tags", doc, parameters={"k": 0}), "INVALID_ARGUMENT",
                  "k = 0")
    expect_status(lambda: client.infer("tags", doc, parameters={"topk": 3}),
                  "INVALID_ARGUMENT", "topk")
    expect_status(lambda: client.infer(
        "tags", doc, outputs=[grpcclient.InferRequestedOutput("probs")]), "INVALID_ARGUMENT",
        "unknown output")
    expect_status(lambda: client.infer(
        "tags", doc, outputs=[grpcclient.InferRequestedOutput("scores", class_count=1000)]),
        "INVALID_ARGUMENT", "max_k")
    bad = grpcclient.InferInput("txt", [1], "BYTES")
    bad.set_data_from_numpy(np.array([DOC], dtype=np.object_))
    expect_status(lambda: client.infer("tags", [bad]), "INVALID_ARGUMENT", "unknown input")
    wrong = grpcclient.InferInput("text", [1], "FP32")
    wrong.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    expect_status(lambda: client.infer("tags", [wrong]), "INVALID_ARGUMENT", "datatype")
    # The shape says two documents, the raw contents hold one.
    short = text_input([DOC])
    short.set_shape([2])
    expect_status(lambda: client.infer("tags", [short]), "INVALID_ARGUMENT", "holds 2")
    ids, vals, offs = feature_inputs([[(0, 1.0)]])
    expect_status(lambda: client.infer("small", [ids, vals]), "INVALID_ARGUMENT",
                  "missing input row_offsets")
    ragged = grpcclient.InferInput("row_offsets", [2], "INT64")
    ragged.set_data_from_numpy(np.array([0, 5], dtype=np.int64))
    expect_status(lambda: client.infer("small", [ids, vals, ragged]), "INVALID_ARGUMENT",
                  "row_offsets must")
    expect_status(lambda: client.infer("small", [text_input([DOC])]), "INVALID_ARGUMENT",
                  "no text vectorizer")
    # A message over the server's limit is refused before it is decoded.
    big = text_input(["x" * (BODY_LIMIT + 10)])
    with pytest.raises(InferenceServerException) as e:
        client.infer("tags", [big])
    assert e.value.status() in ("StatusCode.OUT_OF_RANGE", "StatusCode.RESOURCE_EXHAUSTED"), \
        str(e.value)


def test_a_raw_bytes_element_longer_than_its_contents_is_refused(xmc):
    """Below the client: a BYTES element whose length prefix runs past the raw contents."""
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    with grpc.insecure_channel(f"127.0.0.1:{xmc.grpc_port}") as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name="tags")
        t = req.inputs.add()
        t.name, t.datatype = "text", "BYTES"
        t.shape.append(1)
        req.raw_input_contents.append((100).to_bytes(4, "little") + b"abc")
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "longer than the bytes left" in e.value.details()
        # Typed contents are taken as well as raw ones.
        req = service_pb2.ModelInferRequest(model_name="tags")
        t = req.inputs.add()
        t.name, t.datatype = "text", "BYTES"
        t.shape.append(1)
        t.contents.bytes_contents.append(DOC.encode())
        r = stub.ModelInfer(req)
        assert [o.name for o in r.outputs] == ["labels", "scores", "names"]
        assert len(r.raw_output_contents) == 3


def test_every_protocol_gives_the_same_answers(xmc):
    docs = same_answers.read_documents(TEXT_DOCS)
    assert len(docs) >= 1000
    bad, labels = same_answers.compare(f"127.0.0.1:{xmc.http_port}",
                                       f"127.0.0.1:{xmc.grpc_port}", "tags", docs, k=5)
    assert bad == [], bad[:5]
    # Not a vacuous agreement: /v1 answered (nearly) k labels for each document.
    assert labels >= 4 * len(docs), labels
