#!/usr/bin/env bash
# Trains one model in shards on this machine, the same steps a cluster takes: `xmc train plan`,
# N `xmc train shard` processes side by side, `xmc train merge`.
#
#   scripts/train-sharded.sh --train DATA --out MODEL.xmcb --shards N [--work DIR] [PLAN OPTIONS...]
#
# PLAN OPTIONS go to `xmc train plan` (--config FILE, --set KEY=VALUE, --label-names FILE, ...).
# Shard files go to DIR (default: MODEL.xmcb.shards/). A shard whose file is already there is
# not trained again, so after a failure a rerun trains only the missing indexes; the plan is
# deterministic, so rerunning it keeps the shards valid. Each shard process gets
# cores / N threads (RAYON_NUM_THREADS, unless set). XMC names the binary (default: xmc).
set -euo pipefail

xmc=${XMC:-xmc}
train="" out="" shards="" work=""
plan_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --train) train=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) plan_opts+=("$1"); shift ;;
  esac
done
if [ -z "$train" ] || [ -z "$out" ] || [ -z "$shards" ]; then
  echo "usage: $0 --train DATA --out MODEL.xmcb --shards N [--work DIR] [PLAN OPTIONS...]" >&2
  exit 2
fi
work=${work:-$out.shards}
mkdir -p "$work"
"$xmc" train plan --train "$train" --out "$work/plan.xmcp" --shards "$shards" "${plan_opts[@]}"

threads=${RAYON_NUM_THREADS:-$(( $(nproc) / shards > 0 ? $(nproc) / shards : 1 ))}
pids=()
for ((i = 0; i < shards; i++)); do
  if [ -f "$work/shard-$i.xmcs" ]; then
    echo "shard $i: $work/shard-$i.xmcs is there; not trained again"
    continue
  fi
  RAYON_NUM_THREADS=$threads "$xmc" train shard --plan "$work/plan.xmcp" --train "$train" \
    --index "$i" --of "$shards" --out "$work/shard-$i.xmcs" &
  pids+=("$i:$!")
done
failed=()
for entry in "${pids[@]}"; do
  wait "${entry#*:}" || failed+=("${entry%%:*}")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "shards failed: ${failed[*]}; rerun this command to train only those" >&2
  exit 1
fi

shard_files=()
for ((i = 0; i < shards; i++)); do shard_files+=("$work/shard-$i.xmcs"); done
# The merge reads the names the plan hashed: pass the plan's names options on.
merge_names=()
set -- "${plan_opts[@]}"
while [ $# -gt 0 ]; do
  case "$1" in
    --label-names | --feature-names) merge_names+=("$1" "$2"); shift 2 ;;
    *) shift ;;
  esac
done
"$xmc" train merge --plan "$work/plan.xmcp" --train "$train" "${merge_names[@]}" \
  --out "$out" "${shard_files[@]}"
