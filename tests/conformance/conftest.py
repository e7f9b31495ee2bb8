"""The server every conformance test talks to.

One `xmc serve --repository` (the binary in XMC_BIN), REST and gRPC on ports of their own, over a
repository built from vendored bundles: `tags` (a text model with label names, version 1) and
`small` (a feature model, versions 1 and 2, both serving).
"""

import os
import pathlib
import shutil
import socket
import subprocess
import time
import types

import numpy as np
import pytest
import tritonclient.http as httpclient

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT_BUNDLE = ROOT / "models" / "default.xmcb"
FEATURE_BUNDLE = ROOT / "tests" / "data" / "golden" / "model-v4.xmcb"
TEXT_DOCS = ROOT / "tests" / "data" / "debian-tags-text" / "test.jsonl.gz"
DOC = "GTK+ image viewer written in Python"
# The request body and gRPC message limit the server runs with.
BODY_LIMIT = 1 << 20


def feature_arrays(rows):
    """The ragged triple of rows of (feature id, value): (name, array, datatype) for each."""
    ids = np.array([i for r in rows for i, _ in r], dtype=np.int64)
    vals = np.array([v for r in rows for _, v in r], dtype=np.float32)
    offs = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    return [("feature_ids", ids, "INT64"), ("feature_values", vals, "FP32"),
            ("row_offsets", offs, "INT64")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(repo, **env_extra):
    """Starts `xmc serve --repository repo` with REST and gRPC on free ports, and waits until
    it is ready. Returns (process, REST port, gRPC port)."""
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, XMC_POLL_INTERVAL_MS="0", XMC_LOG="warn",
               XMC_BODY_LIMIT_BYTES=str(BODY_LIMIT), **env_extra)
    proc = subprocess.Popen(
        [os.environ.get("XMC_BIN", str(ROOT / "target/debug/xmc")), "serve",
         "--repository", str(repo), "--bind", f"127.0.0.1:{http_port}",
         "--grpc-bind", f"127.0.0.1:{grpc_port}"],
        env=env,
    )
    client = httpclient.InferenceServerClient(url=f"127.0.0.1:{http_port}")
    deadline = time.time() + 60
    while True:
        try:
            if client.is_server_ready():
                break
        except Exception:
            pass
        assert proc.poll() is None, "xmc serve exited"
        assert time.time() < deadline, "xmc serve never became ready"
        time.sleep(0.1)
    return proc, http_port, grpc_port


@pytest.fixture(scope="session")
def xmc(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    for name, version, bundle in [
        ("tags", 1, TEXT_BUNDLE),
        ("small", 1, FEATURE_BUNDLE),
        ("small", 2, FEATURE_BUNDLE),
    ]:
        d = repo / name / str(version)
        d.mkdir(parents=True)
        shutil.copy(bundle, d / "model.xmcb")
    (repo / "small" / "model.toml").write_text('version_policy = "all"\n')
    proc, http_port, grpc_port = launch(repo)
    yield types.SimpleNamespace(http_port=http_port, grpc_port=grpc_port, repo=repo, proc=proc)
    proc.terminate()
    proc.wait(timeout=30)
