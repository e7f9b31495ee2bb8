#!/bin/sh
# The live-sync sidecar: keeps one bundle in a bucket (any rclone remote) copied into the
# directory that xmc serves its model from, so that a new upload reaches the server without a
# restart. POSIX sh, for the rclone image (Alpine) as much as for a test on Debian.
#
#   XMC_SYNC_SOURCE=bucket:models/xmc/model.xmcb \
#   XMC_SYNC_DEST=/models/model.xmcb XMC_SYNC_INTERVAL_S=10 xmc-live-sync.sh
#
# XMC_SYNC_SOURCE  the bundle in the bucket: `remote:path/to/file.xmcb` (rclone's remote
#                  syntax; a plain path is a local directory, which the test uses as the bucket)
# XMC_SYNC_DEST    the model path that xmc serves (its `model` setting)
# XMC_SYNC_INTERVAL_S  seconds between looks at the bucket (default 10; fractions allowed)
# XMC_SYNC_ONCE    when set, sync once and exit (an init container, or a test)
#
# Every new bundle is copied to a temporary name beside the model path and then renamed over
# it. A rename within one directory is atomic, so xmc's poller sees either the old file or the
# whole new one, never a partial copy; the old file stays mapped by the server until it has
# swapped. xmc itself checks every bundle it loads (checksums, structure) and keeps serving the
# old model when one is corrupt, so this script does not check bundles itself.
#
# A bundle counts as new when the bucket lists it with another size or modification time than
# the one synced last (kept beside the model path, so a restarted sidecar does not copy again).
# Each sync logs `synced <epoch ms> <size> <mtime>` on stdout after its rename.
set -eu

src=${XMC_SYNC_SOURCE:?set XMC_SYNC_SOURCE to the bundle in the bucket}
dest=${XMC_SYNC_DEST:?set XMC_SYNC_DEST to the model path xmc serves}
interval=${XMC_SYNC_INTERVAL_S:-10}
dir=$(dirname "$dest")
base=$(basename "$dest")
partial="$dir/.$base.partial"
stamp_file="$dir/.$base.synced"

log() {
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) xmc-live-sync: $*" >&2
}

epoch_ms() {
  # GNU date knows %N; BusyBox's prints it literally, so fall back to whole seconds there.
  ms=$(date +%s%3N)
  case $ms in
    *N) echo "$(date +%s)000" ;;
    *) echo "$ms" ;;
  esac
}

sync_once() {
  # `rclone lsl` prints "size date time path" for the one file; empty when it is missing.
  if ! listing=$(rclone lsl "$src" 2>/dev/null) || [ -z "$listing" ]; then
    log "no bundle at $src yet"
    return 0
  fi
  stamp=$(echo "$listing" | awk 'NR == 1 { print $1 " " $2 "T" $3 }')
  last=$(cat "$stamp_file" 2>/dev/null || true)
  if [ "$stamp" = "$last" ] && [ -e "$dest" ]; then
    return 0
  fi
  rm -f "$partial"
  if ! rclone copyto --ignore-times "$src" "$partial"; then
    log "copy of $src failed; will try again"
    rm -f "$partial"
    return 0
  fi
  mv -f "$partial" "$dest"
  echo "$stamp" >"$stamp_file"
  echo "synced $(epoch_ms) $stamp"
}

mkdir -p "$dir"
if [ -n "${XMC_SYNC_ONCE:-}" ]; then
  sync_once
  exit 0
fi
log "syncing $src to $dest every ${interval}s"
trap 'exit 0' TERM INT
while :; do
  sync_once
  sleep "$interval" &
  wait $! || true
done
