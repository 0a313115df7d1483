// virtio_net_hdr validation for a transmitted packet, with the rules Linux
// applies when a guest's packet enters the host stack: tun's
// tun_vnet_hdr_get() / tun_get_user() (drivers/net/tun.c, tun_vnet.h) and
// virtio_net_hdr_to_skb() (include/linux/virtio_net.h), plus the VIRTIO 1.2
// driver requirements of 5.1.6.2 "Packet Transmission" (offloads only when
// negotiated, no DATA_VALID/RSC_INFO on transmit).
//
// A TapPort leaves this to the kernel (seed 002); a PeerPort has no kernel
// in between, so pvnet applies it itself.
//
// Implemented (one HdrError each): the TAP length and hdr_len minimums,
// tun's hdr_len raise-then-bound, the gso_type switch, gso_size 0 and
// GSO_BY_FRAGS, the NEEDS_CSUM bounds of pskb_may_pull/skb_partial_csum_set
// with the minimal network header, the minimal headers of a GSO frame
// without NEEDS_CSUM, the TCP/UDP check-field offsets, USO's NEEDS_CSUM and
// UDP_MAX_SEGMENTS, and "too small packets are not really GSO ones".
// Stricter than tun, from the spec: offloads gated by negotiation (tun takes
// any; TUNSETOFFLOAD governs only what it hands out), DATA_VALID/RSC_INFO
// and unknown flag bits rejected (tun ignores them), GSO_ECN only with TCP
// (tun also takes it with UFO). Optional: HOST_HDRLEN's exact hdr_len.
// Left to the receiver's stack, because they need the frame parsed as an
// skb: the flow-dissector probe and virtio_net_hdr_match_proto (tun in TAP
// mode has neither at this point either: no network header, protocol set
// later by eth_type_trans), and the header checks of GSO segmentation, which
// the kernel defers too (SKB_GSO_DODGY). UDP-tunnel GSO types (Linux 6.17)
// are not negotiated, so they fail as BadGsoType.
#pragma once

#include <cstdint>
#include <string_view>

#include "pvnet/util/result.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::net {

/// The transmit offloads the sender's driver negotiated (VIRTIO_NET_F_CSUM,
/// HOST_TSO4/TSO6/ECN/UFO/USO). Between two guests, wire the intersection of
/// the sender's HOST_* with the receiver's GUEST_* offloads: a PeerPort does
/// not segment or checksum what the receiver cannot take.
struct Offloads {
    bool csum = false;
    bool tso4 = false;
    bool tso6 = false;
    bool ecn = false;
    bool ufo = false;
    bool uso = false;
    /// VIRTIO_NET_F_HOST_HDRLEN: hdr_len is exact, so for GSO it must cover
    /// the transport header. Without it hdr_len is a hint (tun copies that
    /// much linearly) and the kernel does not hold it to the headers.
    bool hdr_len = false;

    /// All of them: what a test or a kernel-less loop negotiates.
    static constexpr Offloads all() noexcept { return {true, true, true, true, true, true, true}; }
};

/// Which rule a header broke. Each names what the sender did.
enum class HdrError : uint8_t {
    FrameTooShort,         ///< frame shorter than an Ethernet header (tun: len < ETH_HLEN)
    UnknownFlag,           ///< a flag bit virtio-net does not define
    FlagNotForTx,          ///< DATA_VALID or RSC_INFO: device-to-driver only (5.1.6.2.1)
    CsumNotNegotiated,     ///< NEEDS_CSUM without VIRTIO_NET_F_CSUM
    BadGsoType,            ///< gso_type not NONE/TCPV4/TCPV6/UDP/UDP_L4
    EcnWithoutTcp,         ///< GSO_ECN on NONE, UDP or UDP_L4
    GsoNotNegotiated,      ///< GSO type whose HOST_* offload was not negotiated
    EcnNotNegotiated,      ///< GSO_ECN without HOST_ECN
    GsoSizeZero,           ///< gso_type != NONE with gso_size 0
    GsoSizeByFrags,        ///< gso_size == GSO_BY_FRAGS (0xffff), kernel-internal
    CsumStartBeforeL4,     ///< csum_start below the smallest network header
    CsumBeyondFrame,       ///< csum_start + max(thlen, csum_offset + 2) > frame length
    CsumOffsetNotL4,       ///< TCP/USO GSO whose csum_offset is not the TCP/UDP check field
    GsoFrameTooShort,      ///< GSO without NEEDS_CSUM: frame cannot hold network + transport header
    UsoWithoutCsum,        ///< UDP_L4 without NEEDS_CSUM
    UsoTooManySegments,    ///< UDP_L4 payload > gso_size * UDP_MAX_SEGMENTS
    HdrLenBeyondFrame,     ///< hdr_len (raised to cover the checksum) > frame length
    HdrLenBelowEth,        ///< hdr_len nonzero but shorter than an Ethernet header
    HdrLenBelowTransport,  ///< HOST_HDRLEN: GSO hdr_len short of the transport header
    Count
};

std::string_view to_string(HdrError e) noexcept;

/// Linux ETH_HLEN and UDP_MAX_SEGMENTS; GSO_BY_FRAGS is the kernel's marker value.
inline constexpr uint32_t kEthHdrBytes = 14;
inline constexpr uint32_t kUdpMaxSegments = 64;
inline constexpr uint16_t kGsoByFrags = 0xffff;

/// Checks `hdr` (a local copy: the caller reads the wire header once) against
/// the `frame_bytes` that follow it. On success returns the header to hand to
/// the receiver: num_buffers 1 (one buffer, VERSION_1 always carries it), and
/// a GSO packet too small to need segmenting (payload <= gso_size) delivered
/// as GSO_NONE, as virtio_net_hdr_to_skb() does ("Too small packets are not
/// really GSO ones"); without GSO, gso_size and hdr_len are zeroed.
Result<virtio::virtio_net_hdr, HdrError> validate_tx_hdr(const virtio::virtio_net_hdr& hdr,
                                                         uint32_t frame_bytes,
                                                         const Offloads& offloads) noexcept;

}  // namespace pvnet::net
