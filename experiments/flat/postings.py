#!/usr/bin/env python3
"""How many postings a flat model's queries read, and from lists of which lengths.

    experiments/flat/postings.py MODEL.xmcb TEST.txt[.gz]

MODEL is a flat model (`model = "flat"`: one node, its weights stored feature-major, one posting
list per feature). TEST is an XC file. Prints the label count L, the longest posting list, how
many lists reach L/2, L/4, L/8 and L/16 entries, the mean postings a test query's features
read, and the share of those postings that come from lists of at least L/4, L/8 and L/16.
"""
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bundle_sections import sections  # noqa: E402

SHARES = (2, 4, 8, 16)


def main():
    model, test = sys.argv[1], sys.argv[2]
    s = sections(model)
    if len(s["tree.0.chunk.feat_start"]) != 2:
        sys.exit(f"{model}: not a flat model (its tree has more than one node)")
    feats, starts = s["tree.0.chunk.feat"], s["tree.0.chunk.entry_start"]
    n_labels = len(s["tree.0.out_bias"])
    length = {f: starts[p + 1] - starts[p] for p, f in enumerate(feats)}
    longest = max(length.values(), default=0)
    print(f"labels {n_labels}, features with a posting list {len(length)}, longest list {longest}")
    for k in SHARES:
        count = sum(1 for n in length.values() if n >= n_labels / k)
        print(f"lists of at least L/{k} entries: {count}")
    opener = gzip.open if test.endswith(".gz") else open
    queries, total = 0, 0
    from_long = dict.fromkeys(SHARES, 0)
    with opener(test, "rt") as f:
        for i, line in enumerate(f):
            parts = line.split()
            if i == 0 and len(parts) == 3 and all(p.isdigit() for p in parts):
                continue  # the optional header "N D L"
            queries += 1
            for tok in parts:
                if ":" not in tok:
                    continue
                n = length.get(int(tok.split(":", 1)[0]), 0)
                total += n
                for k in SHARES:
                    if n >= n_labels / k:
                        from_long[k] += n
    print(f"test queries {queries}, mean postings read {total / max(queries, 1):.1f}")
    for k in SHARES:
        print(f"share of them from lists of at least L/{k} entries: {from_long[k] / max(total, 1):.3f}")


if __name__ == "__main__":
    main()
