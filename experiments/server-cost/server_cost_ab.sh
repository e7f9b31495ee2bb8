#!/usr/bin/env bash
# Is a change in the server's cost the code's doing or the machine's? Builds the xmc of another
# revision beside this checkout's and measures both servers in one run, alternated round by
# round, at one fixed rate: the server's CPU per request and the p99 for /v1/predict and for
# /healthz (the HTTP floor), each on a fresh server.
#
#   experiments/server-cost/server_cost_ab.sh REV [RATE] [ROUNDS]
#
#   REV     a commit to compare against (its xmc must read BUNDLE)
#   RATE    requests a second, Poisson arrivals, 10 s per endpoint after 1 s of warm-up
#           (default 4000)
#   ROUNDS  rounds, each running both servers one after the other: REV's first in odd rounds,
#           this checkout's first in even ones (default 3)
#   BUNDLE  (environment) the model served, one of debian-deps, whose test split the queries
#           come from (default out/serve-debian-deps/b8.xmcb, which scripts/serving_models.sh
#           trains)
#
# Reports go to out/cost-ab/. The other revision is unpacked and built under
# target/cost-ab/tree-REV, with the build outputs (kept, so a second comparison with it builds
# nothing; `cargo clean` removes it).
set -euo pipefail
cd "$(dirname "$0")/../.."
REV=${1:?usage: experiments/server-cost/server_cost_ab.sh REV [RATE] [ROUNDS]}
RATE=${2:-4000}
ROUNDS=${3:-3}
BUNDLE=${BUNDLE:-out/serve-debian-deps/b8.xmcb}
OUT=out/cost-ab
sha=$(git rev-parse --short "$REV^{commit}")
tree=target/cost-ab/tree-$sha
mkdir -p "$OUT"

cargo build --release --quiet --bin xmc --bin xmc-loadtest
[ -f "$BUNDLE" ] || scripts/serving_models.sh
if [ ! -x "$tree/target/release/xmc" ]; then
  rm -rf "$tree"
  mkdir -p "$tree"
  git archive "$sha" | tar -x -C "$tree"
  (cd "$tree" && cargo build --release --quiet --bin xmc)
fi

scenario() { # NAME XMC
  cat >"$OUT/$1.toml" <<EOF
# Written by experiments/server-cost/server_cost_ab.sh: one trial at a fixed rate (the max-rate search started
# at its ceiling), for /v1/predict and for /healthz.
kind = "max-rate"
title = "Server cost at $RATE req/s: $1"

[data]
test = "${XMC_DATASETS:-../shared/datasets}/debian-deps/test.txt.gz"
k = 5

[load]
arrivals = "poisson"
duration_s = 10
warmup_s = 1

[server]
xmc = "$2"

[[models]]
label = "$1"
bundle = "$BUNDLE"

[max_rate]
target_p99_ms = 10
start_rate = $RATE
ceiling = $RATE
refine = 0
endpoints = ["predict", "healthz"]
half_s = 0
EOF
}
scenario "$sha" "$tree/target/release/xmc"
scenario head target/release/xmc

for round in $(seq "$ROUNDS"); do
  order=("$sha" head)
  [ $((round % 2)) -eq 1 ] || order=(head "$sha")
  for name in "${order[@]}"; do
    echo "round $round: $name" >&2
    target/release/xmc-loadtest "$OUT/$name.toml" --out "$OUT/$name-$round" >"$OUT/$name-$round.log"
  done
done

python3 - "$OUT" "$sha" "$ROUNDS" <<'EOF'
import json, statistics, sys

out, sha, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
cost = {}
print("| round | build | predict CPU µs/request | predict p99 ms | /healthz CPU µs/request | /healthz p99 ms |")
print("|---:|---|---:|---:|---:|---:|")
for r in range(1, rounds + 1):
    for name in (sha, "head"):
        report = json.load(open(f"{out}/{name}-{r}/report.json"))
        row = {}
        for m in report["max_rate"]:
            step = m["steps"][0]
            ok = step["summary"]["ok"]
            row[m["endpoint"]] = (step["server"]["cpu_ms"] * 1000 / ok if ok else float("nan"),
                                  step["summary"]["latency"]["p99_ms"])
            cost.setdefault((name, m["endpoint"]), []).append(row[m["endpoint"]][0])
        print(f"| {r} | {name} | {row['predict'][0]:.1f} | {row['predict'][1]:.3f} "
              f"| {row['healthz'][0]:.1f} | {row['healthz'][1]:.3f} |")
for endpoint in ("predict", "healthz"):
    base = statistics.median(cost[(sha, endpoint)])
    head = statistics.median(cost[("head", endpoint)])
    print(f"{endpoint}: median {head:.1f} µs/request for this checkout against {base:.1f} at {sha} "
          f"({head / base:.2f}×)")
EOF
