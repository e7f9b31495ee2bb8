#!/usr/bin/env python3
"""Server CPU per request of /v1 REST, V2 REST (JSON) and V2 gRPC, at one fixed request rate.

    scripts/v2_cost.py DATA_DIR --http 127.0.0.1:8080 --grpc 127.0.0.1:8081 --pid PID \
        --model NAME [--rate 300] [--seconds 5] [--rounds 6] [--k 5]

Sends the text documents of DATA_DIR/debian-deps-text/test.jsonl.gz, one request each, in the
same order, at `--rate` requests a second (paced from one thread over one persistent connection
per protocol), to the running `xmc serve` whose process id is PID. Each round runs the three
protocols one after another for `--seconds` each, so they are interleaved over the run. The
server's CPU time is read from /proc: the sum of every thread's `schedstat` run time
(nanoseconds), with `stat`'s utime + stime (clock ticks) beside it as a cross-check. Prints each
window, then per protocol the total CPU over the total requests, and its ratio to /v1's.

Needs `tritonclient[grpc]` (for the gRPC messages) and numpy. Every request must answer 200/OK;
a failure stops the run.
"""

import argparse
import gzip
import http.client
import json
import os
import pathlib
import sys
import time

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    """(ns on CPU summed over the threads' schedstat, s of utime + stime from stat)."""
    ns = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ns += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the command name.
    return ns, (int(fields[11]) + int(fields[12])) / TICK


def documents(data_dir):
    with gzip.open(data_dir / "debian-deps-text" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


class Rest:
    def __init__(self, addr, path, body_of):
        host, port = addr.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.path, self.body_of = path, body_of

    def send(self, doc):
        self.conn.request("POST", self.path, body=self.body_of(doc),
                          headers={"content-type": "application/json"})
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"{self.path}: {r.status} {body[:200]!r}")


class Grpc:
    def __init__(self, addr, model, k):
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(addr))
        self.model, self.k = model, k

    def send(self, doc):
        req = service_pb2.ModelInferRequest(model_name=self.model)
        req.parameters["k"].int64_param = self.k
        t = req.inputs.add()
        t.name, t.datatype = "text", "BYTES"
        t.shape.append(1)
        raw = doc.encode()
        req.raw_input_contents.append(len(raw).to_bytes(4, "little") + raw)
        self.stub.ModelInfer(req, timeout=30)


def window(client, docs, start_at, rate, seconds):
    """Sends docs from index start_at at `rate` a second for `seconds`; returns the count sent."""
    n = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        client.send(docs[(start_at + i) % len(docs)])
    late = time.perf_counter() - (t0 + n / rate)
    return n, late


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", type=pathlib.Path)
    p.add_argument("--http", required=True)
    p.add_argument("--grpc", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--rate", type=float, default=300)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--k", type=int, default=5)
    a = p.parse_args()
    docs = documents(a.data_dir)
    k = a.k
    v2_path = f"/v2/models/{a.model}/infer"
    clients = {
        "/v1 REST": Rest(a.http, "/v1/predict",
                         lambda d: json.dumps({"text": d, "k": k}).encode()),
        "V2 REST JSON": Rest(a.http, v2_path, lambda d: json.dumps({
            "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [d]}],
            "parameters": {"k": k}}).encode()),
        "V2 gRPC": Grpc(a.grpc, a.model, k),
    }
    # One warm-up window each, not counted.
    for c in clients.values():
        window(c, docs, 0, a.rate, 1)
    totals = {name: [0, 0, 0.0] for name in clients}
    print(f"{len(docs)} debian-deps-text documents, {a.rate:g} requests/s, "
          f"{a.seconds:g} s windows, {a.rounds} rounds, k = {k}")
    print("round  protocol       requests  server CPU µs/request (schedstat, stat)  late s")
    offset = 0
    for r in range(a.rounds):
        for name, c in clients.items():
            ns0, s0 = cpu(a.pid)
            n, late = window(c, docs, offset, a.rate, a.seconds)
            ns1, s1 = cpu(a.pid)
            totals[name][0] += n
            totals[name][1] += ns1 - ns0
            totals[name][2] += s1 - s0
            print(f"{r + 1:>5}  {name:<13} {n:>9}  {(ns1 - ns0) / n / 1e3:>10.1f}"
                  f"  {(s1 - s0) / n * 1e6:>10.1f}  {late:>26.3f}")
        offset += int(a.rate * a.seconds)
    base = totals["/v1 REST"][1] / totals["/v1 REST"][0]
    print("\nprotocol       requests  server CPU µs/request  ratio to /v1  (stat: µs/request)")
    for name, (n, ns, s) in totals.items():
        per = ns / n
        print(f"{name:<13} {n:>9}  {per / 1e3:>21.1f}  {per / base:>12.3f}  "
              f"({s / n * 1e6:.1f})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
