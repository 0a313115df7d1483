#!/usr/bin/env bash
# ping_test.sh: boot the tiny guest (tools/qemu-guest) under QEMU/TCG with a virtio-net-pci NIC
# on a vhost-user socket served by BACKEND, let it ping the backend's echo address, and pass when
# every ping came back and the guest kernel logged no virtio error.
#
#   ping_test.sh --backend 'CMD' [options]
#     --backend CMD     shell command of the vhost-user backend; {sock} is replaced by the socket
#                       path (e.g. "pvnet serve --vhost-user {sock} --echo 192.0.2.1")
#     --backend1 CMD    a second NIC (eth1, 198.51.100.2/24 pinging 198.51.100.1) on its own
#                       socket, served by CMD ({sock} is that socket)
#     --responder A/L   a second guest, its one NIC on socket {sock1} of --backend, at address
#                       A/L: it answers the first guest's pings (set --peer to A) and is booted
#                       first, until it is up
#     --backend-final REGEX  (repeatable) once the guests are done, the backend is stopped
#                       (SIGTERM) and its output must match REGEX (e.g. its final counters)
#     --ready REGEX     wait for REGEX in the backend's output before starting QEMU (default: wait
#                       for the socket to appear)
#     --qemu-server     QEMU listens on the sockets (server=on,wait=off), the backends connect
#     --guest-dir DIR   where build-guest.sh keeps the kernel and initramfs (default
#                       ${PVNET_GUEST_DIR:-/tmp/pvnet-qemu-guest}); reused across runs
#     --ip A/L --peer A (192.0.2.2/24, 192.0.2.1)   --count N (5)  --size N (56)  --mtu N
#     --interval S      between the guest's pings (0.2; with --restarts 0.1)
#     --peer-mac MAC    a static neighbour entry for the peer (a backend that answers no ARP)
#     --mrg-rxbuf on|off  --host-mtu N  --queues N (mq=on, -smp N)  --device-opts OPTS
#     --check-queues    with --queues N: the guest pings from each CPU, and backend 0 (pvnet
#                       serve) must report, in its final lines, tx and rx packets on every pair
#     --netns-tap ADDR/LEN  a namespace of this run with the backend's tap: {netns} and {tap} in
#                       the backend command name them; once the backend is ready the tap gets
#                       ADDR/LEN and goes up, so the guest pings the namespace's kernel
#     --http-bytes N    with --netns-tap: tests/qemu/http_peer.py in the namespace serves N random
#                       bytes; the guest fetches them and posts them back over TCP, and both md5s
#                       must match the peer's
#     --hugepages       guest memory in 2 MiB hugepages (memory-backend-file on a hugetlbfs mount
#                       of this run; nr_hugepages raised if needed and restored afterwards)
#     --restarts SIG,SIG...  reconnect: the guest pings its peer every 0.1 s for the whole run
#                       (pvnet.until) while backend 0 is stopped with each signal in turn (KILL,
#                       TERM, ...) and started again; QEMU as client gets reconnect=1. Before
#                       each stop and after each restart the guest must have had a second of
#                       replies (within --resume-timeout S, 30, of the restart); per restart one
#                       line "reconnect: role=qemu-client|qemu-server n=N kill=SIGX gap_ms=G
#                       lost=L dup=D" (G: from the signal to the first reply after the restart,
#                       host clock on console lines; L: pings never answered; D: duplicates)
#     --timeout S       whole guest run (180)       --keep    keep the run's logs
set -euo pipefail
export LC_ALL=C  # "." in $EPOCHREALTIME, for awk

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backends=() ready="" qemu_server=0 guest_dir=${PVNET_GUEST_DIR:-/tmp/pvnet-qemu-guest}
ip=192.0.2.2/24 peer=192.0.2.1 peer_mac="" count=5 size=56 mtu="" mrg="" host_mtu="" queues=1 devopts=""
timeout_s=180 keep=0 netns_tap="" http_bytes=0 check_queues=0 hugepages=0 responder="" finals=()
restarts="" resume_s=30 interval=""
while (($#)); do
    case $1 in
        --backend) backends[0]=$2; shift ;;
        --backend1) backends[1]=$2; shift ;;
        --responder) responder=$2; shift ;;
        --backend-final) finals+=("$2"); shift ;;
        --ready) ready=$2; shift ;;
        --qemu-server) qemu_server=1 ;;
        --guest-dir) guest_dir=$2; shift ;;
        --ip) ip=$2; shift ;;
        --peer) peer=$2; shift ;;
        --peer-mac) peer_mac=$2; shift ;;
        --count) count=$2; shift ;;
        --size) size=$2; shift ;;
        --interval) interval=$2; shift ;;
        --mtu) mtu=$2; shift ;;
        --mrg-rxbuf) mrg=$2; shift ;;
        --host-mtu) host_mtu=$2; shift ;;
        --queues) queues=$2; shift ;;
        --device-opts) devopts=$2; shift ;;
        --netns-tap) netns_tap=$2; shift ;;
        --http-bytes) http_bytes=$2; shift ;;
        --check-queues) check_queues=1 ;;
        --hugepages) hugepages=1 ;;
        --restarts) restarts=$2; shift ;;
        --resume-timeout) resume_s=$2; shift ;;
        --timeout) timeout_s=$2; shift ;;
        --keep) keep=1 ;;
        *) echo "ping_test: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[[ -n ${backends[0]:-} ]] || { echo "ping_test: --backend is required" >&2; exit 2; }
nics=${#backends[@]}
if [[ -n $responder ]] && ((nics > 1 || qemu_server)); then
    echo "ping_test: --responder takes neither --backend1 nor --qemu-server" >&2; exit 2
fi
if [[ -n $restarts ]] && { ((nics > 1 || check_queues || http_bytes)) || [[ -n $responder ]]; }; then
    echo "ping_test: --restarts takes one NIC, and no --responder, --check-queues or --http-bytes" >&2
    exit 2
fi

"$root/tools/qemu-guest/build-guest.sh" "$guest_dir"

run=$(mktemp -d /tmp/pvnet-qemu.XXXXXX)
backend_pids=() backend_logs=() backend_starts=() qemu_pid= responder_pid= http_pid= stamp_pid=
netns=pvq$$ tap=pvq$$t
nr_huge=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages old_nr_huge=
cleanup() {
    # Every child was started with setsid: its process group is its alone.
    local pid
    for pid in $qemu_pid $responder_pid; do kill -- -"$pid" 2>/dev/null || true; done
    for pid in "${backend_pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
    ((${#backend_pids[@]})) && sleep 0.5
    for pid in "${backend_pids[@]}"; do kill -9 -- -"$pid" 2>/dev/null || true; done
    [[ -n $stamp_pid ]] && kill "$stamp_pid" 2>/dev/null || true
    [[ -n $http_pid ]] && kill "$http_pid" 2>/dev/null || true
    [[ -n $netns_tap ]] && ip netns del "$netns" 2>/dev/null || true
    if ((hugepages)); then
        umount "$run/huge" 2>/dev/null || true
        [[ -n $old_nr_huge ]] && echo "$old_nr_huge" >"$nr_huge" || true
    fi
    if ((keep)); then echo "ping_test: logs kept in $run"; else rm -rf "$run"; fi
}
trap cleanup EXIT
fail() {
    echo "ping_test: FAIL: $*"
    local n
    for ((n = 0; n < nics; n++)); do
        echo "---- backend $n log (${backend_logs[n]:-})"; tail -n 40 "${backend_logs[n]:-/dev/null}" 2>/dev/null || true
    done
    local g
    for g in responder guest; do
        [[ -e $run/$g.log ]] || continue
        echo "---- $g log ($run/$g.log)"; tail -n 80 "$run/$g.log"
    done
    exit 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

sock() { echo "$run/vhost$1.sock"; }
start_backend() {  # N
    local cmd=${backends[$1]//\{sock\}/$(sock "$1")}
    cmd=${cmd//\{sock1\}/$(sock 1)}
    cmd=${cmd//\{netns\}/$netns}
    cmd=${cmd//\{tap\}/$tap}
    # stdin is a FIFO that stays open (fd 3): an interactive backend (testpmd -i) waits on it.
    [[ -p $run/backend.in ]] || { mkfifo "$run/backend.in"; exec 3<>"$run/backend.in"; }
    # Each start its own log: backend0.log, then (--restarts) backend0.restart1.log, ...
    local k=${backend_starts[$1]:-0}
    backend_starts[$1]=$((k + 1))
    backend_logs[$1]=$run/backend$1.log
    ((k)) && backend_logs[$1]=$run/backend$1.restart$k.log
    echo "ping_test: backend $1: $cmd"
    setsid bash -c "exec $cmd" <&3 >"${backend_logs[$1]}" 2>&1 &
    backend_pids[$1]=$!
}
wait_backend_ready() {  # N
    local t0 i log=${backend_logs[$1]}
    t0=$(now)
    for ((i = 0; i < 300; i++)); do
        kill -0 "${backend_pids[$1]}" 2>/dev/null || fail "backend $1 exited before it was ready"
        if [[ -n $ready ]]; then
            grep -Eq -- "$ready" "$log" && break
        elif ((qemu_server)); then
            break  # a client backend has nothing to show; the guest's ping tells
        else
            [[ -S $(sock "$1") ]] && break
        fi
        sleep 0.1
    done
    ((i < 300)) || fail "backend $1 not ready within 30 s"
    echo "ping_test: backend $1 ready after $(elapsed "$t0") s"
}

# add_nic ARRAY N SOCK MAC: the QEMU arguments of NIC n (eth$n in the guest, by PCI slot order)
# on socket SOCK, appended to ARRAY.
add_nic() {
    local -n out=$1
    local n=$2 dev netdev chardev
    # QEMU 7.2 under TCG segfaults when the guest enables MSI-X on a vhost-user NIC: INTx only.
    dev=virtio-net-pci,netdev=n$n,mac=$4,vectors=0
    [[ -n $mrg ]] && dev+=,mrg_rxbuf=$mrg
    [[ -n $host_mtu ]] && dev+=,host_mtu=$host_mtu
    netdev=vhost-user,id=n$n,chardev=c$n
    if ((queues > 1)); then
        dev+=,mq=on
        netdev+=,queues=$queues
    fi
    [[ -n $devopts ]] && dev+=,$devopts
    chardev=socket,id=c$n,path=$3
    if ((qemu_server)); then
        chardev+=,server=on,wait=off
    elif [[ -n $restarts ]]; then
        chardev+=,reconnect=1  # seconds between attempts once the backend has gone
    fi
    out+=(-chardev "$chardev" -netdev "$netdev" -device "$dev")
}
memdev=memory-backend-memfd,id=mem,size=256M,share=on
if ((hugepages)); then
    # 128 pages of 2 MiB for each guest's 256 MiB, on a mount of our own.
    need=$((128 * (${responder:+1} + 1)))
    free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
    if ((free < need)); then
        old_nr_huge=$(cat "$nr_huge")
        echo $((old_nr_huge + need - free)) >"$nr_huge"
        free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
        ((free >= need)) || fail "only $free free 2 MiB hugepages after raising nr_hugepages"
    fi
    mkdir -p "$run/huge"
    mount -t hugetlbfs -o pagesize=2M none "$run/huge"
    memdev=memory-backend-file,id=mem,size=256M,share=on,mem-path=$run/huge
fi
# qemu_cmd ARRAY APPEND NIC-ARGS...: a guest's QEMU command line into ARRAY.
qemu_cmd() {
    local -n cmd=$1
    cmd=(qemu-system-x86_64 -accel tcg -m 256 -smp "$queues" -nodefaults -no-user-config
         -kernel "$guest_dir/vmlinux" -initrd "$guest_dir/initramfs.cpio.gz" -append "$2"
         -display none -serial stdio -no-reboot
         -object "$memdev" -numa node,memdev=mem
         "${@:3}")
}
common="console=ttyS0 no_timer_check panic=-1 quiet loglevel=4 pvnet.count=$count pvnet.size=$size"
[[ -n $mtu ]] && common+=" pvnet.mtu=$mtu"
[[ -z $interval && -n $restarts ]] && interval=0.1
[[ -n $interval ]] && common+=" pvnet.interval=$interval"

nic_args=()
for ((n = 0; n < nics; n++)); do add_nic nic_args $n "$(sock $n)" 52:54:00:12:34:5$n; done
append="$common pvnet.ip=$ip pvnet.peer=$peer"
((nics > 1)) && append+=" pvnet.ip1=198.51.100.2/24 pvnet.peer1=198.51.100.1"
((http_bytes)) && append+=" pvnet.http=http://$peer:8080"
((check_queues)) && append+=" pvnet.percpu=1"
[[ -n $restarts ]] && append+=" pvnet.until=$timeout_s"
[[ -n $peer_mac ]] && append+=" pvnet.peermac=$peer_mac"
qemu_cmd qemu "$append" "${nic_args[@]}"
if [[ -n $responder ]]; then
    responder_nic=()
    add_nic responder_nic 0 "$(sock 1)" 52:54:00:12:35:50
    # It stays until it has answered every ping, at most the whole run.
    qemu_cmd responder_qemu "$common pvnet.ip=$responder pvnet.stay=$timeout_s" \
        "${responder_nic[@]}"
fi

# The console's lines into NAME.log, and each with the host's clock into NAME.stamps.
stamp_console() {  # NAME
    local l
    while IFS= read -r l || [[ -n $l ]]; do
        l=${l%$'\r'}
        printf '%s\n' "$l"
        printf '%s %s\n' "$EPOCHREALTIME" "$l" >&6
    done >"$run/$1.log" 6>"$run/$1.stamps"
}
start_guest() {  # NAME COMMAND...: the pid in guest_pid
    echo "ping_test: $1: ${*:2}"
    if [[ -n $restarts && $1 == guest ]]; then
        # The serial console both ways: the harness writes "stop" to its input (fd 4, held
        # open), and stamps its output as it comes.
        mkfifo "$run/console.in" "$run/console.out"
        exec 4<>"$run/console.in"
        stamp_console "$1" <"$run/console.out" &
        stamp_pid=$!
        setsid timeout -k 5 "$timeout_s" "${@:2}" <&4 >"$run/console.out" 2>&1 &
    else
        setsid timeout -k 5 "$timeout_s" "${@:2}" </dev/null >"$run/$1.log" 2>&1 &
    fi
    guest_pid=$!
}
start_qemu() {
    if [[ -n $responder ]]; then
        start_guest responder "${responder_qemu[@]}"
        responder_pid=$guest_pid
        local t0 i
        t0=$(now)
        for ((i = 0; i < timeout_s * 10; i++)); do
            grep -aq '^PVNET-READY' "$run/responder.log" && break
            kill -0 "$responder_pid" 2>/dev/null || fail "responder guest exited before it was up"
            sleep 0.1
        done
        ((i < timeout_s * 10)) || fail "responder guest not up within $timeout_s s"
        echo "ping_test: responder up after $(elapsed "$t0") s"
    fi
    start_guest guest "${qemu[@]}"
    qemu_pid=$guest_pid
}

if [[ -n $netns_tap ]]; then
    ip netns add "$netns"
    ip -n "$netns" link set lo up
    if ((http_bytes)); then
        ip netns exec "$netns" python3 "$here/http_peer.py" 0.0.0.0 8080 "$http_bytes" \
            >"$run/http.out" 2>"$run/http.log" &
        http_pid=$!
    fi
fi
# The tap exists once its backend is ready: address it in the namespace.
address_tap() {
    [[ -n $netns_tap ]] || return 0
    ip -n "$netns" addr add "$netns_tap" dev "$tap" || fail "no tap $tap in $netns"
    ip -n "$netns" link set "$tap" up
}

t_start=$(now)
if ((qemu_server)); then
    start_qemu
    for ((n = 0; n < nics; n++)); do
        for ((i = 0; i < 100; i++)); do [[ -S $(sock $n) ]] && break; sleep 0.1; done
        [[ -S $(sock $n) ]] || fail "QEMU did not create $(sock $n)"
        start_backend $n
        wait_backend_ready $n
    done
    address_tap
else
    for ((n = 0; n < nics; n++)); do start_backend $n; wait_backend_ready $n; done
    address_tap
    start_qemu
fi
t_qemu=$(now)

# ---- --restarts ------------------------------------------------------------------------------
# replies_after T: "FIRST LAST" host times of the guest's ping replies stamped after T (none: "").
replies_after() {
    awk -v t="$1" '$2 == "PVNET-PING" && / bytes from / && $1 > t { if (f == "") f = $1; l = $1 }
                   END { if (f != "") print f, l }' "$run/guest.stamps"
}
# wait_replies T S WHAT: until the replies after T span a second (traffic flows again), at most
# S seconds; the first reply's time in first_reply.
wait_replies() {
    local i r
    for ((i = 0; i < $2 * 20; i++)); do
        r=$(replies_after "$1")
        if [[ -n $r ]] && awk -v f="${r% *}" -v l="${r#* }" 'BEGIN { exit !(l - f >= 1) }'; then
            first_reply=${r% *}
            return 0
        fi
        kill -0 "$qemu_pid" 2>/dev/null || fail "guest exited while waiting for $3"
        sleep 0.05
    done
    fail "no second of ping replies within $2 s of $3"
}
restart_times=() restart_sigs=()
restart_backend0() {
    local sig n=0 i pid t_kill t_start
    wait_replies 0 "$timeout_s" "the guest's start"
    echo "ping_test: guest pinging after $(elapsed "$t_qemu") s"
    for sig in ${restarts//,/ }; do
        n=$((n + 1))
        pid=${backend_pids[0]}
        disown "$pid"  # no "Killed" notice from bash; it still reaps it
        t_kill=$EPOCHREALTIME
        kill -"$sig" -- -"$pid" || fail "restart $n: cannot send SIG$sig to backend 0"
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        ((i < 100)) || fail "restart $n: backend 0 still runs 5 s after SIG$sig"
        t_start=$EPOCHREALTIME
        start_backend 0
        wait_backend_ready 0
        wait_replies "$t_start" "$resume_s" "restart $n (SIG$sig)"
        echo "ping_test: restart $n (SIG$sig): replies again $(awk -v a="$t_kill" -v b="$first_reply" 'BEGIN { printf "%.0f", (b - a) * 1000 }') ms after the signal"
        restart_sigs+=("SIG$sig")
        restart_times+=("$t_kill $t_start")
    done
    echo stop >&4
}
# One "reconnect:" line per restart from the stamped console: the gap from the signal to the
# first reply stamped after the new backend started (and newer than any before the signal);
# lost, the sequence numbers between the last reply before this signal and the last before the
# next one (or the end) never answered. The stamps are the host's clock as each console line
# arrives: at 10 lines a second the emulated UART keeps up (lines 100 +- 10 ms apart); at
# hundreds a second it lags, and the gaps with it.
report_restarts() {
    local role=qemu-client
    ((qemu_server)) && role=qemu-server
    awk -v role="$role" -v sigs="${restart_sigs[*]}" -v times="${restart_times[*]}" '
        $2 == "PVNET-PING" && / bytes from / && match($0, /seq=[0-9]+/) {
            s = substr($0, RSTART + 4, RLENGTH - 4) + 0
            if (/DUP!/) { dups[s]++; next }
            if (!(s in at)) at[s] = $1
            if (s > maxs) maxs = s
            t[++nr] = $1; q[nr] = s
        }
        END {
            n = split(sigs, sig, " "); split(times, tm, " ")
            for (k = 1; k <= n; k++) { kill[k] = tm[2 * k - 1]; start[k] = tm[2 * k] }
            for (k = 1; k <= n; k++) {
                before[k] = -1
                for (i = 1; i <= nr; i++) if (t[i] <= kill[k] && q[i] > before[k]) before[k] = q[i]
            }
            before[n + 1] = maxs
            for (k = 1; k <= n; k++) {
                first = ""
                for (i = 1; i <= nr; i++) if (t[i] > start[k] && q[i] > before[k]) { first = t[i]; break }
                lost = 0; dup = 0
                for (s = before[k] + 1; s <= before[k + 1]; s++) {
                    if (!(s in at)) lost++
                    if (s in dups) dup += dups[s]
                }
                printf "reconnect: role=%s n=%d kill=%s gap_ms=%.0f lost=%d dup=%d\n",
                       role, k, sig[k], (first - kill[k]) * 1000, lost, dup
            }
        }' "$run/guest.stamps"
}
[[ -n $restarts ]] && restart_backend0

qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=
if [[ -n $stamp_pid ]]; then
    wait "$stamp_pid" || true
    stamp_pid=
fi
guest_s=$(elapsed "$t_qemu")
((qemu_rc == 124 || qemu_rc == 137)) && fail "guest did not finish within $timeout_s s"

if [[ -n $responder ]]; then
    # It powers off once it has sent every reply; one that missed some waits for its deadline.
    for ((i = 0; i < 150; i++)); do kill -0 "$responder_pid" 2>/dev/null || break; sleep 0.1; done
    responder_rc=0
    if ((i == 150)); then kill -- -"$responder_pid" 2>/dev/null || true; fi
    wait "$responder_pid" || responder_rc=$?
    responder_pid=
fi

check_guest_log() {  # NAME QEMU-EXIT
    local log=$run/$1.log bad
    grep -a '^PVNET-' "$log" | grep -v '^PVNET-PING' | sed "s/^/$1: /" || true
    grep -aq '^PVNET-DONE' "$log" || fail "$1 did not reach PVNET-DONE (qemu exit $2)"
    # Signs that the device broke the virtio contract (see virtio_ring.c's BAD_RING messages).
    # QEMU's own stderr (its lines start with its name) says what it saw of the backend.
    bad=$(grep -av '^qemu-system' "$log" |
          grep -aEi 'is not a head|unexpected|id [0-9]+ out of range|virtio.*(reset|broken)|NEEDS_RESET|NETDEV WATCHDOG|Kernel panic|BUG:|Call Trace' || true)
    [[ -z $bad ]] || fail "$1 logged virtio errors: $bad"
    if grep -aq '^PVNET-ERROR' "$log"; then
        fail "$1: $(grep -a '^PVNET-ERROR' "$log" | tr '\n' ' ')"
    fi
}
check_guest_log guest "$qemu_rc"
log=$run/guest.log
if [[ -n $responder ]]; then
    check_guest_log responder "$responder_rc"
    result=$(grep -a '^PVNET-RESULT stay dev=eth0 ' "$run/responder.log" || true)
    replies=$(sed -n 's/.* echo_replies=\([0-9]*\).*/\1/p' <<<"$result")
    ((${replies:-0} >= count)) || fail "responder sent ${replies:-0} echo replies, want $count"
fi
if [[ -n $restarts ]]; then
    result=$(grep -a "^PVNET-RESULT ping dev=eth0 " "$log" || true)
    [[ $result == *" stop=stop"* ]] || fail "the guest did not ping until stopped: ${result:-no PVNET-RESULT}"
    sed -n 's/^qemu-system[^:]*: /ping_test: QEMU: /p' "$log" | sort | uniq -c
    report_restarts
fi
counted_nics=$nics
[[ -n $restarts ]] && counted_nics=0  # every ping answered: not with restarts
for ((n = 0; n < counted_nics; n++)); do
    result=$(grep -a "^PVNET-RESULT ping dev=eth$n " "$log" || true)
    [[ -n $result ]] || fail "no PVNET-RESULT line for eth$n"
    sent=$(sed -n 's/.* sent=\([0-9]*\).*/\1/p' <<<"$result")
    received=$(sed -n 's/.* received=\([0-9]*\).*/\1/p' <<<"$result")
    want=$count
    ((check_queues)) && want=$((count * queues))
    [[ $sent == "$want" && $received == "$want" ]] ||
        fail "eth$n sent=$sent received=$received, want $want/$want"
    if [[ -n $mtu ]]; then
        got=$(sed -n 's/.* mtu=\([0-9]*\).*/\1/p' <<<"$result")
        [[ $got == "$mtu" ]] || fail "eth$n mtu=$got, want $mtu"
    fi
    if ((queues > 1)); then
        info=$(grep -a "^PVNET-INFO dev=eth$n " "$log" || true)
        [[ $info == *" queues=$queues "* ]] || fail "eth$n has not $queues rx queues: $info"
    fi
done
# SIGTERM: pvnet serve stops its rings, prints its final counters and exits.
if ((check_queues || ${#finals[@]})); then
    kill -- -"${backend_pids[0]}" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "${backend_pids[0]}" 2>/dev/null || break
        sleep 0.1
    done
    ((i < 100)) || fail "backend 0 did not exit within 10 s of SIGTERM"
fi
for re in "${finals[@]}"; do
    grep -Eq -- "$re" "${backend_logs[0]}" || fail "backend 0's output does not match: $re"
done
((${#finals[@]})) && echo "ping_test: backend 0's output matches ${#finals[@]} pattern(s)"
if ((check_queues)); then
    for ((q = 0; q < queues; q++)); do
        line=$(grep "^final dev=0 .* q=$q " "${backend_logs[0]}" || true)
        tx=$(sed -n 's/.* tx_pkts=\([0-9]*\) .*/\1/p' <<<"$line")
        rx=$(sed -n 's/.* rx_pkts=\([0-9]*\) .*/\1/p' <<<"$line")
        echo "ping_test: backend pair $q: tx_pkts=${tx:-?} rx_pkts=${rx:-?}"
        ((${tx:-0} > 0 && ${rx:-0} > 0)) || fail "queue pair $q carried no traffic (tx=${tx:-?} rx=${rx:-?})"
    done
fi
if ((http_bytes)); then
    md5=$(sed -n 's/^blob md5=\([0-9a-f]*\) .*/\1/p' "$run/http.out")
    [[ -n $md5 ]] || fail "http_peer.py did not start: $(cat "$run/http.log")"
    fetch=$(grep -a '^PVNET-RESULT fetch ' "$log" || true)
    upload=$(grep -a '^PVNET-RESULT upload ' "$log" || true)
    echo "ping_test: peer's blob md5=$md5 bytes=$http_bytes; guest: $fetch; $upload"
    [[ $fetch == *" md5=$md5 bytes=$http_bytes"* ]] || fail "guest fetched something else: $fetch"
    [[ $upload == *" md5=$md5 bytes=$http_bytes"* ]] || fail "peer received something else: $upload"
fi
if [[ -n $restarts ]]; then
    echo "ping_test: PASS: ${#restart_sigs[@]} restart(s) (${restart_sigs[*]}), replies after each, $(sed -n 's/.* sent=\([0-9]*\) received=\([0-9]*\).*/\2 of \1 pings answered/p' <<<"$result"), guest run $guest_s s, total $(elapsed "$t_start") s"
else
    echo "ping_test: PASS: $nics NIC(s)${responder:+ to a responder guest}, $want/$want pings each, guest run $guest_s s, total $(elapsed "$t_start") s"
fi
