"""Plots erasure.sh's TSV: P@1 and P@5 against the erased share, one panel per data set and
metric, one line per model, as SVG (no dependencies; convert it to PNG with ImageMagick).
Usage: python3 plot.py RESULTS.tsv OUT.svg"""
import sys

COLORS = {"plain": "#333333", "fiat-query": "#1f77b4", "fiat": "#d62728", "defrag-fiat": "#2ca02c"}
NAMES = {"plain": "plain T=1", "fiat-query": "FIAT, queries only", "fiat": "FIAT (rows and queries)",
         "defrag-fiat": "DEFRAG-XY + FIAT (d0=4)"}


def main():
    rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l.strip()]
    sets = list(dict.fromkeys(r[0] for r in rows))
    models = list(dict.fromkeys(r[1] for r in rows))
    pw, ph, m = 340, 240, 50
    width, height = 2 * (pw + m) + m, len(sets) * (ph + m + 20) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>']
    for si, s in enumerate(sets):
        for mi, (metric, col) in enumerate([("P@1", 3), ("P@5", 4)]):
            x0, y0 = m + mi * (pw + m), 30 + si * (ph + m + 20)
            vals = [float(r[col]) for r in rows if r[0] == s]
            lo, hi = min(vals) * 0.95, max(vals) * 1.02
            sx = lambda e: x0 + e / 0.75 * pw
            sy = lambda v: y0 + ph - (v - lo) / (hi - lo) * ph
            out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
            out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 8}" text-anchor="middle">{s}: {metric}</text>')
            for e in (0, 0.25, 0.5, 0.75):
                out.append(f'<text x="{sx(e)}" y="{y0 + ph + 15}" text-anchor="middle">{int(e * 100)}%</text>')
            for k in range(5):
                v = lo + (hi - lo) * k / 4
                out.append(f'<text x="{x0 - 4}" y="{sy(v) + 4}" text-anchor="end">{v:.2f}</text>')
            for mod in models:
                pts = [(float(r[2]), float(r[col])) for r in rows if r[0] == s and r[1] == mod]
                path = " ".join(f"{sx(e):.1f},{sy(v):.1f}" for e, v in pts)
                out.append(f'<polyline points="{path}" fill="none" stroke="{COLORS.get(mod, "#999")}" stroke-width="2"/>')
                for e, v in pts:
                    out.append(f'<circle cx="{sx(e):.1f}" cy="{sy(v):.1f}" r="3" fill="{COLORS.get(mod, "#999")}"/>')
    for i, mod in enumerate(models):
        x = m + i * 190
        y = height - 20
        out.append(f'<rect x="{x}" y="{y - 9}" width="14" height="4" fill="{COLORS.get(mod, "#999")}"/>')
        out.append(f'<text x="{x + 18}" y="{y - 3}">{NAMES.get(mod, mod)}</text>')
    out.append(f'<text x="{width / 2}" y="{height - 35}" text-anchor="middle">share of each test point\'s features erased</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out))


if __name__ == "__main__":
    main()
