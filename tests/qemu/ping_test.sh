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
#     --timeout S       whole guest run (180)       --keep    keep the run's logs
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backends=() ready="" qemu_server=0 guest_dir=${PVNET_GUEST_DIR:-/tmp/pvnet-qemu-guest}
ip=192.0.2.2/24 peer=192.0.2.1 peer_mac="" count=5 size=56 mtu="" mrg="" host_mtu="" queues=1 devopts=""
timeout_s=180 keep=0 netns_tap="" http_bytes=0 check_queues=0 hugepages=0 responder="" finals=()
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
        --mtu) mtu=$2; shift ;;
        --mrg-rxbuf) mrg=$2; shift ;;
        --host-mtu) host_mtu=$2; shift ;;
        --queues) queues=$2; shift ;;
        --device-opts) devopts=$2; shift ;;
        --netns-tap) netns_tap=$2; shift ;;
        --http-bytes) http_bytes=$2; shift ;;
        --check-queues) check_queues=1 ;;
        --hugepages) hugepages=1 ;;
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

"$root/tools/qemu-guest/build-guest.sh" "$guest_dir"

run=$(mktemp -d /tmp/pvnet-qemu.XXXXXX)
backend_pids=() qemu_pid= responder_pid= http_pid=
netns=pvq$$ tap=pvq$$t
nr_huge=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages old_nr_huge=
cleanup() {
    # Every child was started with setsid: its process group is its alone.
    local pid
    for pid in $qemu_pid $responder_pid; do kill -- -"$pid" 2>/dev/null || true; done
    for pid in "${backend_pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
    ((${#backend_pids[@]})) && sleep 0.5
    for pid in "${backend_pids[@]}"; do kill -9 -- -"$pid" 2>/dev/null || true; done
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
        echo "---- backend $n log ($run/backend$n.log)"; tail -n 40 "$run/backend$n.log" 2>/dev/null || true
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
    echo "ping_test: backend $1: $cmd"
    setsid bash -c "exec $cmd" <&3 >"$run/backend$1.log" 2>&1 &
    backend_pids[$1]=$!
}
wait_backend_ready() {  # N
    local t0 i log=$run/backend$1.log
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
    ((qemu_server)) && chardev+=,server=on,wait=off
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

nic_args=()
for ((n = 0; n < nics; n++)); do add_nic nic_args $n "$(sock $n)" 52:54:00:12:34:5$n; done
append="$common pvnet.ip=$ip pvnet.peer=$peer"
((nics > 1)) && append+=" pvnet.ip1=198.51.100.2/24 pvnet.peer1=198.51.100.1"
((http_bytes)) && append+=" pvnet.http=http://$peer:8080"
((check_queues)) && append+=" pvnet.percpu=1"
[[ -n $peer_mac ]] && append+=" pvnet.peermac=$peer_mac"
qemu_cmd qemu "$append" "${nic_args[@]}"
if [[ -n $responder ]]; then
    responder_nic=()
    add_nic responder_nic 0 "$(sock 1)" 52:54:00:12:35:50
    # It stays until it has answered every ping, at most the whole run.
    qemu_cmd responder_qemu "$common pvnet.ip=$responder pvnet.stay=$timeout_s" \
        "${responder_nic[@]}"
fi

start_guest() {  # NAME COMMAND...: the pid in guest_pid
    echo "ping_test: $1: ${*:2}"
    setsid timeout -k 5 "$timeout_s" "${@:2}" </dev/null >"$run/$1.log" 2>&1 &
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
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=
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
    bad=$(grep -aEi 'is not a head|unexpected used|id [0-9]+ out of range|virtio.*(reset|broken)|NETDEV WATCHDOG|Kernel panic|BUG:|Call Trace' "$log" || true)
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
for ((n = 0; n < nics; n++)); do
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
    grep -Eq -- "$re" "$run/backend0.log" || fail "backend 0's output does not match: $re"
done
((${#finals[@]})) && echo "ping_test: backend 0's output matches ${#finals[@]} pattern(s)"
if ((check_queues)); then
    for ((q = 0; q < queues; q++)); do
        line=$(grep "^final dev=0 .* q=$q " "$run/backend0.log" || true)
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
echo "ping_test: PASS: $nics NIC(s)${responder:+ to a responder guest}, $want/$want pings each, guest run $guest_s s, total $(elapsed "$t_start") s"
