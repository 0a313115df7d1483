#!/bin/bash
# Every experiment the docs show, with the options their tables use: JSON,
# the text tables (<name>.txt) and plots into OUT. `make bench` calls it, then
# renders docs/ from OUT with tools/render_tables.py.
#
#   tools/bench.sh OUT [quick]      quick: one short round of each, a smoke check
#
# Each experiment runs in its own session, so pvnet's boost_autogroup() gives
# it its own autogroup at nice -20. Root: testpmd needs hugepages, the relay
# namespaces and taps.
set -euo pipefail
out=${1:?usage: tools/bench.sh OUT [quick]}
quick=${2:-}
pvnet=${PVNET:-./build/release/src/app/pvnet}
mkdir -p "$out"

# run NAME ARGS... [::full FULL-ONLY...] [::quick QUICK-ONLY...]
run() {
    local name=$1; shift
    local args=() part=common
    for a in "$@"; do
        case $a in
            ::full) part=full ;;
            ::quick) part=quick ;;
            *) if [ $part = common ] || { [ $part = quick ] && [ -n "$quick" ]; } ||
                  { [ $part = full ] && [ -z "$quick" ]; }; then args+=("$a"); fi ;;
        esac
    done
    echo "=== $name: pvnet ${args[*]}" >&2
    local t0=$SECONDS
    setsid -w "$pvnet" "${args[@]}" > "$out/$name.txt"
    echo "=== $name: $((SECONDS - t0)) s" >&2
}

q1=(--repeat 1 --seconds 0.2)

# Seed 001: the PVP table (event mode), poll mode against testpmd, fairness.
run pvp-event bench pvp --json "$out/pvp-event.json" --plot "$out/pvp-event.png" \
    ::quick "${q1[@]}" --frame-bytes 64 --queue-sizes 256 --weights baseline,256
run pvp-poll bench pvp --mode poll --frame-bytes 64 --weights baseline,256 --testpmd \
    --json "$out/pvp-poll.json" --plot "$out/pvp-poll.png" ::quick "${q1[@]}" --queue-sizes 256
run fairness bench fairness --json "$out/fairness.json" ::quick "${q1[@]}"

# Seed 000: stream and RR at a fixed amount of work (Gcycles per run), the
# open-loop light load, busy polling against sleeping, the at-rx sweep.
run stream bench stream --seconds 10 --json "$out/stream.json" \
    ::full --work-gbytes 4 ::quick --repeat 1 --flows 1 --work-gbytes 0.2
run rr bench rr --seconds 10 --json "$out/rr.json" \
    ::full --work-trans 20000 ::quick --repeat 1 --flows 1 --work-trans 2000
run rr-paced bench rr --flows 1 --rr-rate 1000 --json "$out/rr-paced.json" \
    ::full --seconds 2 ::quick "${q1[@]}"
run rr-busy bench rr --flows 1 --variants upstream,napi --busy-sweep 0,50 \
    --json "$out/rr-busy.json" ::quick "${q1[@]}"
for w in 256 8; do
    for s in 0 500; do
        run "atrx-w$w-s$s" bench stream --flows 1 --variants napi,napi+at-rx --tx-weight "$w" \
            --server-ns "$s" --json "$out/atrx-w$w-s$s.json" ::quick "${q1[@]}"
    done
done

# Seed 002: the relay between two namespaces (veth, plain tun relay, rings).
run relay bench relay --json "$out/relay.json" --plot "$out/relay" \
    ::full --repeat 3 --ping-count 50 ::quick --repeat 1 --flows 1 --seconds 2 --latency-seconds 1 --ping-count 10

# Seed 003: default XPS against symmetric queues, in one process and through
# the relay (real sockets); rates found by probing the default variant.
run xps bench xps --json "$out/xps.json" \
    ::full --threads 4,8 --repeat 3 --seconds 1 ::quick --threads 4 --rates 50000 "${q1[@]}"
run xps-relay bench xps --transport relay --json "$out/xps-relay.json" \
    ::full --threads 4,8 --repeat 3 --seconds 1 ::quick --threads 4 --rates 20000 "${q1[@]}"

# Seed 004: 1-4 guest processes against one grant backend, map / copy /
# persistent grants, tx then rx.
run grants bench grants --json "$out/grants.json" --plot "$out/grants.png" \
    ::full --repeat 3 --seconds 2 ::quick --repeat 1 --seconds 0.3 --guests 1,2

# DPDK's virtio-user against testpmd's vhost and pvnet serve (poll, event), the client with
# in_order=1 (its default: VIRTIO_F_IN_ORDER, offered by both) and in_order=0 in each round.
run vhost-user bench vhost-user --json "$out/vhost-user.json" \
    ::full --repeat 5 ::quick --repeat 1 --seconds 0.3 --warmup 0.3 --frame-bytes 64 --queue-sizes 256

# The split ring alone (Google Benchmark): 5 repetitions, randomly interleaved.
micro=${MICROBENCH:-./build/release/src/bench/micro/pvnet-microbench}
reps=5; [ -z "$quick" ] || reps=1
echo "=== microbench: $micro, $reps repetitions" >&2
setsid -w bash -c 'echo -20 > /proc/self/autogroup; exec "$@"' _ "$micro" \
    --benchmark_repetitions=$reps --benchmark_report_aggregates_only=false \
    --benchmark_display_aggregates_only=true --benchmark_enable_random_interleaving=true \
    ${quick:+--benchmark_min_time=0.01} \
    --benchmark_context=commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- || echo -dirty)" \
    --benchmark_out="$out/microbench.json" --benchmark_out_format=json > "$out/microbench.txt"

echo "bench: every experiment written to $out" >&2
