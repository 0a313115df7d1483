#!/usr/bin/env bash
# ping_test.sh: boot the tiny guest (tools/qemu-guest) under QEMU/TCG with a virtio-net-pci NIC
# on a vhost-user socket served by BACKEND, let it ping the backend's echo address, and pass when
# every ping came back and the guest kernel logged no virtio error.
#
#   ping_test.sh --backend 'CMD' [options]
#     --backend CMD     shell command of the vhost-user backend; {sock} is replaced by the socket
#                       path (e.g. "pvnet serve --vhost-user {sock} --echo 192.0.2.1")
#     --ready REGEX     wait for REGEX in the backend's output before starting QEMU (default: wait
#                       for the socket to appear)
#     --qemu-server     QEMU listens on the socket (server=on,wait=off), the backend connects
#     --guest-dir DIR   where build-guest.sh keeps the kernel and initramfs (default
#                       ${PVNET_GUEST_DIR:-/tmp/pvnet-qemu-guest}); reused across runs
#     --ip A/L --peer A (192.0.2.2/24, 192.0.2.1)   --count N (5)  --size N (56)  --mtu N
#     --mrg-rxbuf on|off  --host-mtu N  --queues N (mq=on, -smp N)  --device-opts OPTS
#     --timeout S       whole guest run (180)       --keep    keep the run's logs
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backend= ready= qemu_server=0 guest_dir=${PVNET_GUEST_DIR:-/tmp/pvnet-qemu-guest}
ip=192.0.2.2/24 peer=192.0.2.1 count=5 size=56 mtu= mrg= host_mtu= queues=1 devopts=
timeout_s=180 keep=0
while (($#)); do
    case $1 in
        --backend) backend=$2; shift ;;
        --ready) ready=$2; shift ;;
        --qemu-server) qemu_server=1 ;;
        --guest-dir) guest_dir=$2; shift ;;
        --ip) ip=$2; shift ;;
        --peer) peer=$2; shift ;;
        --count) count=$2; shift ;;
        --size) size=$2; shift ;;
        --mtu) mtu=$2; shift ;;
        --mrg-rxbuf) mrg=$2; shift ;;
        --host-mtu) host_mtu=$2; shift ;;
        --queues) queues=$2; shift ;;
        --device-opts) devopts=$2; shift ;;
        --timeout) timeout_s=$2; shift ;;
        --keep) keep=1 ;;
        *) echo "ping_test: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[[ -n $backend ]] || { echo "ping_test: --backend is required" >&2; exit 2; }

"$root/tools/qemu-guest/build-guest.sh" "$guest_dir"

run=$(mktemp -d /tmp/pvnet-qemu.XXXXXX)
sock=$run/vhost.sock
backend_pid= qemu_pid=
cleanup() {
    # Both children were started with setsid: their process groups are theirs alone.
    [[ -n $qemu_pid ]] && kill -- -"$qemu_pid" 2>/dev/null || true
    [[ -n $backend_pid ]] && kill -- -"$backend_pid" 2>/dev/null || true
    [[ -n $backend_pid ]] && { sleep 0.5; kill -9 -- -"$backend_pid" 2>/dev/null || true; }
    exec 3>&- 2>/dev/null || true
    if ((keep)); then echo "ping_test: logs kept in $run"; else rm -rf "$run"; fi
}
trap cleanup EXIT
fail() {
    echo "ping_test: FAIL: $*"
    echo "---- backend log ($run/backend.log)"; tail -n 40 "$run/backend.log" 2>/dev/null || true
    echo "---- guest log ($run/guest.log)"; tail -n 80 "$run/guest.log" 2>/dev/null || true
    exit 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

start_backend() {
    local cmd=${backend//\{sock\}/$sock}
    # stdin is a FIFO the driver holds open: an interactive backend (testpmd -i) waits on it.
    mkfifo "$run/backend.in"
    exec 3<>"$run/backend.in"
    echo "ping_test: backend: $cmd"
    setsid bash -c "exec $cmd" <&3 >"$run/backend.log" 2>&1 &
    backend_pid=$!
}
wait_backend_ready() {
    local t0 i
    t0=$(now)
    for ((i = 0; i < 300; i++)); do
        kill -0 "$backend_pid" 2>/dev/null || fail "backend exited before it was ready"
        if [[ -n $ready ]]; then
            grep -Eq -- "$ready" "$run/backend.log" && break
        elif ((qemu_server)); then
            break  # a client backend has nothing to show; QEMU reports the connection
        else
            [[ -S $sock ]] && break
        fi
        sleep 0.1
    done
    ((i < 300)) || fail "backend not ready within 30 s"
    echo "ping_test: backend ready after $(elapsed "$t0") s"
}

dev=virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56
# QEMU 7.2 under TCG segfaults when the guest enables MSI-X on a vhost-user NIC: INTx only.
dev+=,vectors=0
[[ -n $mrg ]] && dev+=,mrg_rxbuf=$mrg
[[ -n $host_mtu ]] && dev+=,host_mtu=$host_mtu
netdev=vhost-user,id=n0,chardev=c0
if ((queues > 1)); then
    dev+=,mq=on
    netdev+=,queues=$queues
fi
[[ -n $devopts ]] && dev+=,$devopts
chardev=socket,id=c0,path=$sock
((qemu_server)) && chardev+=,server=on,wait=off
append="console=ttyS0 no_timer_check panic=-1 quiet loglevel=4 pvnet.ip=$ip pvnet.peer=$peer"
append+=" pvnet.count=$count pvnet.size=$size"
[[ -n $mtu ]] && append+=" pvnet.mtu=$mtu"
qemu=(qemu-system-x86_64 -accel tcg -m 256 -smp "$queues" -nodefaults -no-user-config
      -kernel "$guest_dir/vmlinux" -initrd "$guest_dir/initramfs.cpio.gz" -append "$append"
      -display none -serial stdio -no-reboot
      -object memory-backend-memfd,id=mem,size=256M,share=on -numa node,memdev=mem
      -chardev "$chardev" -netdev "$netdev" -device "$dev")

start_qemu() {
    echo "ping_test: qemu: ${qemu[*]}"
    setsid timeout -k 5 "$timeout_s" "${qemu[@]}" </dev/null >"$run/guest.log" 2>&1 &
    qemu_pid=$!
}

t_start=$(now)
if ((qemu_server)); then
    start_qemu
    for ((i = 0; i < 100; i++)); do [[ -S $sock ]] && break; sleep 0.1; done
    [[ -S $sock ]] || fail "QEMU did not create $sock"
    start_backend
    wait_backend_ready
else
    start_backend
    wait_backend_ready
    start_qemu
fi
t_qemu=$(now)
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=
guest_s=$(elapsed "$t_qemu")
((qemu_rc == 124 || qemu_rc == 137)) && fail "guest did not finish within $timeout_s s"

log=$run/guest.log
grep -a '^PVNET-' "$log" | grep -v '^PVNET-PING' || true
grep -aq '^PVNET-DONE' "$log" || fail "guest did not reach PVNET-DONE (qemu exit $qemu_rc)"
# Signs that the device broke the virtio contract (see virtio_ring.c's BAD_RING messages).
bad=$(grep -aEi 'is not a head|unexpected used|id [0-9]+ out of range|virtio.*(reset|broken)|NETDEV WATCHDOG|Kernel panic|BUG:|Call Trace' "$log" || true)
[[ -z $bad ]] || fail "guest logged virtio errors: $bad"
grep -aq '^PVNET-ERROR' "$log" && fail "guest: $(grep -a '^PVNET-ERROR' "$log" | tr '\n' ' ')"
result=$(grep -a '^PVNET-RESULT ping dev=eth0 ' "$log" || true)
[[ -n $result ]] || fail "no PVNET-RESULT line for eth0"
sent=$(sed -n 's/.* sent=\([0-9]*\).*/\1/p' <<<"$result")
received=$(sed -n 's/.* received=\([0-9]*\).*/\1/p' <<<"$result")
[[ $sent == "$count" && $received == "$count" ]] ||
    fail "eth0 sent=$sent received=$received, want $count/$count"
if [[ -n $mtu ]]; then
    got=$(sed -n 's/.* mtu=\([0-9]*\).*/\1/p' <<<"$result")
    [[ $got == "$mtu" ]] || fail "eth0 mtu=$got, want $mtu"
fi
if ((queues > 1)); then
    info=$(grep -a '^PVNET-INFO dev=eth0 ' "$log" || true)
    [[ $info == *" queues=$queues "* ]] || fail "eth0 has not $queues rx queues: $info"
fi
echo "ping_test: PASS: $count/$count pings, guest run $guest_s s, total $(elapsed "$t_start") s"
