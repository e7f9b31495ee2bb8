#!/bin/bash
# identity.sh OLD_BIN NEW_BIN WORKDIR [ROUNDS]: a refactor's checks on three models of the shipped
# configs (debian-deps T = 1, debian-deps BP, debian-tags-text): `xmc predict --k 5` output
# byte-identical between the binaries, each on its own bundle and the new one on the old bundle;
# then per-query `xmc eval` latency of both binaries on the old bundles, interleaved.
# Run from the repository root (the configs are read from config/). Old outputs already in
# WORKDIR (old-<m>.xmcb, old-<m>.pred) are reused.
set -euo pipefail
OLD=$1; NEW=$2; W=$3; ROUNDS=${4:-3}; D=${XMC_DATASETS:?set XMC_DATASETS}
mkdir -p "$W"
data() { case $1 in text) echo "$D/debian-tags-text/$2.jsonl.gz";; *) echo "$D/debian-deps/$2.txt.gz";; esac; }
conf() { case $1 in text) echo config/default-text.toml;; *) echo config/default.toml;; esac; }
sets() { [ "$1" = bp ] && echo "--set bp=on"; true; }
for tag in old new; do
  BIN=$OLD; [ $tag = new ] && BIN=$NEW
  for m in t1 bp text; do
    [ -s "$W/$tag-$m.pred" ] && continue
    # shellcheck disable=SC2046
    "$BIN" train --quiet --config "$(conf $m)" --train "$(data $m train)" --out "$W/$tag-$m.xmcb" --set threads=2 $(sets $m)
    "$BIN" predict --model "$W/$tag-$m.xmcb" --data "$(data $m test)" --k 5 --out "$W/$tag-$m.pred"
  done
done
for m in t1 bp text; do
  "$NEW" predict --model "$W/old-$m.xmcb" --data "$(data $m test)" --k 5 --out "$W/newbin-oldbundle-$m.pred"
  echo "$m: $(sha256sum < "$W/old-$m.pred" | cut -c1-16), $(wc -l < "$W/old-$m.pred") lines"
  cmp "$W/old-$m.pred" "$W/newbin-oldbundle-$m.pred" && echo "$m: new binary, old bundle: identical"
  cmp "$W/old-$m.pred" "$W/new-$m.pred" && echo "$m: new binary, new bundle: identical"
  for tag in old new; do
    echo "$m $tag bundle: $(stat -c %s "$W/$tag-$m.xmcb") bytes, version $("$NEW" inspect "$W/$tag-$m.xmcb" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["meta"]["version"])')"
  done
done
for round in $(seq "$ROUNDS"); do for m in t1 bp text; do for tag in old new; do
  BIN=$OLD; [ $tag = new ] && BIN=$NEW
  echo "round $round $m $tag: $("$BIN" eval --model "$W/old-$m.xmcb" --data "$(data $m test)" --json 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); print(json.dumps({k:v for k,v in j.items() if "latency" in k or k in ("p@1","P@1")}))')"
done; done; done
