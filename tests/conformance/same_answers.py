"""The same documents through every protocol xmc speaks give the same answer.

For each text document, `/v1/models/{model}/predict`, V2 REST with JSON tensors, V2 REST with
binary tensors and V2 gRPC (all through their real clients where one exists) must return the
same labels and bit-identical FP32 scores. The conformance suite runs `compare` on the vendored
debian-tags-text test documents; run as a script, it checks a data set's test documents against a
running server:

    python tests/conformance/same_answers.py DATA_DIR --http 127.0.0.1:8080 \
        --grpc 127.0.0.1:8081 --model tags [--n 1000] [--k 5]

DATA_DIR holds `debian-tags-text/test.jsonl.gz` (e.g. the shared data sets). It prints how many
documents it compared and how many disagreed, and exits non-zero on any disagreement.
"""

import argparse
import gzip
import json
import pathlib
import sys
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def read_documents(path, n=None):
    """The `text` field of the first n lines (all with None) of a JSON-lines file, gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    docs = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if n is not None and len(docs) >= n:
                break
            docs.append(json.loads(line)["text"])
    return docs


def _bits(scores):
    return np.asarray(scores, dtype=np.float32).view(np.uint32).tolist()


def _v1(http_addr, model, doc, k):
    body = json.dumps({"text": doc, "k": k}).encode()
    req = urllib.request.Request(f"http://{http_addr}/v1/models/{model}/predict", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        v = json.load(r)
    # /v1 writes each f32 score widened exactly, so narrowing it back is exact.
    return [int(x) for x in v["labels"]], _bits([float(s) for s in v["scores"]])


def _v2_http(client, model, doc, k, binary):
    t = httpclient.InferInput("text", [1], "BYTES")
    t.set_data_from_numpy(np.array([doc], dtype=np.object_), binary_data=binary)
    outs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("labels", "scores")]
    r = client.infer(model, [t], outputs=outs, parameters={"k": k})
    return r.as_numpy("labels")[0], r.as_numpy("scores")[0]


def _v2_grpc(client, model, doc, k):
    t = grpcclient.InferInput("text", [1], "BYTES")
    t.set_data_from_numpy(np.array([doc], dtype=np.object_))
    outs = [grpcclient.InferRequestedOutput(n) for n in ("labels", "scores")]
    r = client.infer(model, [t], outputs=outs, parameters={"k": k})
    return r.as_numpy("labels")[0], r.as_numpy("scores")[0]


def _trim(labels, scores, n):
    # V2 pads a short row with label -1; /v1 returns only the labels found.
    return [int(x) for x in labels[:n]], _bits(scores[:n])


def compare(http_addr, grpc_addr, model, docs, k=5):
    """Sends each document over the four paths; returns the list of (index, which, got, want)
    that disagree with /v1 (empty when all agree) and how many labels /v1 returned in all."""
    http = httpclient.InferenceServerClient(url=http_addr)
    grpc = grpcclient.InferenceServerClient(url=grpc_addr)
    bad = []
    labels = 0
    for i, doc in enumerate(docs):
        want = _v1(http_addr, model, doc, k)
        n = len(want[0])
        labels += n
        got = {
            "v2 rest json": _trim(*_v2_http(http, model, doc, k, False), n),
            "v2 rest binary": _trim(*_v2_http(http, model, doc, k, True), n),
            "v2 grpc": _trim(*_v2_grpc(grpc, model, doc, k), n),
        }
        for which, answer in got.items():
            if answer != want:
                bad.append((i, which, answer, want))
    return bad, labels


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", type=pathlib.Path)
    p.add_argument("--http", required=True, help="the REST address, host:port")
    p.add_argument("--grpc", required=True, help="the gRPC address, host:port")
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--k", type=int, default=5)
    a = p.parse_args()
    docs = read_documents(a.data_dir / "debian-tags-text" / "test.jsonl.gz", a.n)
    start = time.time()
    bad, labels = compare(a.http, a.grpc, a.model, docs, a.k)
    print(f"documents compared: {len(docs)} (k = {a.k}, 4 paths each, {labels} labels from /v1, "
          f"{time.time() - start:.1f} s)")
    print(f"disagreements with /v1: {len(bad)}")
    for b in bad[:10]:
        print("  ", b)
    sys.exit(1 if bad or len(docs) < a.n else 0)


if __name__ == "__main__":
    main()
