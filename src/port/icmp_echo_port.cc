// IcmpEchoPort (see icmp_echo_port.h). Offsets are from the Ethernet
// header: ARP (RFC 826) at 14, IPv4 (RFC 791) at 14, ICMP (RFC 792) after
// the IPv4 header's IHL words.
#include "pvnet/port/icmp_echo_port.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "pvnet/util/iov.h"

namespace pvnet::port {

namespace {

constexpr uint32_t kEth = 14;
constexpr uint32_t kArpBytes = 28;
constexpr uint32_t kIpMin = 20;
constexpr uint32_t kIpMax = 60;
constexpr uint32_t kIcmpEcho = 8;  ///< type, code, checksum, id, sequence
/// Every header the port reads or rewrites.
constexpr uint32_t kPrefix = kEth + kIpMax + kIcmpEcho;

uint16_t be16(const std::byte* p) noexcept {
    return static_cast<uint16_t>((std::to_integer<unsigned>(p[0]) << 8) |
                                 std::to_integer<unsigned>(p[1]));
}
void put_be16(std::byte* p, uint16_t v) noexcept {
    p[0] = static_cast<std::byte>(v >> 8);
    p[1] = static_cast<std::byte>(v & 0xff);
}
/// The ones' complement sum of `n` bytes (even), folded to 16 bits.
uint16_t csum_fold(const std::byte* p, uint32_t n) noexcept {
    uint32_t s = 0;
    for (uint32_t i = 0; i + 1 < n; i += 2) s += be16(p + i);
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return static_cast<uint16_t>(s);
}

}  // namespace

std::string_view to_string(IcmpDrop d) noexcept {
    switch (d) {
        case IcmpDrop::Short: return "short";
        case IcmpDrop::Oversize: return "oversize";
        case IcmpDrop::OtherEthertype: return "other_ethertype";
        case IcmpDrop::ArpMalformed: return "arp_malformed";
        case IcmpDrop::ArpNotRequest: return "arp_not_request";
        case IcmpDrop::ArpNotForUs: return "arp_not_for_us";
        case IcmpDrop::IpMalformed: return "ip_malformed";
        case IcmpDrop::IpBadChecksum: return "ip_bad_checksum";
        case IcmpDrop::IpFragment: return "ip_fragment";
        case IcmpDrop::IpNotForUs: return "ip_not_for_us";
        case IcmpDrop::NotIcmp: return "not_icmp";
        case IcmpDrop::IcmpMalformed: return "icmp_malformed";
        case IcmpDrop::IcmpNotEcho: return "icmp_not_echo";
        case IcmpDrop::Count: break;
    }
    return "?";
}

Result<std::unique_ptr<IcmpEchoPort>, PortError> IcmpEchoPort::create(Ipv4 addr, Mac mac,
                                                                      uint32_t max_frame_bytes,
                                                                      uint32_t slots,
                                                                      ReplyQueue::Publish publish) noexcept {
    if (max_frame_bytes < kEth + kArpBytes) return unexpected(PortError::BadFrameSize);
    auto q = ReplyQueue::create(slots, kHdrBytes + max_frame_bytes, publish);
    if (!q) return unexpected(q.error());
    std::unique_ptr<IcmpEchoPort> p(
        new (std::nothrow) IcmpEchoPort(std::move(*q), addr, mac, max_frame_bytes));
    if (!p) return unexpected(PortError::SystemError);
    return p;
}

SendResult IcmpEchoPort::drop(IcmpDrop why) noexcept {
    drops.add(why);
    tx_pkts.add();
    return SendResult::Dropped;
}

SendResult IcmpEchoPort::send(std::span<const iovec> src, uint32_t len) noexcept {
    if (len < kHdrBytes + kEth || iov_bytes(src) < len) return drop(IcmpDrop::Short);
    const uint32_t frame_len = len - kHdrBytes;
    if (frame_len > max_frame_) return drop(IcmpDrop::Oversize);
    // The one copy of the headers that is checked and used.
    std::array<std::byte, kPrefix> h{};
    const uint32_t n = std::min(frame_len, kPrefix);
    (void)copy_from_iov(src, kHdrBytes, std::span<std::byte>(h.data(), n));
    switch (be16(h.data() + 12)) {
        case 0x0806: return arp(std::span<const std::byte>(h.data(), n));
        case 0x0800: return icmp(src, frame_len, std::span<std::byte>(h.data(), n));
        default: return drop(IcmpDrop::OtherEthertype);
    }
}

SendResult IcmpEchoPort::arp(std::span<const std::byte> f) noexcept {
    if (f.size() < kEth + kArpBytes) return drop(IcmpDrop::ArpMalformed);
    const std::byte* a = f.data() + kEth;
    if (be16(a) != 1 || be16(a + 2) != 0x0800 || a[4] != std::byte{6} || a[5] != std::byte{4}) {
        return drop(IcmpDrop::ArpMalformed);
    }
    if (be16(a + 6) != 1) return drop(IcmpDrop::ArpNotRequest);
    if (std::memcmp(a + 24, addr_.data(), 4) != 0) return drop(IcmpDrop::ArpNotForUs);
    std::byte* slot = q_->reserve();
    if (slot == nullptr) return SendResult::Retry;
    std::memset(slot, 0, kHdrBytes);
    std::byte* r = slot + kHdrBytes;
    std::memcpy(r, a + 8, 6);  // to the requester's hardware address
    std::memcpy(r + 6, mac_.data(), 6);
    put_be16(r + 12, 0x0806);
    std::byte* ra = r + kEth;
    std::memcpy(ra, a, 6);  // htype, ptype, hlen, plen as checked
    put_be16(ra + 6, 2);
    std::memcpy(ra + 8, mac_.data(), 6);
    std::memcpy(ra + 14, addr_.data(), 4);
    std::memcpy(ra + 18, a + 8, 10);  // target = the requester's sha and spa
    q_->commit(kHdrBytes + kEth + kArpBytes);
    arp_replies.add();
    tx_pkts.add();
    return SendResult::Sent;
}

SendResult IcmpEchoPort::icmp(std::span<const iovec> src, uint32_t frame_len,
                              std::span<std::byte> f) noexcept {
    if (f.size() < kEth + kIpMin) return drop(IcmpDrop::IpMalformed);
    std::byte* ip = f.data() + kEth;
    const unsigned vihl = std::to_integer<unsigned>(ip[0]);
    const uint32_t ihl = (vihl & 0xf) * 4;
    const uint32_t total = be16(ip + 2);
    if ((vihl >> 4) != 4 || ihl < kIpMin || total < ihl || kEth + total > frame_len) {
        return drop(IcmpDrop::IpMalformed);
    }
    // kEth + total <= frame_len and ihl <= kIpMax: the header is in f.
    if (csum_fold(ip, ihl) != 0xffff) return drop(IcmpDrop::IpBadChecksum);
    if ((be16(ip + 6) & 0x3fff) != 0) return drop(IcmpDrop::IpFragment);
    if (std::memcmp(ip + 16, addr_.data(), 4) != 0) return drop(IcmpDrop::IpNotForUs);
    if (ip[9] != std::byte{1}) return drop(IcmpDrop::NotIcmp);
    if (total - ihl < kIcmpEcho) return drop(IcmpDrop::IcmpMalformed);
    std::byte* ic = ip + ihl;
    if (ic[0] != std::byte{8} || ic[1] != std::byte{0}) return drop(IcmpDrop::IcmpNotEcho);

    std::byte* slot = q_->reserve();
    if (slot == nullptr) return SendResult::Retry;
    // Addresses: back to the sender, from us.
    std::memcpy(f.data(), f.data() + 6, 6);
    std::memcpy(f.data() + 6, mac_.data(), 6);
    std::memcpy(ip + 16, ip + 12, 4);
    std::memcpy(ip + 12, addr_.data(), 4);
    ip[8] = std::byte{64};
    put_be16(ip + 10, 0);
    put_be16(ip + 10, static_cast<uint16_t>(~csum_fold(ip, ihl)));
    // Type 8 → 0: HC' = ~(~HC + ~m + m') with m = 0x0800, m' = 0 (RFC 1624, eqn. 3).
    ic[0] = std::byte{0};
    uint32_t s = uint32_t{static_cast<uint16_t>(~be16(ic + 2))} + 0xf7ff;
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    put_be16(ic + 2, static_cast<uint16_t>(~s));

    std::memset(slot, 0, kHdrBytes);
    std::byte* r = slot + kHdrBytes;
    // The payload is copied as it is (Ethernet padding trimmed), then the
    // rewritten headers from our copy over it.
    const uint32_t reply_len = kEth + total;
    (void)copy_from_iov(src, kHdrBytes, std::span<std::byte>(r, reply_len));
    std::memcpy(r, f.data(), kEth + ihl + 4);
    q_->commit(kHdrBytes + reply_len);
    echo_replies.add();
    tx_pkts.add();
    return SendResult::Sent;
}

}  // namespace pvnet::port
