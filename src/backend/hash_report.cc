// VIRTIO_NET_F_HASH_REPORT on the device (VIRTIO 1.2 "Hash reporting for
// incoming packets"; QEMU virtio_net_process_rss with populate_hash). With
// the feature the header is struct virtio_net_hdr_v1_hash in both
// directions; the ports keep reading and writing struct virtio_net_hdr, so
// the packet loops hand them each chain without the hash fields (tx: the
// driver's are ignored) and, on rx, fill them in after the port wrote the
// frame.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "pvnet/backend/net_device.h"
#include "pvnet/util/iov.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {

namespace {
using HashHdr = virtio::virtio_net_hdr_v1_hash;
constexpr std::size_t kHashFieldsAt = offsetof(HashHdr, hash_value);
static_assert(kHashFieldsAt == kHdrBytes && sizeof(HashHdr) == kHdrBytes + virtio::kHashHdrExtraBytes);

/// hash_value, hash_report and padding_reserved as they lie in the header.
struct HashFields {
    virtio::Le32 hash_value;
    virtio::Le16 hash_report;
    virtio::Le16 padding_reserved;
};
static_assert(sizeof(HashFields) == virtio::kHashHdrExtraBytes);
}  // namespace

std::size_t NetDevice::cut_hash_fields(std::span<const iovec> chain, CutIov& out) noexcept {
    return iov_cut(chain, kHashFieldsAt, virtio::kHashHdrExtraBytes, out);
}

uint32_t NetDevice::report_hash(const Pair& p, std::span<const iovec> chain,
                                uint32_t port_len) const noexcept {
    if (port_len < kHdrBytes) return port_len;
    const uint32_t frame_len = port_len - kHdrBytes;
    // Read once: the frame sits in guest memory the driver could rewrite;
    // the hash is taken over this copy of its head only.
    std::array<uint8_t, net::kHashHeadBytes> head;
    const std::size_t head_len = std::min<std::size_t>(frame_len, head.size());
    (void)copy_from_iov(chain, sizeof(HashHdr),
                        std::as_writable_bytes(std::span(head)).first(head_len));
    const net::RxSteering st =
        rx_steer_->steer(std::span<const uint8_t>(head.data(), head_len), frame_len, p.index);
    HashFields f{};
    // Rule: hash_report NONE when no hash was calculated (hash_value 0 then).
    f.hash_value.set(st.hash_report == virtio::VIRTIO_NET_HASH_REPORT_NONE ? 0u : st.hash);
    f.hash_report.set(st.hash_report);
    // VALIDATED: the port wrote port_len bytes into the cut, so the chain
    // holds the whole header before them (cut_hash_fields checked its length).
    (void)copy_to_iov(chain, kHashFieldsAt, std::as_bytes(std::span(&f, 1)));
    return port_len + virtio::kHashHdrExtraBytes;
}

}  // namespace pvnet::backend
