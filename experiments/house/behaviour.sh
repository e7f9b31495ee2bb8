#!/bin/bash
# behaviour.sh OLD_BIN NEW_BIN WORKDIR: a refactor's two checks (predict output byte-identical, eval latency unchanged).
set -euo pipefail
OLD=$1; NEW=$2; W=$3; D=${XMC_DATASETS:?set XMC_DATASETS}/debian-deps
mkdir -p $W
for tag in old new; do
  BIN=$OLD; [ $tag = new ] && BIN=$NEW
  for m in t1 bp; do
    sets=(); [ $m = bp ] && sets=(--set bp=on --set bp_lambda=0.3 --set bp_q=4)
    $BIN train --train $D/train.txt.gz --out $W/$tag-$m.xmcb --quiet "${sets[@]}"
    $BIN predict --model $W/$tag-$m.xmcb --data $D/test.txt.gz --k 5 --out $W/$tag-$m.pred
  done
done
for m in t1 bp; do
  "$NEW" predict --model $W/old-$m.xmcb --data $D/test.txt.gz --k 5 --out $W/newbin-oldbundle-$m.pred
  sha256sum $W/old-$m.pred
  cmp $W/old-$m.pred $W/newbin-oldbundle-$m.pred && echo "$m: new binary, old bundle: identical"
  cmp $W/old-$m.pred $W/new-$m.pred && echo "$m: new binary, new bundle: identical"
  ls -l $W/old-$m.xmcb $W/new-$m.xmcb | awk '{print $5, $9}'
done
for round in 1 2 3; do for tag in old new; do
  BIN=$OLD; [ $tag = new ] && BIN=$NEW
  echo "round $round $tag: $($BIN eval --model $W/old-t1.xmcb --data $D/test.txt.gz --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print({k:v for k,v in j.items() if "latency" in k or k in ("p@1","precision")})' 2>&1)"
done; done
