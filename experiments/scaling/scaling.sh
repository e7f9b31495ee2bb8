#!/usr/bin/env bash
# How xmc scales with cores, measured in one run on one data set (default debian-deps, the
# largest here), beside omikuji where it is on PATH:
#
#   experiments/scaling/scaling.sh [THREADS...]   (default: 1 2 4 … up to the cores, and the cores)
#
# 1. Training, end to end (`xmc train`, `omikuji train`, the same uncompressed train.txt) at
#    each thread count: wall and CPU seconds, peak RSS, speedup over the first count. xmc
#    trains config/parabel.toml (T = 3, B = 2, omikuji's defaults) and config/debian-deps.toml
#    (the serving model); the `version` column is the bundle's content hash, which leaves out
#    only the metadata (timings, the `threads` key), so one value down a column means the same
#    model whatever the thread count.
# 2. Batch prediction in process: `cargo bench --bench scaling` on the serving model (queries a
#    second against threads, and whether the predictions stay bit for bit the same).
# 3. With SERVE_CPUS set (e.g. "1 2 4"): the HTTP max rate of /v1/predict on the serving model
#    (loadtest/scenarios/max-rate.toml, shortened) with the server confined to that many CPUs,
#    one per physical core, and the load generator's sending threads (`load.senders`: SENDERS,
#    default one per two server CPUs) to cores of their own. /healthz at the largest count
#    shows where the generator itself stops.
#
# DATA (a directory with train.txt.gz and test.txt.gz), OUT (work files and reports; default
# /tmp/xmc-scaling), SERVE_S (seconds per max-rate trial; default 3), XMC, XMC_LOADTEST and
# SCALING_BENCH (prebuilt binaries: nothing is built when all three are given), OMIKUJI
# (default: omikuji on PATH; empty: skip it). Prints Markdown tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${DATA:-${XMC_DATASETS:-../shared/datasets}/debian-deps}
OUT=${OUT:-/tmp/xmc-scaling}
OMIKUJI=${OMIKUJI-$(command -v omikuji || true)}
SERVE_CPUS=${SERVE_CPUS:-}
SERVE_S=${SERVE_S:-3}
mkdir -p "$OUT"
if [ -z "${XMC:-}" ] || [ -z "${SCALING_BENCH:-}" ] || { [ -n "$SERVE_CPUS" ] && [ -z "${XMC_LOADTEST:-}" ]; }; then
  cargo build --release --quiet --bin xmc --bin xmc-loadtest
  SCALING_BENCH=${SCALING_BENCH:-$(cargo bench --bench scaling --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "scaling" and m.get("executable"):
        print(m["executable"])')}
fi
XMC=${XMC:-target/release/xmc}
XMC_LOADTEST=${XMC_LOADTEST:-target/release/xmc-loadtest}
cores=$(nproc)
threads=("$@")
if [ ${#threads[@]} -eq 0 ]; then
  for ((t = 1; t < cores; t *= 2)); do threads+=("$t"); done
  threads+=("$cores")
fi
for s in train test; do
  [ -f "$OUT/$s.txt" ] || gunzip -c "$DATA/$s.txt.gz" >"$OUT/$s.txt"
done
# The names beside the data, which xmc reads beside its training file (omikuji ignores them).
for s in labels features; do
  [ ! -f "$DATA/$s.txt.gz" ] || cp "$DATA/$s.txt.gz" "$OUT/"
done

echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(lscpu | grep -m1 '^Thread(s) per core' | sed 's/  */ /g')"
echo
# timed LOG CMD...: runs CMD (output to LOG), prints "wall_s cpu_s peak_kB" (python3's
# resource module, which every machine here has; /usr/bin/time is not everywhere).
timed() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
log, cmd = sys.argv[1], sys.argv[2:]
start = time.monotonic()
with open(log, "w") as f:
    rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
wall = time.monotonic() - start
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
if rc != 0:
    sys.exit(f"{' '.join(cmd)} failed ({rc}), see {log}")
print(f"{wall:.2f} {ru.ru_utime + ru.ru_stime:.2f} {ru.ru_maxrss}")
PY
}

echo "| what | threads | wall s | CPU s | peak MB | speedup | version |"
echo "|---|---:|---:|---:|---:|---:|---|"
declare -A first
row() { # NAME THREADS WALL CPU KB VERSION
  local key=$1
  [ -n "${first[$key]:-}" ] || first[$key]=$3
  printf '| %s | %s | %s | %s | %d | %s× | %s |\n' "$1" "$2" "$3" "$4" $(($5 / 1024)) \
    "$(awk -v a="${first[$key]}" -v b="$3" 'BEGIN { printf "%.2f", a / b }')" "$6"
}
for t in "${threads[@]}"; do
  for cfg in parabel debian-deps; do
    read -r w c m < <(timed "$OUT/xmc-$cfg-$t.log" "$XMC" train --quiet --config "config/$cfg.toml" \
      --set threads="$t" --train "$OUT/train.txt" --out "$OUT/xmc-$cfg-$t.xmcb")
    v=$(sed -n 's/.*version \([0-9a-f]*\)).*/\1/p' "$OUT/xmc-$cfg-$t.log")
    row "xmc train, $cfg.toml" "$t" "$w" "$c" "$m" "$v"
  done
  if [ -n "$OMIKUJI" ]; then
    rm -rf "$OUT/omikuji-$t.model"
    read -r w c m < <(timed "$OUT/omikuji-$t.log" "$OMIKUJI" train --n_threads "$t" \
      --model_path "$OUT/omikuji-$t.model" "$OUT/train.txt")
    row "omikuji train (3 trees)" "$t" "$w" "$c" "$m" "–"
  fi
done
echo
serving=$OUT/xmc-debian-deps-${threads[0]}.xmcb

XMC_BENCH_DATA=$DATA XMC_BENCH_MODEL=$serving XMC_BENCH_THREADS=$(IFS=,; echo "${threads[*]}") \
  "$SCALING_BENCH"
echo

[ -n "$SERVE_CPUS" ] || exit 0
# One CPU per physical core: the generator's senders take the first, the server the next.
mapfile -t percore < <(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | sort -t, -k3,3n -k2,2n -u | cut -d, -f1)
for n in $SERVE_CPUS; do
  # One sender thread per two server cores (one sender loaded about two cores' worth of
  # predict on the device; bench/results/2026-11-27-scaling-device.md), unless SENDERS says.
  senders=${SENDERS:-$(((n + 1) / 2))}
  if [ $((senders + n)) -gt ${#percore[@]} ]; then
    echo "server on $n CPUs: $senders senders and $n server CPUs need more than the ${#percore[@]} cores here"
    continue
  fi
  gen=$(IFS=,; echo "${percore[*]:0:$senders}")
  cpus=$(IFS=,; echo "${percore[*]:$senders:$n}")
  endpoints='["predict"]'
  [ "$n" = "${SERVE_CPUS##* }" ] && endpoints='["predict", "healthz"]'
  sed -e "s|^test = .*|test = \"$DATA/test.txt.gz\"|" \
    -e "s|^xmc = .*|xmc = \"$XMC\"\ncpus = [$cpus]|" \
    -e "s|^warmup_s = .*|warmup_s = 1\nduration_s = $SERVE_S\ncpus = [$gen]\nsenders = $senders|" \
    -e '/^duration_s = 5/d' \
    -e "s|^endpoints = .*|endpoints = $endpoints|" \
    -e 's|^half_s = .*|half_s = 5|' -e 's|^refine = .*|refine = 2|' \
    loadtest/scenarios/max-rate.toml |
    awk -v b="$serving" '/^\[/ { skip = 0 } /^\[\[models\]\]/ && ++n == 2 { skip = 1 } skip { next }
      { sub(/^bundle = .*/, "bundle = \"" b "\"") } 1' \
      >"$OUT/serve-$n.toml"
  "$XMC_LOADTEST" "$OUT/serve-$n.toml" --out "$OUT/serve-$n" >"$OUT/serve-$n.log" 2>&1 ||
    { echo "server on $n CPUs: xmc-loadtest failed, see $OUT/serve-$n.log"; continue; }
  echo "server on $n CPU(s) [$cpus], $senders sender(s) on [$gen]:"
  grep -E '^(## Max rate|Max rate:|At half)' "$OUT/serve-$n/report.md"
  echo
done
