#!/usr/bin/env python3
"""Turns an XC-format file (plain or gzip) into /v1/predict request bodies, one JSON per line.

Usage: scripts/xc_to_requests.py DATA [K] [LIMIT] > bodies.jsonl
"""
import gzip
import json
import sys


def main():
    path = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else None
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    f = gzip.open(path, "rt") if gz else open(path)
    first = f.readline()
    lines = [] if len(first.split()) == 3 and ":" not in first else [first]
    written = 0
    for line in lines + list(f):
        parts = line.rstrip("\n").split(" ")
        feats = [[int(t.split(":")[0]), float(t.split(":")[1])] for t in parts[1:] if t]
        print(json.dumps({"features": feats, "k": k}, separators=(",", ":")))
        written += 1
        if limit is not None and written >= limit:
            break


if __name__ == "__main__":
    main()
