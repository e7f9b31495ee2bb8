#!/usr/bin/env bash
# Runs the shared anchor scripts (PECOS tf-idf + XR-Linear, scikit-learn's TfidfVectorizer) on
# both raw-text data sets, one after another, and appends each script's JSON line to OUT.
# Usage: run_anchors.sh VENV SHARED OUT   (e.g. /work/venv-anchors /work/shared anchors.jsonl)
set -euo pipefail
venv=$1 shared=$2 out=$3
for ds in debian-tags-text debian-deps-text; do
    "$venv/bin/python" "$shared/anchors/sklearn_tfidf.py" "$shared/datasets/$ds" | tee -a "$out"
    "$venv/bin/python" "$shared/anchors/pecos_text.py" "$shared/datasets/$ds" --threads 2 | tee -a "$out"
done
