#!/bin/bash
# Issue 9's regression check: the previous commit's pvnet (A) against this
# one (B), interleaved A B A B in one boosted autogroup, on the two figures
# the issue names: PVP poll mode 64 B / queue 256 (weight 256) and the
# relay's 1-flow iperf3 throughput (napi and napi+direct). Root.
#   compare_prev.sh PVNET_A PVNET_B OUTDIR [ROUNDS]
set -euo pipefail
A=$1 B=$2 OUT=$3 ROUNDS=${4:-5}
mkdir -p "$OUT"
echo -20 > /proc/self/autogroup 2>/dev/null || true
for i in $(seq 1 "$ROUNDS"); do
    for tag in A B; do
        bin=$A; [ "$tag" = B ] && bin=$B
        "$bin" bench pvp --mode poll --frame-bytes 64 --queue-sizes 256 --weights 256 \
            --repeat 1 --seconds 2 --warmup 0.5 --json "$OUT/pvp-$tag-$i.json" >/dev/null
        "$bin" bench relay --flows 1 --variants napi napi+direct --skip-veth --skip-plain \
            --skip-latency --repeat 1 --seconds 5 --json "$OUT/relay-$tag-$i.json" >/dev/null
    done
done
