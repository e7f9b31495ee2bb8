#!/usr/bin/env python3
"""The server's own time for the first requests after a swap to a larger model.

    experiments/first-requests/first_requests.py [--rounds N] [--port P] XMC [XMC...]

For each round and each `xmc` binary given (interleaved, so that the machine's drift falls on
all of them alike), it starts `XMC serve` on FROM (default: the shipped Bibtex model, 1836
features), sends 400 predictions on new connections so that every async worker serves, points
the model path at TO (default: the debian-deps B = 8 serving model from
scripts/serving_models.sh, 45,268 features) and reloads, then sends eight predictions on new
connections. It prints each of those eight requests' `stats.elapsed_us` (the server's time in
the prediction, scratch space included), and then the p50 and max of 200 more, each on a new
connection, as the steady state to compare with.

The queries are the first points of DATA (default: the debian-deps test split); the requests
on FROM use the same points with their ids reduced modulo FROM's feature count. Standard
library only.
"""

import argparse
import gzip
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def points(path, n):
    rows = []
    with gzip.open(path, "rt") as f:
        for line in f:
            feats = [t.split(":") for t in line.split()[1:] if ":" in t]
            if not feats:
                continue  # the header, or a point without features
            rows.append([[int(a), float(b)] for a, b in feats])
            if len(rows) >= n:
                break
    return rows


def predict(port, features, conn=None):
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = json.dumps({"features": features, "k": 5})
    conn.request("POST", "/v1/predict", body=body, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    reply = json.loads(resp.read())
    if resp.status != 200:
        sys.exit(f"predict answered {resp.status}: {reply}")
    return reply["stats"]["elapsed_us"]


def point_at(link, target):
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(os.path.abspath(target), tmp)
    os.rename(tmp, link)


def inspect(model):
    out = subprocess.run([XMC[0], "inspect", model], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def features_of(model):
    """From `shape      45268 features, ...`."""
    shape = next(l for l in inspect(model) if l.startswith("shape"))
    return int(shape.split()[1])


def version_of(model):
    """From `model      NAME (version V)`."""
    first = next(l for l in inspect(model) if l.startswith("model"))
    return first.rsplit("version ", 1)[1].rstrip(")")


def round_of(xmc, port, link, small, large, rows):
    point_at(link, small)
    env = dict(os.environ, XMC_LOG="warn", XMC_ADMIN_TOKEN="first-requests")
    server = subprocess.Popen(
        [xmc, "serve", "--config", "config/server.toml", "--model", link,
         "--bind", f"127.0.0.1:{port}"],
        env=env, cwd=ROOT)
    try:
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            sys.exit(f"{xmc} did not become ready on port {port}")
        d = features_of(small)
        for i in range(400):
            predict(port, [[a % d, b] for a, b in rows[i % len(rows)]])
        point_at(link, large)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/admin/reload", headers={"authorization": "Bearer first-requests"})
        reply = json.loads(c.getresponse().read())
        # The poller may have found the new file first ("reloaded": false); either way the new
        # model must be the one serving now.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/readyz")
        serving = json.loads(c.getresponse().read()).get("version")
        if serving != version_of(large):
            sys.exit(f"the reload did not publish {large}: {reply}, serving {serving}")
        first = [predict(port, rows[i]) for i in range(8)]
        steady = sorted(predict(port, rows[i % len(rows)]) for i in range(8, 208))
        return first, steady
    finally:
        server.terminate()
        server.wait()


def main():
    global XMC
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("xmc", nargs="+", help="xmc binaries to compare")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--port", type=int, default=18093)
    ap.add_argument("--from", dest="small", default=os.path.join(ROOT, "models/default.xmcb"))
    ap.add_argument("--to", dest="large",
                    default=os.path.join(ROOT, "out/serve-debian-deps/b8.xmcb"))
    ap.add_argument("--data", default=os.path.join(os.environ.get("XMC_DATASETS", os.path.join(ROOT, "../shared/datasets")), "debian-deps/test.txt.gz"))
    args = ap.parse_args()
    XMC = [os.path.abspath(x) for x in args.xmc]
    rows = points(args.data, 500)
    with tempfile.TemporaryDirectory() as tmp:
        link = os.path.join(tmp, "model.xmcb")
        for r in range(args.rounds):
            for xmc in XMC:
                first, steady = round_of(xmc, args.port, link, args.small, args.large, rows)
                print(f"round {r + 1} {os.path.basename(xmc)}: first 8 after the swap "
                      f"{[round(x) for x in first]} (max {max(first):.0f}); then p50 "
                      f"{steady[len(steady) // 2]:.0f}, max {steady[-1]:.0f} µs", flush=True)


XMC = []

if __name__ == "__main__":
    main()
