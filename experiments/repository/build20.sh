#!/usr/bin/env bash
# Builds a model repository of 20 different models, each trained (T = 1, the defaults) on its
# own slice of the training file of a shared data set, in Triton's layout
# OUT/<name>/1/model.xmcb:
#
#   deps-1 .. deps-8       8 disjoint slices of debian-deps/train.txt.gz (XC, features)
#   citeulike-1 .. -6      6 disjoint slices of citeulike-t/train.txt.gz (XC, features)
#   tags-1 .. tags-6       6 disjoint slices of debian-tags-text/train.jsonl.gz (raw text)
#
# A slice of an XC file keeps the file's D and L in its header, so every deps model takes the
# debian-deps test rows as queries. Usage:
#
#   experiments/repository/build20.sh XMC_BIN DATASETS_DIR OUT_DIR [ROWS_PER_SLICE]
#
# DATASETS_DIR is the directory `XMC_DATASETS` names (it holds debian-deps/, citeulike-t/,
# debian-tags-text/). ROWS_PER_SLICE (default 3000) bounds each slice; a set with fewer rows than
# slices × ROWS_PER_SLICE gets equal shares of its rows instead. OUT_DIR must not exist yet.
set -eu  # no pipefail: `zcat | head` ends zcat with SIGPIPE
if [ $# -lt 3 ]; then
    echo "usage: $0 XMC_BIN DATASETS_DIR OUT_DIR [ROWS_PER_SLICE]" >&2
    exit 2
fi
bin=$1
data=$2
out=$3
rows=${4:-3000}
[ -e "$out" ] && { echo "$out exists; give a new directory" >&2; exit 2; }
for set in debian-deps citeulike-t debian-tags-text; do
    [ -d "$data/$set" ] || { echo "$data/$set not found" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# train NAME FILE: trains FILE into OUT/NAME/1/model.xmcb.
train() {
    mkdir -p "$out/$1/1"
    "$bin" train --quiet --train "$2" --out "$out/$1/1/model.xmcb" --set "name=$1" --set trees=1
}

# xc_slices SET PREFIX COUNT: COUNT disjoint slices of SET's XC training file.
xc_slices() {
    local set=$1 prefix=$2 count=$3 header n d l per i from
    header=$(zcat "$data/$set/train.txt.gz" | head -n 1)
    read -r n d l <<<"$header"
    per=$(( n / count < rows ? n / count : rows ))
    for i in $(seq 1 "$count"); do
        from=$(( (i - 1) * per + 2 ))  # line 1 is the header
        {
            echo "$per $d $l"
            zcat "$data/$set/train.txt.gz" | tail -n +"$from" | head -n "$per"
        } >"$work/$prefix-$i.txt"
        train "$prefix-$i" "$work/$prefix-$i.txt"
    done
}

# jsonl_slices SET PREFIX COUNT: likewise for SET's JSON Lines training file.
jsonl_slices() {
    local set=$1 prefix=$2 count=$3 n per i from
    n=$(zcat "$data/$set/train.jsonl.gz" | wc -l)
    per=$(( n / count < rows ? n / count : rows ))
    for i in $(seq 1 "$count"); do
        from=$(( (i - 1) * per + 1 ))
        zcat "$data/$set/train.jsonl.gz" | tail -n +"$from" | head -n "$per" \
            >"$work/$prefix-$i.jsonl"
        train "$prefix-$i" "$work/$prefix-$i.jsonl"
    done
}

xc_slices debian-deps deps 8
xc_slices citeulike-t citeulike 6
jsonl_slices debian-tags-text tags 6

total=0
for f in "$out"/*/1/model.xmcb; do
    total=$(( total + $(stat -c %s "$f") ))
done
echo "models: $(find "$out" -name model.xmcb | wc -l); distinct bundles: \
$(sha256sum "$out"/*/1/model.xmcb | awk '{print $1}' | sort -u | wc -l); \
bundles: $total bytes ($(( total / 1048576 )) MiB)"
