// RSS and hash calculation (see rss.h). The frame parser reads only through
// a bounds-checked span, the frame's head: every offset is checked against
// the bytes present before it is used, lengths the headers claim against the
// frame's length, and all offset arithmetic is 32-bit over 16-bit fields
// (and offsets below kHashHeadBytes), so none can wrap.
#include "pvnet/net/rss.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <optional>

#include "pvnet/net/proto.h"

namespace pvnet::net {

namespace v = virtio;

namespace {

/// Linux ETH_P_IP, ETH_P_IPV6, ETH_P_8021Q; IPPROTO_* and header sizes.
constexpr uint16_t kEthPIp = 0x0800;
constexpr uint16_t kEthPIpv6 = 0x86dd;
constexpr uint16_t kEthP8021Q = 0x8100;
constexpr uint32_t kEthHlen = 14;
constexpr uint32_t kVlanHlen = 4;
constexpr uint8_t kIpprotoHopopts = 0;
constexpr uint8_t kIpprotoTcp = 6;
constexpr uint8_t kIpprotoUdp = 17;
constexpr uint8_t kIpprotoRouting = 43;
constexpr uint8_t kIpprotoDstopts = 60;
/// IPv4 frag_off: MF flag and fragment offset (Linux IP_MF | IP_OFFSET).
constexpr uint16_t kIpMfOffset = 0x3fff;
/// A bound on the IPv6 extension-header walk: no legitimate packet needs more.
constexpr int kMaxIpv6ExtHeaders = 8;

uint16_t be16(std::span<const uint8_t> b, uint32_t at) noexcept {
    return static_cast<uint16_t>((b[at] << 8) | b[at + 1]);
}

/// The addresses, and where the L4 header sits if there is one to hash.
struct L3 {
    bool ipv6 = false;
    uint32_t addr_at = 0;  ///< offset of the source address (destination follows)
    uint8_t proto = 0;     ///< IPPROTO_TCP/UDP when an L4 header may follow, else 0
    uint32_t l4_at = 0;
    uint32_t l4_len = 0;  ///< bytes from l4_at to the end of the IP packet
};

/// IPv4 at `at` of a frame of `frame_len` bytes whose head is `h`; false
/// when the header or the length it claims is not there.
bool parse_ipv4(std::span<const uint8_t> h, uint32_t frame_len, uint32_t at, L3& out) noexcept {
    const uint32_t avail = frame_len - at;
    if (avail < kIpv4HdrBytes || h.size() < at + kIpv4HdrBytes || (h[at] >> 4) != 4) return false;
    const uint32_t ihl = (h[at] & 0x0fu) * 4u;
    const uint32_t total = be16(h, at + 2);
    // Ethernet padding may follow the packet; the packet may not pass the frame.
    if (ihl < kIpv4HdrBytes || total < ihl || total > avail) return false;
    out.ipv6 = false;
    out.addr_at = at + 12;
    // Rule: a fragment hashes on its addresses only (every fragment of a
    // datagram must land on one queue, and only the first has the ports).
    // The ports lie in the head: at most 18 + 60 + 4 bytes in.
    if ((be16(h, at + 6) & kIpMfOffset) == 0) {
        out.proto = h[at + 9];
        out.l4_at = at + ihl;
        out.l4_len = total - ihl;
    }
    return true;
}

/// IPv6 at `at`, walking the extension headers that carry no addresses
/// while they lie in the head `h`.
bool parse_ipv6(std::span<const uint8_t> h, uint32_t frame_len, uint32_t at, L3& out) noexcept {
    const uint32_t avail = frame_len - at;
    if (avail < kIpv6HdrBytes || h.size() < at + kIpv6HdrBytes || (h[at] >> 4) != 6) return false;
    const uint32_t end = at + kIpv6HdrBytes + be16(h, at + 4);
    if (end > frame_len) return false;
    out.ipv6 = true;
    out.addr_at = at + 8;
    uint8_t next = h[at + 6];
    uint32_t p = at + kIpv6HdrBytes;
    for (int i = 0; i < kMaxIpv6ExtHeaders; ++i) {
        // Past the head (kHashHeadBytes): hash on the addresses.
        if (p + 4 > h.size()) return true;
        if (next == kIpprotoTcp || next == kIpprotoUdp) {
            out.proto = next;
            out.l4_at = p;
            out.l4_len = end - p;
            return true;
        }
        // Fragment, AH, ESP, no-next-header, unknown: hash on the addresses.
        if (next != kIpprotoHopopts && next != kIpprotoRouting && next != kIpprotoDstopts) {
            return true;
        }
        if (end - p < 8) return true;  // the IP packet ends inside it: no L4 header
        const uint32_t len = (uint32_t{h[p + 1]} + 1) * 8;
        if (len > end - p) return true;
        next = h[p];
        p += len;
    }
    return true;
}

/// The tail both commands share: u8 hash_key_length at key_at - 1, then the
/// key, which ends the data. Fills `key` and `key_len`; the error, if any.
std::optional<RssError> parse_key(std::span<const uint8_t> d, uint32_t key_at,
                                  uint32_t hash_types,
                                  std::array<uint8_t, v::VIRTIO_NET_RSS_MAX_KEY_SIZE>& key,
                                  uint8_t& key_len) noexcept {
    const uint8_t n = d[key_at - 1];
    if (n > v::VIRTIO_NET_RSS_MAX_KEY_SIZE) return RssError::KeyTooLong;
    if (d.size() < key_at + n) return RssError::DataTooShort;
    if (d.size() > key_at + n) return RssError::TrailingBytes;
    // Rule (QEMU's): hashing with no key gives every flow hash 0 (and under
    // RSS sends it to table[0]).
    if (n == 0 && hash_types != 0) return RssError::KeyMissing;
    key_len = n;
    std::copy_n(d.begin() + key_at, n, key.begin());
    return std::nullopt;
}

}  // namespace

uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input) noexcept {
    auto key_byte = [&](std::size_t i) -> uint32_t { return i < key.size() ? key[i] : 0u; };
    // `window` holds key bits [bit, bit + 32); the next key byte is shifted in
    // one bit at a time as the input advances.
    uint32_t window = (key_byte(0) << 24) | (key_byte(1) << 16) | (key_byte(2) << 8) | key_byte(3);
    uint32_t hash = 0;
    for (std::size_t i = 0; i < input.size(); ++i) {
        const uint32_t next = key_byte(i + 4);
        for (uint32_t bit = 0x80; bit != 0; bit >>= 1) {
            if ((input[i] & bit) != 0) hash ^= window;
            window = (window << 1) | ((next & bit) != 0 ? 1u : 0u);
        }
    }
    return hash;
}

HashInput extract_hash_input(std::span<const uint8_t> frame, uint32_t hash_types) noexcept {
    return extract_hash_input(hash_head(frame), hash_frame_len(frame), hash_types);
}

HashInput extract_hash_input(std::span<const uint8_t> head, uint32_t frame_len,
                             uint32_t hash_types) noexcept {
    HashInput in;
    // What the caller has of the frame, never more than the frame.
    if (head.size() > frame_len) head = head.first(frame_len);
    if (head.size() < kEthHlen) return in;
    uint32_t at = kEthHlen;
    uint16_t ethertype = be16(head, 12);
    if (ethertype == kEthP8021Q) {
        if (head.size() < kEthHlen + kVlanHlen) return in;
        ethertype = be16(head, 16);
        at += kVlanHlen;
    }
    L3 l3;
    bool ok = false;
    if (ethertype == kEthPIp) ok = parse_ipv4(head, frame_len, at, l3);
    if (ethertype == kEthPIpv6) ok = parse_ipv6(head, frame_len, at, l3);
    if (!ok) return in;

    const uint32_t t_ip =
        l3.ipv6 ? v::VIRTIO_NET_RSS_HASH_TYPE_IPv6 : v::VIRTIO_NET_RSS_HASH_TYPE_IPv4;
    const uint32_t t_tcp =
        l3.ipv6 ? v::VIRTIO_NET_RSS_HASH_TYPE_TCPv6 : v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4;
    const uint32_t t_udp =
        l3.ipv6 ? v::VIRTIO_NET_RSS_HASH_TYPE_UDPv6 : v::VIRTIO_NET_RSS_HASH_TYPE_UDPv4;
    // The ports are read from the head (a head shorter than the contract's
    // min(frame_len, kHashHeadBytes) hashes the addresses, never reads past).
    const bool ports_in_head = l3.l4_at + 4 <= head.size();
    const bool has_tcp = l3.proto == kIpprotoTcp && l3.l4_len >= kTcpHdrBytes && ports_in_head;
    const bool has_udp = l3.proto == kIpprotoUdp && l3.l4_len >= kUdpHdrBytes && ports_in_head;
    const bool ports =
        ((hash_types & t_tcp) != 0 && has_tcp) || ((hash_types & t_udp) != 0 && has_udp);
    if (!ports && (hash_types & t_ip) == 0) return in;

    const uint32_t addr_len = l3.ipv6 ? 32 : 8;
    std::memcpy(in.bytes.data(), head.data() + l3.addr_at, addr_len);
    in.len = static_cast<uint8_t>(addr_len);
    if (ports) {
        std::memcpy(in.bytes.data() + addr_len, head.data() + l3.l4_at, 4);
        in.len = static_cast<uint8_t>(addr_len + 4);
        in.hash_report =
            has_tcp ? (l3.ipv6 ? v::VIRTIO_NET_HASH_REPORT_TCPv6 : v::VIRTIO_NET_HASH_REPORT_TCPv4)
                    : (l3.ipv6 ? v::VIRTIO_NET_HASH_REPORT_UDPv6 : v::VIRTIO_NET_HASH_REPORT_UDPv4);
    } else {
        in.hash_report = l3.ipv6 ? v::VIRTIO_NET_HASH_REPORT_IPv6 : v::VIRTIO_NET_HASH_REPORT_IPv4;
    }
    return in;
}

std::string_view to_string(RssError e) noexcept {
    switch (e) {
        case RssError::DataTooShort:
            return "RSS config shorter than its fields, table and key";
        case RssError::TrailingBytes:
            return "RSS config has bytes after the key";
        case RssError::UnsupportedHashType:
            return "RSS hash_types has a bit the device does not support";
        case RssError::TableLengthNotPowerOfTwo:
            return "RSS indirection table length is not a power of two";
        case RssError::TableTooLong:
            return "RSS indirection table longer than 128 entries";
        case RssError::TableQueueOutOfRange:
            return "RSS indirection table entry names a queue the device does not have";
        case RssError::UnclassifiedOutOfRange:
            return "RSS unclassified_queue names a queue the device does not have";
        case RssError::MaxTxVqOutOfRange:
            return "RSS max_tx_vq is 0 or above the queue pairs";
        case RssError::KeyTooLong:
            return "RSS hash key longer than 40 bytes";
        case RssError::KeyMissing:
            return "RSS hash types enabled without a key";
        case RssError::Count:
            break;
    }
    return "unknown RssError";
}

Result<RssConfig, RssError> parse_rss_config(std::span<const uint8_t> d,
                                             uint16_t max_pairs) noexcept {
    auto le16 = [&](uint32_t at) { return static_cast<uint16_t>(d[at] | (d[at + 1] << 8)); };
    // le32 hash_types, le16 indirection_table_mask, le16 unclassified_queue.
    constexpr uint32_t kHead = 8;
    if (d.size() < kHead) return unexpected(RssError::DataTooShort);
    RssConfig cfg;
    cfg.hash_types = uint32_t{le16(0)} | (uint32_t{le16(2)} << 16);
    const uint32_t table_len = uint32_t{le16(4)} + 1;
    cfg.unclassified_queue = le16(6);
    if ((cfg.hash_types & ~kRssSupportedHashTypes) != 0) {
        return unexpected(RssError::UnsupportedHashType);
    }
    if (!std::has_single_bit(table_len)) return unexpected(RssError::TableLengthNotPowerOfTwo);
    if (table_len > v::VIRTIO_NET_RSS_MAX_TABLE_LEN) return unexpected(RssError::TableTooLong);
    // The table, le16 max_tx_vq, u8 hash_key_length.
    const uint32_t key_at = kHead + table_len * 2 + 3;
    if (d.size() < key_at) return unexpected(RssError::DataTooShort);
    cfg.table_len = static_cast<uint16_t>(table_len);
    for (uint32_t i = 0; i < table_len; ++i) {
        cfg.table[i] = le16(kHead + i * 2);
        if (cfg.table[i] >= max_pairs) return unexpected(RssError::TableQueueOutOfRange);
    }
    if (cfg.unclassified_queue >= max_pairs) return unexpected(RssError::UnclassifiedOutOfRange);
    cfg.max_tx_vq = le16(key_at - 3);
    if (cfg.max_tx_vq == 0 || cfg.max_tx_vq > max_pairs) {
        return unexpected(RssError::MaxTxVqOutOfRange);
    }
    if (const auto e = parse_key(d, key_at, cfg.hash_types, cfg.key, cfg.key_len)) {
        return unexpected(*e);
    }
    return cfg;
}

std::size_t serialize_rss_config(const RssConfig& cfg,
                                 std::span<uint8_t, kRssConfigMaxBytes> out) noexcept {
    std::size_t n = 0;
    auto le16 = [&](uint16_t v) {
        out[n++] = static_cast<uint8_t>(v & 0xffu);
        out[n++] = static_cast<uint8_t>(v >> 8);
    };
    // Our own config: the caps keep a malformed one inside `out`.
    const uint16_t table_len =
        std::clamp<uint16_t>(cfg.table_len, 1, v::VIRTIO_NET_RSS_MAX_TABLE_LEN);
    const uint8_t key_len = std::min<uint8_t>(cfg.key_len, v::VIRTIO_NET_RSS_MAX_KEY_SIZE);
    le16(static_cast<uint16_t>(cfg.hash_types & 0xffffu));
    le16(static_cast<uint16_t>(cfg.hash_types >> 16));
    le16(static_cast<uint16_t>(table_len - 1u));  // indirection_table_mask
    le16(cfg.unclassified_queue);
    for (uint16_t i = 0; i < table_len; ++i) le16(cfg.table[i]);
    le16(cfg.max_tx_vq);
    out[n++] = key_len;
    std::copy_n(cfg.key.begin(), key_len, out.begin() + static_cast<std::ptrdiff_t>(n));
    return n + key_len;
}

std::vector<uint8_t> serialize_rss_config(const RssConfig& cfg) {
    std::array<uint8_t, kRssConfigMaxBytes> buf{};
    const std::size_t n = serialize_rss_config(cfg, buf);
    return {buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n)};
}

Result<HashConfig, RssError> parse_hash_config(std::span<const uint8_t> d) noexcept {
    // le32 hash_types, le16 reserved[4], u8 hash_key_length.
    constexpr uint32_t kKeyAt = v::kHashConfigFixedBytes;
    if (d.size() < kKeyAt) return unexpected(RssError::DataTooShort);
    HashConfig cfg;
    cfg.hash_types = uint32_t{d[0]} | uint32_t{d[1]} << 8 | uint32_t{d[2]} << 16 |
                     uint32_t{d[3]} << 24;
    // Rule (as RSS_CONFIG's): no hash type the device does not offer.
    if ((cfg.hash_types & ~kRssSupportedHashTypes) != 0) {
        return unexpected(RssError::UnsupportedHashType);
    }
    if (const auto e = parse_key(d, kKeyAt, cfg.hash_types, cfg.key, cfg.key_len)) {
        return unexpected(*e);
    }
    return cfg;
}

std::size_t serialize_hash_config(const HashConfig& cfg,
                                  std::span<uint8_t, kHashConfigMaxBytes> out) noexcept {
    std::fill(out.begin(), out.end(), uint8_t{0});  // reserved[4]: zeroes
    for (uint32_t i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(cfg.hash_types >> (8 * i));
    // Our own config: the cap keeps a malformed one inside `out`.
    const uint8_t key_len = std::min<uint8_t>(cfg.key_len, v::VIRTIO_NET_RSS_MAX_KEY_SIZE);
    out[v::kHashConfigFixedBytes - 1] = key_len;
    std::copy_n(cfg.key.begin(), key_len, out.begin() + v::kHashConfigFixedBytes);
    return v::kHashConfigFixedBytes + key_len;
}

RxSteering select_rx_queue(const RssConfig& cfg, std::span<const uint8_t> frame) noexcept {
    return select_rx_queue(cfg, hash_head(frame), hash_frame_len(frame));
}

RxSteering select_rx_queue(const RssConfig& cfg, std::span<const uint8_t> head,
                           uint32_t frame_len) noexcept {
    const HashInput in = extract_hash_input(head, frame_len, cfg.hash_types);
    if (in.hash_report == v::VIRTIO_NET_HASH_REPORT_NONE)
        return {cfg.unclassified_queue, 0, in.hash_report};
    const uint32_t hash = toeplitz_hash({cfg.key.data(), cfg.key_len}, in.span());
    return {cfg.table[hash & (cfg.table_len - 1u)], hash, in.hash_report};
}

RxSteering hash_frame(const HashConfig& cfg, std::span<const uint8_t> head,
                      uint32_t frame_len) noexcept {
    const HashInput in = extract_hash_input(head, frame_len, cfg.hash_types);
    if (in.hash_report == v::VIRTIO_NET_HASH_REPORT_NONE) return {};
    return {0, toeplitz_hash({cfg.key.data(), cfg.key_len}, in.span()), in.hash_report};
}

}  // namespace pvnet::net
