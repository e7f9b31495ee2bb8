"""Splits an XC-format training file into a training part and a held-out part (seeded), so that
FIAT's settings are chosen without the test set: python3 split.py TRAIN OUT_DIR [SHARE] [SEED]."""
import gzip
import random
import sys


def main():
    src, out = sys.argv[1], sys.argv[2]
    share = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        header = f.readline().split()
        rows = f.read().splitlines()
    rng = random.Random(seed)
    held = set(rng.sample(range(len(rows)), int(len(rows) * share)))
    parts = {"fit": [], "held": []}
    for i, r in enumerate(rows):
        parts["held" if i in held else "fit"].append(r)
    for name, rs in parts.items():
        with open(f"{out}/{name}.txt", "w") as f:
            f.write(f"{len(rs)} {header[1]} {header[2]}\n")
            f.write("\n".join(rs) + "\n")


if __name__ == "__main__":
    main()
