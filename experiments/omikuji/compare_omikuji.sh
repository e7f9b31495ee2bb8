#!/usr/bin/env bash
# xmc against omikuji (Parabel defaults: 3 trees, beam 10, max leaf 100) on the real data sets,
# measured in one run: training time with 2 threads, P@1/3/5, and (T = 1 or 3) single-thread
# per-query latency, omikuji timed by calling its predict one query at a time.
#
#   experiments/omikuji/compare_omikuji.sh [DATASET...]      (default: every set in $XMC_DATASETS, else ../shared/datasets)
#
# Needs `omikuji` on PATH (`cargo install omikuji --features cli`). Work files go to $OUT
# (default /tmp/xmc-compare). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${DATA:-${XMC_DATASETS:-../shared/datasets}}
OUT=${OUT:-/tmp/xmc-compare}
TREES=${TREES:-3}
mkdir -p "$OUT"
cargo build --release --quiet --bin xmc
cargo build --release --quiet --manifest-path experiments/omikuji/omikuji-latency/Cargo.toml
XMC=target/release/xmc
LAT=experiments/omikuji/omikuji-latency/target/release/omikuji-latency
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(Bibtex Corel5k Delicious debian-tags debian-deps)

secs() { /usr/bin/time -f "%e %M" -o "$1.time" "${@:2}" >"$1.log" 2>&1; cat "$1.time"; }
js() { python3 -c "import json,sys; d=json.load(open('$1')); print(' '.join('%.4f'%d[k] if isinstance(d[k],float) else str(d[k]) for k in sys.argv[1:]))" "${@:2}"; }

echo "| data set | system | T | train s (2 thr) | peak MB | P@1 | P@3 | P@5 | latency µs mean | p99 |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for d in "${sets[@]}"; do
  w="$OUT/$d"; mkdir -p "$w"
  for s in train test; do [ -f "$w/$s.txt" ] || gunzip -c "$DATA/$d/$s.txt.gz" >"$w/$s.txt"; done
  rm -rf "$w/omikuji.model"
  read -r ot om < <(secs "$w/omikuji-train" omikuji train --model_path "$w/omikuji.model" \
      --n_threads 2 --n_trees "$TREES" "$w/train.txt")
  omikuji test --n_threads 2 --out_path "$w/omikuji.pred" "$w/omikuji.model" "$w/test.txt" \
      >"$w/omikuji-test.log" 2>&1
  "$XMC" eval --truth "$w/test.txt" --pred <(sed -e 's/ /:/g' -e 's/\t/ /g' "$w/omikuji.pred") \
      --json >"$w/omikuji-eval.json"
  "$LAT" "$w/omikuji.model" "$w/test.txt" 10 >"$w/omikuji-lat.json"
  read -r xt xm < <(secs "$w/xmc-train" "$XMC" train --quiet --config config/parabel.toml \
      --set trees="$TREES" --set threads=2 --train "$w/train.txt" --out "$w/xmc.xmcb")
  "$XMC" eval --model "$w/xmc.xmcb" --data "$w/test.txt" --json >"$w/xmc-eval.json"
  read -r p1 p3 p5 < <(js "$w/omikuji-eval.json" p@1 p@3 p@5)
  read -r lm lp < <(js "$w/omikuji-lat.json" latency_us_mean latency_us_p99)
  echo "| $d | omikuji | $TREES | $ot | $((om / 1024)) | $p1 | $p3 | $p5 | $lm | $lp |"
  read -r p1 p3 p5 lm lp < <(js "$w/xmc-eval.json" p@1 p@3 p@5 latency_us_mean latency_us_p99)
  echo "| $d | xmc | $TREES | $xt | $((xm / 1024)) | $p1 | $p3 | $p5 | $lm | $lp |"
done
