// virtio_net_hdr validation for transmit (see vnet_hdr.h). The checks run in
// the kernel's order: tun_get_user() / tun_vnet_hdr_get() on the raw header
// and length, then virtio_net_hdr_to_skb() on gso_type, the checksum request
// and the GSO specifics. All arithmetic is 32-bit on 16-bit fields: no sum
// below can wrap.
#include "pvnet/net/vnet_hdr.h"

#include <algorithm>

#include "pvnet/net/proto.h"

namespace pvnet::net {

namespace v = virtio;

namespace {

/// Linux offsetof(tcphdr, check), offsetof(udphdr, check).
constexpr uint32_t kTcpCheckOffset = 16;
constexpr uint32_t kUdpCheckOffset = 6;

constexpr uint8_t kKnownFlags =
    v::VIRTIO_NET_HDR_F_NEEDS_CSUM | v::VIRTIO_NET_HDR_F_DATA_VALID | v::VIRTIO_NET_HDR_F_RSC_INFO;

/// What virtio_net_hdr_to_skb() derives from gso_type.
struct GsoKind {
    uint8_t base = v::VIRTIO_NET_HDR_GSO_NONE;  ///< gso_type without ECN
    uint32_t thlen = 0;                         ///< minimal transport header
    uint32_t nh_min_len = kIpv4HdrBytes;        ///< minimal network header
};

Result<GsoKind, HdrError> classify_gso(uint8_t gso_type, const Offloads& off) noexcept {
    GsoKind k;
    if (gso_type == v::VIRTIO_NET_HDR_GSO_NONE) return k;
    const bool ecn = (gso_type & v::VIRTIO_NET_HDR_GSO_ECN) != 0;
    k.base = static_cast<uint8_t>(gso_type & ~v::VIRTIO_NET_HDR_GSO_ECN);
    bool negotiated = false;
    switch (k.base) {
        case v::VIRTIO_NET_HDR_GSO_TCPV4:
            k.thlen = kTcpHdrBytes;
            negotiated = off.tso4;
            break;
        case v::VIRTIO_NET_HDR_GSO_TCPV6:
            k.thlen = kTcpHdrBytes;
            k.nh_min_len = kIpv6HdrBytes;
            negotiated = off.tso6;
            break;
        case v::VIRTIO_NET_HDR_GSO_UDP:
            k.thlen = kUdpHdrBytes;
            negotiated = off.ufo;
            break;
        case v::VIRTIO_NET_HDR_GSO_UDP_L4:
            k.thlen = kUdpHdrBytes;
            negotiated = off.uso;
            break;
        // Rule: ECN alone (base NONE) is no GSO type; the kernel's switch
        // rejects it like any unknown value. Named apart for the counter.
        case v::VIRTIO_NET_HDR_GSO_NONE:
            return unexpected(HdrError::EcnWithoutTcp);
        default:
            return unexpected(HdrError::BadGsoType);
    }
    const bool tcp = k.base == v::VIRTIO_NET_HDR_GSO_TCPV4 || k.base == v::VIRTIO_NET_HDR_GSO_TCPV6;
    // Rule: ECN marks TCP segmentation (CWR on the first segment only). The
    // kernel also lets it through with UFO; the spec ties it to TCP, and a
    // receiver could only misread it.
    if (ecn && !tcp) return unexpected(HdrError::EcnWithoutTcp);
    // Rule (5.1.6.2.1): no GSO type, and no ECN, unless its offload was negotiated.
    if (!negotiated) return unexpected(HdrError::GsoNotNegotiated);
    if (ecn && !off.ecn) return unexpected(HdrError::EcnNotNegotiated);
    return k;
}

}  // namespace

std::string_view to_string(HdrError e) noexcept {
    switch (e) {
        case HdrError::FrameTooShort:
            return "frame shorter than an Ethernet header";
        case HdrError::UnknownFlag:
            return "unknown virtio_net_hdr flag bit";
        case HdrError::FlagNotForTx:
            return "DATA_VALID or RSC_INFO set on transmit";
        case HdrError::CsumNotNegotiated:
            return "NEEDS_CSUM without VIRTIO_NET_F_CSUM";
        case HdrError::BadGsoType:
            return "unknown gso_type";
        case HdrError::EcnWithoutTcp:
            return "GSO_ECN without a TCP gso_type";
        case HdrError::GsoNotNegotiated:
            return "gso_type whose offload was not negotiated";
        case HdrError::EcnNotNegotiated:
            return "GSO_ECN without VIRTIO_NET_F_HOST_ECN";
        case HdrError::GsoSizeZero:
            return "gso_size 0 with a gso_type";
        case HdrError::GsoSizeByFrags:
            return "gso_size is GSO_BY_FRAGS";
        case HdrError::CsumStartBeforeL4:
            return "csum_start inside the minimal network header";
        case HdrError::CsumBeyondFrame:
            return "checksum or transport header past the frame";
        case HdrError::CsumOffsetNotL4:
            return "csum_offset is not the TCP/UDP check field";
        case HdrError::GsoFrameTooShort:
            return "GSO frame shorter than its headers";
        case HdrError::UsoWithoutCsum:
            return "GSO_UDP_L4 without NEEDS_CSUM";
        case HdrError::UsoTooManySegments:
            return "GSO_UDP_L4 payload over UDP_MAX_SEGMENTS";
        case HdrError::HdrLenBeyondFrame:
            return "hdr_len past the frame";
        case HdrError::HdrLenBelowEth:
            return "hdr_len shorter than an Ethernet header";
        case HdrError::HdrLenBelowTransport:
            return "hdr_len short of the transport header";
        case HdrError::Count:
            break;
    }
    return "unknown HdrError";
}

Result<v::virtio_net_hdr, HdrError> validate_tx_hdr(const v::virtio_net_hdr& hdr,
                                                    uint32_t frame_bytes,
                                                    const Offloads& offloads) noexcept {
    // Rule (tun_get_user, IFF_TAP): a frame has at least an Ethernet header.
    if (frame_bytes < kEthHdrBytes) return unexpected(HdrError::FrameTooShort);
    // Rule: only defined flags; the device-to-driver ones never on transmit
    // (the kernel ignores DATA_VALID here, but forwarded to a peer it would
    // claim a checksum nobody verified).
    if ((hdr.flags & ~kKnownFlags) != 0) return unexpected(HdrError::UnknownFlag);
    if ((hdr.flags & (v::VIRTIO_NET_HDR_F_DATA_VALID | v::VIRTIO_NET_HDR_F_RSC_INFO)) != 0) {
        return unexpected(HdrError::FlagNotForTx);
    }
    const bool needs_csum = (hdr.flags & v::VIRTIO_NET_HDR_F_NEEDS_CSUM) != 0;
    if (needs_csum && !offloads.csum) return unexpected(HdrError::CsumNotNegotiated);

    const auto kind = classify_gso(hdr.gso_type, offloads);
    if (!kind) return unexpected(kind.error());
    const GsoKind& k = kind.value();
    const bool gso = k.base != v::VIRTIO_NET_HDR_GSO_NONE;
    const uint32_t gso_size = hdr.gso_size.get();
    if (gso && gso_size == 0) return unexpected(HdrError::GsoSizeZero);

    const uint32_t csum_start = hdr.csum_start.get();
    const uint32_t csum_offset = hdr.csum_offset.get();
    // Rule (tun_vnet_hdr_get): hdr_len is raised to cover the checksum field,
    // then must fit the frame; (tun_get_user) a nonzero hdr_len holds at
    // least the Ethernet header.
    uint32_t hdr_len = hdr.hdr_len.get();
    if (needs_csum) hdr_len = std::max(hdr_len, csum_start + csum_offset + 2);
    if (hdr_len > frame_bytes) return unexpected(HdrError::HdrLenBeyondFrame);
    if (hdr_len != 0 && hdr_len < kEthHdrBytes) return unexpected(HdrError::HdrLenBelowEth);

    // p_off: where virtio_net_hdr_to_skb() takes the transport header to end.
    uint32_t p_off = 0;
    if (needs_csum) {
        // Rule (pskb_may_pull + skb_partial_csum_set): the checksum field and
        // the minimal transport header lie inside the frame, and the
        // transport header starts after the smallest network header.
        if (csum_start + std::max(k.thlen, csum_offset + 2) > frame_bytes) {
            return unexpected(HdrError::CsumBeyondFrame);
        }
        if (csum_start < k.nh_min_len) return unexpected(HdrError::CsumStartBeforeL4);
        p_off = csum_start + k.thlen;
    } else if (gso) {
        // Rule: without NEEDS_CSUM tun has no transport offset (no network
        // header set, so no flow dissection): the minimal headers must fit.
        p_off = k.nh_min_len + k.thlen;
        if (p_off > frame_bytes) return unexpected(HdrError::GsoFrameTooShort);
    }

    v::virtio_net_hdr out{};
    out.flags = hdr.flags;
    out.num_buffers.set(1);
    if (needs_csum) {
        out.csum_start.set(static_cast<uint16_t>(csum_start));
        out.csum_offset.set(static_cast<uint16_t>(csum_offset));
    }
    if (!gso) return out;

    uint32_t nh_off = p_off;
    switch (k.base) {
        case v::VIRTIO_NET_HDR_GSO_UDP:
            // UFO may not count the UDP header in gso_size.
            nh_off -= k.thlen;
            break;
        case v::VIRTIO_NET_HDR_GSO_UDP_L4:
            // Rule: USO needs the partial checksum in the UDP check field and
            // at most UDP_MAX_SEGMENTS segments.
            if (!needs_csum) return unexpected(HdrError::UsoWithoutCsum);
            if (csum_offset != kUdpCheckOffset) return unexpected(HdrError::CsumOffsetNotL4);
            if (frame_bytes - p_off > gso_size * kUdpMaxSegments) {
                return unexpected(HdrError::UsoTooManySegments);
            }
            break;
        default:
            // Rule: TSO's partial checksum is the TCP check field.
            if (needs_csum && csum_offset != kTcpCheckOffset) {
                return unexpected(HdrError::CsumOffsetNotL4);
            }
            break;
    }
    // Rule: GSO_BY_FRAGS is the kernel's own marker, never a guest's MSS.
    if (gso_size == kGsoByFrags) return unexpected(HdrError::GsoSizeByFrags);
    // Rule (HOST_HDRLEN only): an exact hdr_len covers the transport header.
    if (offloads.hdr_len && hdr_len < p_off) return unexpected(HdrError::HdrLenBelowTransport);
    // Too small packets are not really GSO ones: deliver as GSO_NONE.
    if (frame_bytes - nh_off > gso_size) {
        out.gso_type = hdr.gso_type;
        out.gso_size.set(static_cast<uint16_t>(gso_size));
        // Raised past 0xffff only by a checksum field deep in a 64 KiB frame;
        // hdr_len is then a copy hint, and the largest one says the same.
        out.hdr_len.set(static_cast<uint16_t>(std::min<uint32_t>(hdr_len, 0xffff)));
    }
    return out;
}

}  // namespace pvnet::net
