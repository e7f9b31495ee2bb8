#!/usr/bin/env bash
# Sharded training against one-process training on one data set and config:
#   experiments/sharded/measure.sh OUT_DIR DATA N [--set KEY=VALUE]...
# 1. `xmc train` (wall time, peak RSS);
# 2. `xmc train plan`, N `xmc train shard` one after another (each with the whole machine, as on N
#    machines), `xmc train merge`, each timed with its peak RSS;
# 3. the two bundles' content versions and metadata (but `created`) compared, and the two
#    models' predictions on the data's test split compared byte for byte.
# Prints one table row per step and the ratios. XMC names the binary (default: the release one).
# REUSE_TRAIN=1 skips step 1 when OUT_DIR holds it (step 2 alone takes about as long).
set -euo pipefail
out=$1 data=$2 n=$3
shift 3
xmc=${XMC:-target/release/xmc}
mkdir -p "$out"
test_split=$(dirname "$data")/test.txt.gz
timed() { # timed NAME CMD...: wall seconds and peak RSS (KiB) of CMD into $out/NAME.time
  local name=$1
  shift
  /usr/bin/time -f "%e %M" -o "$out/$name.time" "$@" 2>>"$out/log"
}
# REUSE_TRAIN=1 keeps a finished step 1 in OUT_DIR, so that each quiet run stays short.
if [ "${REUSE_TRAIN:-0}" != 1 ] || [ ! -s "$out/train.time" ]; then
  timed train "$xmc" train --quiet --train "$data" --out "$out/one.xmcb" "$@"
fi
timed plan "$xmc" train plan --train "$data" --out "$out/plan.xmcp" --shards "$n" "$@"
for ((i = 0; i < n; i++)); do
  timed "shard$i" "$xmc" train shard --plan "$out/plan.xmcp" --train "$data" --index "$i" \
    --of "$n" --out "$out/shard-$i.xmcs"
done
shards=()
for ((i = 0; i < n; i++)); do shards+=("$out/shard-$i.xmcs"); done
timed merge "$xmc" train merge --plan "$out/plan.xmcp" --train "$data" --out "$out/merged.xmcb" \
  "${shards[@]}"

strip() { "$xmc" inspect --json "$1" | python3 -c '
import json, sys
m = json.load(sys.stdin)
meta = m.get("meta", m)
meta.pop("created", None)
print(json.dumps(meta, sort_keys=True))'; }
if [ "$(strip "$out/one.xmcb")" = "$(strip "$out/merged.xmcb")" ]; then meta=same; else meta=DIFFERENT; fi
"$xmc" predict --model "$out/one.xmcb" --data "$test_split" --out "$out/one.pred" 2>>"$out/log"
"$xmc" predict --model "$out/merged.xmcb" --data "$test_split" --out "$out/merged.pred" 2>>"$out/log"
if cmp -s "$out/one.pred" "$out/merged.pred"; then pred=identical; else pred=DIFFERENT; fi

python3 - "$out" "$n" "$meta" "$pred" <<'PY'
import json, os, sys
out, n, meta, pred = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def t(name):
    s, kib = open(f"{out}/{name}.time").read().split()
    return float(s), int(kib) / 1024
rows = ["train", "plan"] + [f"shard{i}" for i in range(n)] + ["merge"]
print("| step | wall s | peak RSS MiB |\n|---|---|---|")
for r in rows:
    s, m = t(r)
    print(f"| {r} | {s:.2f} | {m:.0f} |")
shard_s = [t(f"shard{i}")[0] for i in range(n)]
mean = sum(shard_s) / n
one = t("train")[0]
size = os.path.getsize(f"{out}/one.xmcb") / 2**20
import re
train_s = {int(m[1]): float(m[2]) for m in re.finditer(
    r"wrote shard (\d+) of \d+ .* in ([0-9.]+) s of training", open(f"{out}/log").read())}
if len(train_s) == n:
    ts = [train_s[i] for i in range(n)]
    print(f"shard training time (the shards' own record), s: {[round(x, 2) for x in ts]}")
    print(f"slowest / mean shard training time: {max(ts) / (sum(ts) / n):.3f}")
print(f"\nslowest / mean shard wall time: {max(shard_s) / mean:.3f}")
print(f"(plan + merge) / train: {(t('plan')[0] + t('merge')[0]) / one:.3f}")
print(f"sum of shards / train: {sum(shard_s) / one:.3f}")
print(f"largest shard peak RSS: {max(t(f'shard{i}')[1] for i in range(n)):.0f} MiB; train's: {t('train')[1]:.0f} MiB; bundle {size:.1f} MiB")
print(f"metadata but created: {meta}; predictions on the test split: {pred}")
PY
