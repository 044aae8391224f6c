#!/usr/bin/env bash
# Checkpoint sync and restore next to `cp -r`: a checkpoint of SIZE_MIB in FILES files synced to
# a local folder (file://) and to an S3-compatible server on loopback (moto), then synced
# again after one file changed, then restored into an empty folder. Prints a markdown table.
#
# Run from the repository's root:   bash bench/checkpoint_sync.sh
# Knobs (environment): SIZE_MIB=1024  FILES=100  NO_BUILD=1  STORES="file s3"
#   moto_server is taken from PATH, else $SLUICE_MOTO_SERVER, else target/moto-venv.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MIB=${SIZE_MIB:-1024}
FILES=${FILES:-100}
STORES=${STORES:-"file s3"}

log() { echo "checkpoint_sync: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-runtime --example checkpoint_bench"
  cargo build --release -q -p sluice-runtime --example checkpoint_bench || die "build failed"
fi
BENCH=target/release/examples/checkpoint_bench
[[ -x $BENCH ]] || die "$BENCH not found"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ckpt-bench.XXXXXX")
MOTO_PID=
cleanup() { [[ -n $MOTO_PID ]] && kill "$MOTO_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

log "writing $SIZE_MIB MiB in $FILES files"
mkdir -p "$WORK/src"
per=$((SIZE_MIB * 1024 / FILES))
for ((i = 0; i < FILES; i++)); do
  head -c $((per * 1024)) /dev/urandom > "$WORK/src/shard-$i.bin"
done
sync

now_us() { local t=${EPOCHREALTIME//[.,]/}; echo "$t"; }
t0=$(now_us); cp -r "$WORK/src" "$WORK/cp-copy"; t1=$(now_us)
cp_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e6 }')
rm -rf "$WORK/cp-copy"

echo "| store | first sync s | ratio to cp -r | second sync (1 of $FILES files changed) s | second / first | restore s | restore / cp -r |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
echo "| \`cp -r\` ($SIZE_MIB MiB, $FILES files) | $cp_s | 1.00 | | | | |"

row() {
  local name=$1 url=$2
  local line
  line=$("$BENCH" "$url" "bench/$name" "$WORK/src" shard-7.bin "$WORK/restore-$name") \
    || die "checkpoint_bench failed on $url"
  log "$name: $line"
  awk -v name="$name" -v cp="$cp_s" -v l="$line" 'BEGIN {
    n = split(l, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); v[p[1]] = p[2] }
    printf "| %s | %.3f | %.2f | %.3f | %.1f%% | %.3f | %.2f |\n", name, v["first"], v["first"] / cp,
      v["second"], 100 * v["second"] / v["first"], v["restore"], v["restore"] / cp
  }'
}

for store in $STORES; do
  case $store in
    file)
      row file "file://$WORK/objects"
      ;;
    s3)
      moto=$(command -v moto_server || true)
      [[ -n $moto ]] || moto=${SLUICE_MOTO_SERVER:-target/moto-venv/bin/moto_server}
      [[ -x $moto ]] || die "moto_server not found (pip install 'moto[server]')"
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      "$moto" -H 127.0.0.1 -p "$port" > "$WORK/moto.log" 2>&1 &
      MOTO_PID=$!
      for _ in $(seq 100); do curl -s -o /dev/null -X PUT "http://127.0.0.1:$port/bench" && break; sleep 0.1; done
      AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=test \
        AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 row "s3 (moto)" "s3://bench/ckpt"
      ;;
    *) die "unknown store $store" ;;
  esac
done
