// Fuzz target: net::validate_tx_hdr and PeerPort's send/recv (STYLE.md §11).
//
// Input: offload bits, a raw 12-byte virtio_net_hdr, a frame length (up to
// past PeerPort::kMaxFrameBytes), how the hdr + frame is split over up to 8
// iovecs, how short the receiver's buffer is, then frame bytes (repeated to
// the length). Invariants: an accepted header satisfies every rule it was
// checked for and is accepted again; PeerPort forwards exactly what the
// validator accepts, byte for byte behind the validated header, and every
// packet is delivered or counted as a drop.
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/net/vnet_hdr.h"
#include "pvnet/port/peer_port.h"

namespace pvnet::fuzz {
namespace {

namespace v = virtio;
using port::PeerPort;

constexpr std::size_t kMaxPieces = 8;
constexpr uint32_t kMaxLen = PeerPort::kHdrBytes + PeerPort::kMaxFrameBytes + 64;

net::Offloads offloads_from(uint8_t bits) {
    return net::Offloads{(bits & 1) != 0,  (bits & 2) != 0,  (bits & 4) != 0, (bits & 8) != 0,
                         (bits & 16) != 0, (bits & 32) != 0, (bits & 64) != 0};
}

/// What an accepted header must satisfy, whatever the input was.
void check_accepted(const v::virtio_net_hdr& in, const v::virtio_net_hdr& out, uint32_t frame_bytes,
                    const net::Offloads& off) {
    check(frame_bytes >= net::kEthHdrBytes);
    check(out.num_buffers.get() == 1);
    check(out.flags == in.flags && (out.flags & ~v::VIRTIO_NET_HDR_F_NEEDS_CSUM) == 0);
    if (out.flags != 0) {
        check(off.csum);
        check(out.csum_start.get() >= 20);
        check(uint32_t{out.csum_start.get()} + out.csum_offset.get() + 2 <= frame_bytes);
    }
    const auto base = static_cast<uint8_t>(out.gso_type & ~v::VIRTIO_NET_HDR_GSO_ECN);
    switch (base) {
        case v::VIRTIO_NET_HDR_GSO_NONE:
            check(out.gso_type == 0);
            break;
        case v::VIRTIO_NET_HDR_GSO_TCPV4:
            check(off.tso4);
            break;
        case v::VIRTIO_NET_HDR_GSO_TCPV6:
            check(off.tso6);
            break;
        case v::VIRTIO_NET_HDR_GSO_UDP:
            check(off.ufo);
            break;
        case v::VIRTIO_NET_HDR_GSO_UDP_L4:
            check(off.uso && out.flags != 0);
            break;
        default:
            fail();
    }
    if (base != v::VIRTIO_NET_HDR_GSO_NONE) {
        check(out.gso_type == in.gso_type);
        check(out.gso_size.get() != 0 && out.gso_size.get() != net::kGsoByFrags);
        check(out.hdr_len.get() <= frame_bytes);
    } else {
        check(out.gso_size.get() == 0 && out.hdr_len.get() == 0);
    }
    if ((out.gso_type & v::VIRTIO_NET_HDR_GSO_ECN) != 0) check(off.ecn);
    check(net::validate_tx_hdr(out, frame_bytes, off).has_value());
}

/// One connected pair per process, every offload allowed (the validator's
/// offload rules are fuzzed above); only `a` sends, only `b` receives.
PeerPort::Pair& pair() {
    static PeerPort::Pair p = [] {
        port::PeerPortConfig cfg;
        cfg.arena_bytes = PeerPort::kMinArenaBytes;
        cfg.tx_offloads = net::Offloads::all();
        auto r = PeerPort::create_pair(cfg, cfg);
        check(r.has_value());
        return std::move(r.value());
    }();
    return p;
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pvnet::fuzz;
    Reader in(data, size);
    const pvnet::net::Offloads off = offloads_from(in.u8());
    std::array<std::byte, PeerPort::kHdrBytes> raw;
    for (auto& b : raw) b = std::byte{in.u8()};
    v::virtio_net_hdr hdr;
    std::memcpy(&hdr, raw.data(), raw.size());
    const uint32_t len = in.u32() % kMaxLen;
    const std::size_t pieces = 1 + in.u8() % kMaxPieces;
    std::array<uint32_t, kMaxPieces> cuts{};
    for (std::size_t i = 0; i + 1 < pieces; ++i) cuts[i] = len == 0 ? 0 : in.u16() % (len + 1);
    cuts[pieces - 1] = len;
    std::sort(cuts.begin(), cuts.begin() + static_cast<std::ptrdiff_t>(pieces));
    const uint8_t shrink = in.u8();

    static std::vector<std::byte> pkt(kMaxLen), got(kMaxLen);
    std::memcpy(pkt.data(), raw.data(), raw.size());
    std::vector<uint8_t> fill;
    while (!in.empty()) fill.push_back(in.u8());
    if (fill.empty()) fill.push_back(0);
    for (uint32_t i = PeerPort::kHdrBytes; i < len;) {
        const auto n = static_cast<uint32_t>(std::min<std::size_t>(fill.size(), len - i));
        std::memcpy(pkt.data() + i, fill.data(), n);
        i += n;
    }

    // The validator alone.
    const uint32_t frame_bytes = len >= PeerPort::kHdrBytes ? len - PeerPort::kHdrBytes : 0;
    const auto verdict = pvnet::net::validate_tx_hdr(hdr, frame_bytes, off);
    if (verdict) check_accepted(hdr, verdict.value(), frame_bytes, off);

    // Through the PeerPort: forwarded iff the validator accepts it with all offloads.
    std::array<iovec, kMaxPieces> iov;
    uint32_t at = 0;
    for (std::size_t i = 0; i < pieces; ++i) {
        iov[i] = iovec{pkt.data() + at, cuts[i] - at};
        at = cuts[i];
    }
    auto& [a, b] = pair();
    const uint64_t drops_before = a->stats.tx_drops() + b->stats.rx_drop_no_room.get();
    const uint64_t rx_before = b->stats.rx_pkts.get();
    // b drains every frame it gets, so a's send never finds b's queue full.
    const auto r = a->send(std::span<const iovec>(iov.data(), pieces), len);
    check(r != pvnet::port::SendResult::Retry);
    const bool sent = r == pvnet::port::SendResult::Sent;
    const auto expect = pvnet::net::validate_tx_hdr(hdr, frame_bytes, pvnet::net::Offloads::all());
    check(sent == (len >= PeerPort::kHdrBytes && frame_bytes <= PeerPort::kMaxFrameBytes &&
                   expect.has_value()));
    check(b->rx_pending() == sent);
    if (sent) {
        const uint32_t room =
            (shrink & 0x80) != 0 && len > (shrink & 0x3fu) + 1 ? len - 1 - (shrink & 0x3fu) : len;
        const iovec dst{got.data(), room};
        const uint32_t n = b->recv(std::span<const iovec>(&dst, 1));
        if (room < len) {
            check(n == 0);
        } else {
            check(n == len);
            check(std::memcmp(got.data(), &expect.value(), PeerPort::kHdrBytes) == 0);
            check(std::memcmp(got.data() + PeerPort::kHdrBytes, pkt.data() + PeerPort::kHdrBytes,
                              frame_bytes) == 0);
        }
    }
    check(!b->rx_pending());
    check(a->stats.tx_pkts.get() ==
          b->stats.rx_pkts.get() + a->stats.tx_drops() + b->stats.rx_drop_no_room.get());
    check(b->stats.rx_pkts.get() - rx_before +
              (a->stats.tx_drops() + b->stats.rx_drop_no_room.get() - drops_before) ==
          1);
    return 0;
}
