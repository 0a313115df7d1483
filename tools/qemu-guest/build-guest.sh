#!/usr/bin/env bash
# build-guest.sh OUTDIR: a tiny Linux guest for the QEMU vhost-user tests.
#
# Writes OUTDIR/vmlinux (Debian 12's kernel, uncompressed: TCG boots it in ~4 s against ~7 s for
# the bzImage, which decompresses itself under emulation) and OUTDIR/initramfs.cpio.gz (busybox,
# the virtio-net modules, and an /init that configures eth0/eth1 from pvnet.* kernel parameters,
# pings the peer, prints "PVNET-RESULT ..." on the serial console and powers off).
# OUTDIR is a cache: a second run with both outputs present does nothing.
set -euo pipefail

out=${1:?usage: build-guest.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -s $out/vmlinux && -s $out/initramfs.cpio.gz && $out/initramfs.cpio.gz -nt $here/init && $out/initramfs.cpio.gz -nt $0 ]]; then
    exit 0
fi

# ---- host tools -----------------------------------------------------------------------------
need=()
for pair in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static cpio:cpio depmod:kmod \
            xz:xz-utils dpkg-deb:dpkg; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
# busybox must be the static build: it is copied into the guest without libc.
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if ((${#need[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${need[@]}" ||
        { apt-get update && apt-get install -y --no-install-recommends "${need[@]}"; }
fi

# ---- kernel package (downloaded, never installed) -------------------------------------------
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1)
if [[ -z $kpkg ]]; then
    apt-get update
    kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1)
fi
[[ -n $kpkg ]] || { echo "build-guest: cannot find the linux-image-*-amd64 package" >&2; exit 1; }
kver=${kpkg#linux-image-}

work=$out/work
rm -rf "$work"
mkdir -p "$work/deb"
(cd "$work/deb" && apt-get download "$kpkg")
dpkg-deb -x "$work"/deb/*.deb "$work/root"
rm -rf "$work/deb"
depmod -b "$work/root" "$kver"
moddir=$work/root/lib/modules/$kver

# ---- vmlinux from the bzImage (as scripts/extract-vmlinux: the payload is xz) ----------------
bz=$work/root/boot/vmlinuz-$kver
off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$bz" | head -1 | cut -d: -f1 || true)
[[ -n $off ]] || { echo "build-guest: no xz payload in $bz" >&2; exit 1; }
# xz stops with "trailing garbage" after the stream; the output before that is complete.
tail -c +$((off + 1)) "$bz" | xz -dc > "$out/vmlinux.tmp" 2>/dev/null || true
[[ $(head -c 4 "$out/vmlinux.tmp" | od -An -tx1 | tr -d ' ') == 7f454c46 ]] ||
    { echo "build-guest: decompressed payload is not an ELF vmlinux" >&2; exit 1; }
mv "$out/vmlinux.tmp" "$out/vmlinux"

# ---- initramfs ------------------------------------------------------------------------------
ird=$work/initramfs
mkdir -p "$ird"/{bin,sbin,dev,proc,sys,tmp,modules}
cp "$(command -v busybox)" "$ird/bin/busybox"
ln -s busybox "$ird/bin/sh"  # /init installs the other applets

# The modules in load order: each module's deps (modules.dep lists them, nearest first) before it.
order=()
add_module() {
    local name=$1 line rel dep i have
    line=$(grep -E "(^|/)${name}\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep" || true)
    [[ -n $line ]] || return 0  # built in, or absent in this kernel (e.g. virtio_pci_legacy_dev)
    rel=${line%%:*}
    local deps
    read -ra deps <<<"${line#*:}"
    for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
        dep=$(basename "${deps[i]}"); add_module "${dep%%.ko*}"
    done
    for have in "${order[@]}"; do [[ $have == "$rel" ]] && return 0; done
    order+=("$rel")
}
for m in virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover \
         net_failover virtio_net; do
    add_module "$m"
done
: > "$ird/modules/order"
for rel in "${order[@]}"; do
    base=$(basename "$rel"); base=${base%%.ko*}.ko
    case $rel in
        *.ko.xz) xz -dc "$moddir/$rel" > "$ird/modules/$base" ;;
        *.ko.zst) zstd -dqc "$moddir/$rel" > "$ird/modules/$base" ;;
        *.ko.gz) gzip -dc "$moddir/$rel" > "$ird/modules/$base" ;;
        *) cp "$moddir/$rel" "$ird/modules/$base" ;;
    esac
    echo "$base" >> "$ird/modules/order"
done
grep -q '^virtio_net.ko$' "$ird/modules/order" ||
    { echo "build-guest: virtio_net is not a module of $kver" >&2; exit 1; }

install -m 0755 "$here/init" "$ird/init"
(cd "$ird" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -9) > "$out/initramfs.cpio.gz.tmp"
mv "$out/initramfs.cpio.gz.tmp" "$out/initramfs.cpio.gz"
echo "$kver" > "$out/kernel-version"
echo "build-guest: $out/vmlinux and $out/initramfs.cpio.gz (kernel $kver; modules:" $(cat "$ird/modules/order") ")"
rm -rf "$work"
