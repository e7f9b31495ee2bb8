"""Triton's model repository extension through tritonclient.http: index, unload and load behind
the admin token, against a server of its own (unloading must not touch the shared one)."""

import shutil

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import DOC, FEATURE_BUNDLE, TEXT_BUNDLE, launch

TOKEN = "conformance-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture()
def server(tmp_path):
    for name, bundle in [("tags", TEXT_BUNDLE), ("small", FEATURE_BUNDLE)]:
        d = tmp_path / name / "1"
        d.mkdir(parents=True)
        shutil.copy(bundle, d / "model.xmcb")
    proc, http_port, _ = launch(tmp_path, XMC_ADMIN_TOKEN=TOKEN)
    client = httpclient.InferenceServerClient(url=f"127.0.0.1:{http_port}")
    yield client, tmp_path
    proc.terminate()
    proc.wait(timeout=30)


def infer_text(client, model):
    text = httpclient.InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(np.array([DOC], dtype=np.object_))
    return client.infer(model, [text], parameters={"k": 3})


def test_index_lists_every_model_and_version_ready(server):
    client, _ = server
    index = client.get_model_repository_index(headers=AUTH)
    assert [(m["name"], m["version"], m["state"]) for m in index] == [
        ("small", "1", "READY"), ("tags", "1", "READY")]


def test_unload_then_load_a_model_leaves_the_other_alone(server):
    client, _ = server
    client.unload_model("tags", headers=AUTH)
    assert not client.is_model_ready("tags")
    with pytest.raises(InferenceServerException):
        infer_text(client, "tags")
    assert client.is_model_ready("small")
    index = {m["name"]: m for m in client.get_model_repository_index(headers=AUTH)}
    assert index["tags"]["state"] == "UNAVAILABLE"
    assert index["tags"]["reason"] == "unloaded by request"
    client.load_model("tags", headers=AUTH)
    assert client.is_model_ready("tags")
    assert infer_text(client, "tags").as_numpy("labels").shape == (1, 3)


def test_a_corrupt_new_version_is_refused_and_the_old_one_answers(server):
    client, repo = server
    d = repo / "tags" / "2"
    d.mkdir()
    data = TEXT_BUNDLE.read_bytes()
    (d / "model.xmcb").write_bytes(data[: len(data) // 2])
    with pytest.raises(InferenceServerException, match="tags/2"):
        client.load_model("tags", headers=AUTH)
    assert client.is_model_ready("tags", "1")
    assert infer_text(client, "tags").as_numpy("labels").shape == (1, 3)


def test_the_repository_calls_need_the_token_and_a_known_model(server):
    client, _ = server
    with pytest.raises(InferenceServerException):
        client.unload_model("tags")
    with pytest.raises(InferenceServerException):
        client.get_model_repository_index(headers={"Authorization": "Bearer wrong"})
    assert client.is_model_ready("tags")
    with pytest.raises(InferenceServerException, match="nope"):
        client.load_model("nope", headers=AUTH)


def test_model_config_names_the_metadata_tensors(server):
    client, _ = server
    config = client.get_model_config("tags")
    meta = client.get_model_metadata("tags")
    assert [t["name"] for t in config["input"]] == [t["name"] for t in meta["inputs"]]
    assert config["max_batch_size"] == 0
