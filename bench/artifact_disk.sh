#!/usr/bin/env bash
# Disk use of one artifact on one machine: a step writes a 100 MB output, one consumer reads
# it (and sleeps a few seconds, to be measured while it runs). Prints `du -sk` of the home
# while the consumer runs and after the run, and `df` of the filesystem (which, unlike `du`,
# counts blocks shared by reflinks once). Results in docs/housekeeping.md.
#
# Run from the repository's root:   bash bench/artifact_disk.sh
# Knobs (environment): WHERE=DIR (the filesystem to measure on; default a temporary folder)
#                      SLUICE=PATH (default target/debug/sluice; `cargo build --workspace`)
set -euo pipefail
cd "$(dirname "$0")/.."

SLUICE=${SLUICE:-target/debug/sluice}
WHERE=${WHERE:-$(mktemp -d)}
work=$(mktemp -d "$WHERE/artifact-disk.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/big.yaml" <<'YAML'
apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: big}
spec:
  steps:
    - name: make
      outputs: [blob]
      run: head -c 100000000 /dev/urandom > $SLUICE_OUTPUT_DIR/blob
    - name: use
      needs: [make]
      run: wc -c {{steps.make.outputs.blob}} && touch {{steps.make.outputs.blob}}.seen && sleep 4
YAML
home="$work/home"
mkdir -p "$home"
used() { df --output=used -k "$home" | tail -1; }
before=$(used)
SLUICE_HOME="$home" "$SLUICE" run "$work/big.yaml" > /dev/null 2>&1 &
engine=$!
until ls "$home"/attempts/*/use.1/inputs/make/blob.seen > /dev/null 2>&1; do sleep 0.2; done
during_du=$(du -sk "$home" | cut -f1)
during_df=$(( $(used) - before ))
wait "$engine"
after_du=$(du -sk "$home" | cut -f1)
after_df=$(( $(used) - before ))
echo "| filesystem | du while the consumer runs | df while | du after the run | df after |"
echo "| --- | --- | --- | --- | --- |"
echo "| $(df --output=fstype "$home" | tail -1) | ${during_du} KiB | +${during_df} KiB | ${after_du} KiB | +${after_df} KiB |"
