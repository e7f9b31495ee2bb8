"""Computes tf-idf weights for corpus.txt and queries.txt with scikit-learn's TfidfVectorizer,
as an independent check of xmc's own (tests/model/text_reference.rs reads expected.json).

The analyzer gives scikit-learn the terms xmc makes from these texts: lower-cased words of
letters and digits (which is what UAX #29 word segmentation gives on this ASCII text), and
their word n-grams joined by one space. The test checks that both keep the same vocabulary,
so a difference in tokenization would fail it rather than go unnoticed.

Run from this folder: python make_expected.py > expected.json
"""

import json
import re
import sys

import sklearn
from sklearn.feature_extraction.text import TfidfVectorizer


def analyzer(ngram_max):
    def terms(text):
        words = re.findall(r"[a-z0-9]+", text.lower())
        return [
            " ".join(words[i : i + n])
            for i in range(len(words))
            for n in range(1, ngram_max + 1)
            if i + n <= len(words)
        ]

    return terms


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


# Each case is named after the xmc settings it matches; min_df counts documents in both.
CASES = {
    # xmc's defaults (docs/text.md): unigrams and bigrams, min_df 2, sublinear tf, smooth idf, l2.
    "defaults": dict(ngram_max=2, min_df=2, sublinear_tf=True, smooth_idf=True, norm="l2"),
    # The other branch of every weight: raw counts, unsmoothed idf, no normalization.
    "raw": dict(ngram_max=1, min_df=1, sublinear_tf=False, smooth_idf=False, norm=None),
}

corpus, queries = lines("corpus.txt"), lines("queries.txt")
out = {"sklearn": sklearn.__version__, "cases": {}}
for name, c in CASES.items():
    v = TfidfVectorizer(
        analyzer=analyzer(c["ngram_max"]),
        min_df=c["min_df"],
        max_df=1.0,
        sublinear_tf=c["sublinear_tf"],
        smooth_idf=c["smooth_idf"],
        norm=c["norm"],
    )
    v.fit(corpus)
    terms = v.get_feature_names_out()
    rows = v.transform(corpus + queries).tocsr()
    vectors = []
    for r in range(rows.shape[0]):
        lo, hi = rows.indptr[r], rows.indptr[r + 1]
        vectors.append(
            {str(terms[j]): float(x) for j, x in zip(rows.indices[lo:hi], rows.data[lo:hi])}
        )
    out["cases"][name] = {
        "settings": c,
        "idf": {str(t): float(w) for t, w in zip(terms, v.idf_)},
        "vectors": vectors,
    }
json.dump(out, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
