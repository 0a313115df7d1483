// RSS (issue 12): the Toeplitz hash against Microsoft's verification vectors,
// the hash input taken from frames built here, the indirection table, and
// every rejection of a hostile VIRTIO_NET_CTRL_MQ_RSS_CONFIG.
#include "pvnet/net/flow_hash.h"
#include "pvnet/net/rss.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace pvnet::net {
namespace {

namespace v = virtio;
using Bytes = std::vector<uint8_t>;

// Microsoft, "Verifying the RSS Hash Calculation" (Windows driver docs,
// learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation):
// the key, and for each (destination, source) pair the hash of the addresses
// alone and of addresses plus TCP ports. The input is source address,
// destination address, source port, destination port.
constexpr std::array<uint8_t, 40> kMsKey = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

struct Vector {
    const char* dst;
    uint16_t dport;
    const char* src;
    uint16_t sport;
    uint32_t ip_only;
    uint32_t with_tcp;
};

constexpr Vector kIpv4Vectors[] = {
    {"161.142.100.80", 1766, "66.9.149.187", 2794, 0x323e8fc2, 0x51ccc178},
    {"65.69.140.83", 4739, "199.92.111.2", 14230, 0xd718262a, 0xc626b0ea},
    {"12.22.207.184", 38024, "24.19.198.95", 12898, 0xd2d0a5de, 0x5c2b394a},
    {"209.142.163.6", 2217, "38.27.205.30", 48228, 0x82989176, 0xafc7327f},
    {"202.188.127.2", 1303, "153.39.163.191", 44251, 0x5d1809c5, 0x10e828a2},
};

constexpr Vector kIpv6Vectors[] = {
    {"3ffe:2501:200:3::1", 1766, "3ffe:2501:200:1fff::7", 2794, 0x2cc18cd5, 0x40207d3d},
    {"ff02::1", 4739, "3ffe:501:8::260:97ff:fe40:efab", 14230, 0x0f0c461c, 0xdde51bbf},
    {"fe80::200:f8ff:fe21:67cf", 38024, "3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, 0x4b61e985,
     0x02d1feef},
};

constexpr uint32_t kAllTypes = kRssSupportedHashTypes;
constexpr uint8_t kTcp = 6;
constexpr uint8_t kUdp = 17;

Bytes addr(int family, const char* text) {
    Bytes b(family == AF_INET ? 4 : 16);
    EXPECT_EQ(inet_pton(family, text, b.data()), 1) << text;
    return b;
}

void put16(Bytes& b, std::size_t at, uint16_t x) {
    b[at] = static_cast<uint8_t>(x >> 8);
    b[at + 1] = static_cast<uint8_t>(x);
}

/// The raw Toeplitz input of a vector.
Bytes tuple(int family, const Vector& t, bool ports) {
    Bytes in = addr(family, t.src);
    const Bytes d = addr(family, t.dst);
    in.insert(in.end(), d.begin(), d.end());
    if (ports) {
        in.resize(in.size() + 4);
        put16(in, in.size() - 4, t.sport);
        put16(in, in.size() - 2, t.dport);
    }
    return in;
}

/// Ethernet header (with an optional 802.1Q tag) for `ethertype`.
Bytes eth(uint16_t ethertype, bool vlan) {
    Bytes f(12, 0x02);
    if (vlan) {
        f.resize(16);
        put16(f, 12, 0x8100);
        put16(f, 14, 42);  // VID 42
    }
    f.resize(f.size() + 2);
    put16(f, f.size() - 2, ethertype);
    return f;
}

/// L4 header with the vector's ports: TCP (20 bytes) or UDP (8).
Bytes l4(uint8_t proto, const Vector& t) {
    Bytes h(proto == kTcp ? 20 : 8, 0);
    put16(h, 0, t.sport);
    put16(h, 2, t.dport);
    if (proto == kTcp) h[12] = 5 << 4;
    if (proto == kUdp) put16(h, 4, 8);
    return h;
}

struct V4 {
    uint8_t proto = kTcp;
    uint16_t frag_off = 0;
    bool vlan = false;
    uint8_t ihl = 5;
    std::size_t pad = 0;  ///< Ethernet padding after the IP packet
};

Bytes ipv4_frame(const Vector& t, const V4& o = {}) {
    Bytes f = eth(0x0800, o.vlan);
    const std::size_t ip = f.size();
    f.resize(ip + o.ihl * 4u, 0);
    f[ip] = static_cast<uint8_t>(0x40 | o.ihl);
    put16(f, ip + 6, o.frag_off);
    f[ip + 8] = 64;
    f[ip + 9] = o.proto;
    const Bytes s = addr(AF_INET, t.src), d = addr(AF_INET, t.dst);
    std::memcpy(&f[ip + 12], s.data(), 4);
    std::memcpy(&f[ip + 16], d.data(), 4);
    const Bytes h = l4(o.proto, t);
    f.insert(f.end(), h.begin(), h.end());
    put16(f, ip + 2, static_cast<uint16_t>(f.size() - ip));
    f.resize(f.size() + o.pad, 0);
    return f;
}

/// IPv6 with `ext` (each: next-header value, then its bytes) before the L4 header.
Bytes ipv6_frame(const Vector& t, uint8_t proto, std::vector<std::pair<uint8_t, Bytes>> ext = {},
                 bool vlan = false) {
    Bytes f = eth(0x86dd, vlan);
    const std::size_t ip = f.size();
    f.resize(ip + 40, 0);
    f[ip] = 0x60;
    f[ip + 7] = 64;
    const Bytes s = addr(AF_INET6, t.src), d = addr(AF_INET6, t.dst);
    std::memcpy(&f[ip + 8], s.data(), 16);
    std::memcpy(&f[ip + 24], d.data(), 16);
    std::size_t next_at = ip + 6;
    for (auto& [type, body] : ext) {
        f[next_at] = type;
        next_at = f.size();
        f.insert(f.end(), body.begin(), body.end());
    }
    f[next_at] = proto;
    const Bytes h = l4(proto, t);
    f.insert(f.end(), h.begin(), h.end());
    put16(f, ip + 4, static_cast<uint16_t>(f.size() - ip - 40));
    return f;
}

TEST(Toeplitz, MicrosoftIpv4Vectors) {
    for (const Vector& t : kIpv4Vectors) {
        EXPECT_EQ(toeplitz_hash(kMsKey, tuple(AF_INET, t, false)), t.ip_only) << t.src;
        EXPECT_EQ(toeplitz_hash(kMsKey, tuple(AF_INET, t, true)), t.with_tcp) << t.src;
    }
}

TEST(Toeplitz, MicrosoftIpv6Vectors) {
    for (const Vector& t : kIpv6Vectors) {
        EXPECT_EQ(toeplitz_hash(kMsKey, tuple(AF_INET6, t, false)), t.ip_only) << t.src;
        EXPECT_EQ(toeplitz_hash(kMsKey, tuple(AF_INET6, t, true)), t.with_tcp) << t.src;
    }
}

TEST(Toeplitz, KeyBitsPastTheEndAreZero) {
    const Bytes in = tuple(AF_INET6, kIpv6Vectors[0], true);
    std::array<uint8_t, 40> padded{};
    std::copy_n(kMsKey.begin(), 16, padded.begin());
    EXPECT_EQ(toeplitz_hash(std::span(kMsKey).first(16), in), toeplitz_hash(padded, in));
    EXPECT_EQ(toeplitz_hash({}, in), 0u);
}

/// Hash input and hash under the Microsoft key.
struct Got {
    uint16_t report;
    uint32_t hash;
};
Got hash_of(const Bytes& frame, uint32_t types = kAllTypes) {
    const HashInput in = extract_hash_input(frame, types);
    return {in.hash_report, in.len == 0 ? 0u : toeplitz_hash(kMsKey, in.span())};
}

TEST(ExtractHashInput, Ipv4TcpAndUdp) {
    for (const Vector& t : kIpv4Vectors) {
        Got g = hash_of(ipv4_frame(t));
        EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
        EXPECT_EQ(g.hash, t.with_tcp);
        // The same tuple over UDP hashes alike (the ports sit at the same place).
        g = hash_of(ipv4_frame(t, {.proto = kUdp}));
        EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_UDPv4);
        EXPECT_EQ(g.hash, t.with_tcp);
    }
}

TEST(ExtractHashInput, Ipv6TcpAndUdp) {
    for (const Vector& t : kIpv6Vectors) {
        Got g = hash_of(ipv6_frame(t, kTcp));
        EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_TCPv6);
        EXPECT_EQ(g.hash, t.with_tcp);
        g = hash_of(ipv6_frame(t, kUdp));
        EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_UDPv6);
        EXPECT_EQ(g.hash, t.with_tcp);
    }
}

TEST(ExtractHashInput, EnabledTypesChooseTheInput) {
    const Vector& t = kIpv4Vectors[0];
    // TCP not enabled: the addresses alone, if IPv4 is.
    Got g = hash_of(ipv4_frame(t),
                    v::VIRTIO_NET_RSS_HASH_TYPE_IPv4 | v::VIRTIO_NET_RSS_HASH_TYPE_UDPv4);
    EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_IPv4);
    EXPECT_EQ(g.hash, t.ip_only);
    // Only TCPv4 enabled: a UDP packet gets no hash.
    EXPECT_EQ(hash_of(ipv4_frame(t, {.proto = kUdp}), v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4).report,
              v::VIRTIO_NET_HASH_REPORT_NONE);
    EXPECT_EQ(hash_of(ipv4_frame(t), v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4).report,
              v::VIRTIO_NET_HASH_REPORT_TCPv4);
    // IPv6 types do not hash IPv4, and the other way round.
    EXPECT_EQ(
        hash_of(ipv4_frame(t), v::VIRTIO_NET_RSS_HASH_TYPE_IPv6 | v::VIRTIO_NET_RSS_HASH_TYPE_TCPv6)
            .report,
        v::VIRTIO_NET_HASH_REPORT_NONE);
    EXPECT_EQ(hash_of(ipv6_frame(kIpv6Vectors[0], kTcp),
                      v::VIRTIO_NET_RSS_HASH_TYPE_IPv4 | v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4)
                  .report,
              v::VIRTIO_NET_HASH_REPORT_NONE);
    EXPECT_EQ(hash_of(ipv4_frame(t), 0).report, v::VIRTIO_NET_HASH_REPORT_NONE);
    // Another protocol (ICMP) hashes on the addresses.
    g = hash_of(ipv4_frame(t, {.proto = 1}));
    EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_IPv4);
    EXPECT_EQ(g.hash, t.ip_only);
}

TEST(ExtractHashInput, VlanTaggedOptionsAndPadding) {
    const Vector& t = kIpv4Vectors[1];
    EXPECT_EQ(hash_of(ipv4_frame(t, {.vlan = true})).hash, t.with_tcp);
    EXPECT_EQ(hash_of(ipv4_frame(t, {.ihl = 7})).hash, t.with_tcp);  // 8 bytes of options
    EXPECT_EQ(hash_of(ipv4_frame(t, {.proto = kUdp, .pad = 18})).hash, t.with_tcp);
    const Vector& t6 = kIpv6Vectors[1];
    EXPECT_EQ(hash_of(ipv6_frame(t6, kTcp, {}, true)).hash, t6.with_tcp);
    // A second tag (QinQ) is not parsed.
    Bytes qinq = ipv4_frame(t, {.vlan = true});
    Bytes inner = {0x81, 0x00, 0x00, 0x07};
    qinq.insert(qinq.begin() + 16, inner.begin(), inner.end());
    EXPECT_EQ(hash_of(qinq).report, v::VIRTIO_NET_HASH_REPORT_NONE);
}

TEST(ExtractHashInput, FragmentsHashOnAddresses) {
    const Vector& t = kIpv4Vectors[2];
    for (uint16_t frag_off : {uint16_t{0x2000}, uint16_t{0x0001}, uint16_t{0x2100}}) {
        const Got g = hash_of(ipv4_frame(t, {.frag_off = frag_off}));
        EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_IPv4) << frag_off;
        EXPECT_EQ(g.hash, t.ip_only) << frag_off;
    }
    // DF is no fragment.
    EXPECT_EQ(hash_of(ipv4_frame(t, {.frag_off = 0x4000})).hash, t.with_tcp);
    // A fragment with only TCPv4 enabled gets no hash.
    EXPECT_EQ(
        hash_of(ipv4_frame(t, {.frag_off = 0x2000}), v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4).report,
        v::VIRTIO_NET_HASH_REPORT_NONE);

    const Vector& t6 = kIpv6Vectors[2];
    const Got g = hash_of(ipv6_frame(t6, kTcp, {{44, Bytes(8, 0)}}));
    EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_IPv6);
    EXPECT_EQ(g.hash, t6.ip_only);
}

TEST(ExtractHashInput, Ipv6ExtensionHeadersAreWalked) {
    const Vector& t = kIpv6Vectors[0];
    Bytes hbh(8, 0), dst(16, 0);
    dst[1] = 1;  // hdr_ext_len 1: 16 bytes
    const Got g = hash_of(ipv6_frame(t, kTcp, {{0, hbh}, {60, dst}}));
    EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_TCPv6);
    EXPECT_EQ(g.hash, t.with_tcp);
    // An extension header claiming more than the packet holds: addresses only.
    Bytes f = ipv6_frame(t, kTcp, {{60, Bytes(8, 0)}});
    f[14 + 40 + 1] = 200;
    EXPECT_EQ(hash_of(f).report, v::VIRTIO_NET_HASH_REPORT_IPv6);
    // More extension headers than the walk allows: addresses only.
    EXPECT_EQ(
        hash_of(ipv6_frame(t, kTcp, std::vector<std::pair<uint8_t, Bytes>>(9, {60, hbh}))).report,
        v::VIRTIO_NET_HASH_REPORT_IPv6);
}

TEST(ExtractHashInput, IpLengthShortOfTheL4HeaderHashesAddresses) {
    const Vector& t = kIpv4Vectors[3];
    Bytes f = ipv4_frame(t);
    put16(f, 14 + 2, 20 + 10);  // total_length: the IP header and 10 bytes of TCP
    const Got g = hash_of(f);
    EXPECT_EQ(g.report, v::VIRTIO_NET_HASH_REPORT_IPv4);
    EXPECT_EQ(g.hash, t.ip_only);
}

TEST(ExtractHashInput, MalformedIpHeadersGetNoHash) {
    const Vector& t = kIpv4Vectors[0];
    auto none = [](const Bytes& f) {
        return extract_hash_input(f, kAllTypes).hash_report == v::VIRTIO_NET_HASH_REPORT_NONE;
    };
    Bytes f = ipv4_frame(t);
    f[14] = 0x44;  // IHL 4
    EXPECT_TRUE(none(f));
    f = ipv4_frame(t);
    f[14] = 0x65;  // version 6 behind ETH_P_IP
    EXPECT_TRUE(none(f));
    f = ipv4_frame(t);
    put16(f, 16, 19);  // total_length below the header
    EXPECT_TRUE(none(f));
    f = ipv4_frame(t);
    put16(f, 16, static_cast<uint16_t>(f.size() - 14 + 1));  // past the frame
    EXPECT_TRUE(none(f));
    f = ipv6_frame(kIpv6Vectors[0], kTcp);
    put16(f, 18, static_cast<uint16_t>(f.size() - 54 + 1));  // payload_length past the frame
    EXPECT_TRUE(none(f));
    f = ipv4_frame(t);
    put16(f, 12, 0x0806);  // ARP
    EXPECT_TRUE(none(f));
}

TEST(ExtractHashInput, EveryTruncationGetsNoHash) {
    const std::vector<Bytes> frames = {
        ipv4_frame(kIpv4Vectors[0]),
        ipv4_frame(kIpv4Vectors[0], {.proto = kUdp, .vlan = true}),
        ipv4_frame(kIpv4Vectors[0], {.ihl = 15}),
        ipv6_frame(kIpv6Vectors[0], kTcp, {{0, Bytes(8, 0)}}, true),
        ipv6_frame(kIpv6Vectors[1], kUdp),
    };
    for (const Bytes& full : frames) {
        ASSERT_NE(extract_hash_input(full, kAllTypes).hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
        for (std::size_t len = 0; len < full.size(); ++len) {
            // An exact-size copy, so that ASan sees a read past the cut.
            const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
            EXPECT_EQ(extract_hash_input(cut, kAllTypes).hash_report,
                      v::VIRTIO_NET_HASH_REPORT_NONE)
                << "length " << len << " of " << full.size();
        }
    }
}

/// The VIRTIO_NET_CTRL_MQ_RSS_CONFIG data; `mask` defaults to table.size() - 1.
struct Cmd {
    uint32_t hash_types = kAllTypes;
    std::vector<uint16_t> table = {0, 1, 2, 3};
    int mask = -1;
    uint16_t unclassified = 0;
    uint16_t max_tx_vq = 4;
    Bytes key{kMsKey.begin(), kMsKey.end()};
    int key_len = -1;  ///< hash_key_length if not key.size()
};

Bytes encode(const Cmd& c) {
    Bytes d;
    auto le16 = [&](uint32_t x) {
        d.push_back(static_cast<uint8_t>(x));
        d.push_back(static_cast<uint8_t>(x >> 8));
    };
    le16(c.hash_types & 0xffff);
    le16(c.hash_types >> 16);
    le16(static_cast<uint16_t>(c.mask >= 0 ? c.mask : static_cast<int>(c.table.size()) - 1));
    le16(c.unclassified);
    for (uint16_t q : c.table) le16(q);
    le16(c.max_tx_vq);
    d.push_back(static_cast<uint8_t>(c.key_len >= 0 ? c.key_len : static_cast<int>(c.key.size())));
    d.insert(d.end(), c.key.begin(), c.key.end());
    return d;
}

constexpr uint16_t kPairs = 4;

TEST(ParseRssConfig, ValidConfig) {
    const auto r = parse_rss_config(encode({.unclassified = 3, .max_tx_vq = 2}), kPairs);
    ASSERT_TRUE(r.has_value()) << to_string(r.error());
    const RssConfig& c = r.value();
    EXPECT_EQ(c.hash_types, kAllTypes);
    EXPECT_EQ(c.table_len, 4);
    EXPECT_EQ(c.table[0], 0);
    EXPECT_EQ(c.table[3], 3);
    EXPECT_EQ(c.unclassified_queue, 3);
    EXPECT_EQ(c.max_tx_vq, 2);
    EXPECT_EQ(c.key_len, 40);
    EXPECT_EQ(c.key, kMsKey);
    // The largest table, a short key (zero-padded), and no hashing with no key.
    ASSERT_TRUE(
        parse_rss_config(encode({.table = std::vector<uint16_t>(128, 1)}), kPairs).has_value());
    const auto shortkey = parse_rss_config(encode({.key = Bytes(5, 0xab)}), kPairs);
    ASSERT_TRUE(shortkey.has_value());
    EXPECT_EQ(shortkey.value().key_len, 5);
    EXPECT_EQ(shortkey.value().key[5], 0);
    EXPECT_TRUE(
        parse_rss_config(encode({.hash_types = 0, .table = {0}, .max_tx_vq = 1, .key = {}}), 1)
            .has_value());
}

// The driver's encoder writes what the device's parser takes back, byte for
// byte the wire struct (encode() is this test's own reading of the spec).
TEST(SerializeRssConfig, RoundTripsThroughTheParser) {
    const Cmd cmds[] = {
        {.unclassified = 3, .max_tx_vq = 2},
        {.table = std::vector<uint16_t>(128, 1)},
        {.hash_types = virtio::VIRTIO_NET_RSS_HASH_TYPE_UDPv4, .table = {2}, .key = Bytes(5, 0xab)},
        {.hash_types = 0, .table = {0}, .max_tx_vq = 1, .key = {}},
    };
    for (const Cmd& c : cmds) {
        SCOPED_TRACE(c.table.size());
        const Bytes wire = encode(c);
        const auto parsed = parse_rss_config(wire, kPairs);
        ASSERT_TRUE(parsed.has_value()) << to_string(parsed.error());
        const std::vector<uint8_t> out = serialize_rss_config(parsed.value());
        EXPECT_EQ(out, wire);
        std::array<uint8_t, kRssConfigMaxBytes> buf{};
        ASSERT_EQ(serialize_rss_config(parsed.value(), buf), wire.size());
        EXPECT_TRUE(std::equal(wire.begin(), wire.end(), buf.begin()));
        const auto again = parse_rss_config(out, kPairs);
        ASSERT_TRUE(again.has_value());
        EXPECT_EQ(again.value().table, parsed.value().table);
        EXPECT_EQ(again.value().key, parsed.value().key);
    }
    // The longest config is kRssConfigMaxBytes.
    RssConfig big;
    big.hash_types = kAllTypes;
    big.table_len = virtio::VIRTIO_NET_RSS_MAX_TABLE_LEN;
    big.key_len = virtio::VIRTIO_NET_RSS_MAX_KEY_SIZE;
    EXPECT_EQ(serialize_rss_config(big).size(), kRssConfigMaxBytes);
}

TEST(ParseRssConfig, HostileConfigsAreRejected) {
    struct Case {
        const char* what;
        Bytes data;
        RssError want;
    };
    Bytes trailing = encode({});
    trailing.push_back(0);
    const Bytes good = encode({});
    const std::vector<Case> cases = {
        {"empty", {}, RssError::DataTooShort},
        {"fixed part cut", Bytes(good.begin(), good.begin() + 7), RssError::DataTooShort},
        {"table cut", Bytes(good.begin(), good.begin() + 12), RssError::DataTooShort},
        {"key length missing", Bytes(good.begin(), good.begin() + 18), RssError::DataTooShort},
        {"key cut in half", Bytes(good.begin(), good.begin() + 19 + 20), RssError::DataTooShort},
        {"key cut by one", Bytes(good.begin(), good.end() - 1), RssError::DataTooShort},
        {"trailing bytes", trailing, RssError::TrailingBytes},
        {"unsupported hash type", encode({.hash_types = v::VIRTIO_NET_RSS_HASH_TYPE_IP_EX}),
         RssError::UnsupportedHashType},
        {"unknown hash type bit", encode({.hash_types = 1u << 31}), RssError::UnsupportedHashType},
        {"table of 3", encode({.table = {0, 1, 2}}), RssError::TableLengthNotPowerOfTwo},
        {"mask 0xfffe", encode({.table = {0}, .mask = 0xfffe}), RssError::TableLengthNotPowerOfTwo},
        {"mask 0xffff (length 65536)", encode({.table = {0}, .mask = 0xffff}),
         RssError::TableTooLong},
        {"table of 256", encode({.table = std::vector<uint16_t>(256, 0)}), RssError::TableTooLong},
        {"table queue = pairs", encode({.table = {0, 1, 2, kPairs}}),
         RssError::TableQueueOutOfRange},
        {"table queue bit 15", encode({.table = {0x8000, 1, 2, 3}}),
         RssError::TableQueueOutOfRange},
        {"unclassified = pairs", encode({.unclassified = kPairs}),
         RssError::UnclassifiedOutOfRange},
        {"max_tx_vq 0", encode({.max_tx_vq = 0}), RssError::MaxTxVqOutOfRange},
        {"max_tx_vq > pairs", encode({.max_tx_vq = kPairs + 1}), RssError::MaxTxVqOutOfRange},
        {"key of 41", encode({.key = Bytes(41, 1)}), RssError::KeyTooLong},
        {"key of 255", encode({.key = Bytes(255, 1)}), RssError::KeyTooLong},
        {"no key", encode({.key = {}}), RssError::KeyMissing},
    };
    for (const Case& c : cases) {
        const auto r = parse_rss_config(c.data, kPairs);
        ASSERT_FALSE(r.has_value()) << c.what;
        EXPECT_EQ(r.error(), c.want) << c.what << ": " << to_string(r.error());
    }
}

TEST(ParseRssConfig, EveryErrorHasItsOwnText) {
    std::set<std::string> seen;
    for (int i = 0; i < static_cast<int>(RssError::Count); ++i) {
        const std::string s(to_string(static_cast<RssError>(i)));
        EXPECT_NE(s, "unknown RssError");
        EXPECT_TRUE(seen.insert(s).second) << s;
    }
}

TEST(SelectRxQueue, IndirectionTableMapsTheHash) {
    std::vector<uint16_t> table(128);
    for (std::size_t i = 0; i < table.size(); ++i)
        table[i] = static_cast<uint16_t>((i * 3 + 1) % 4);
    const auto cfg = parse_rss_config(encode({.table = table, .unclassified = 2}), kPairs);
    ASSERT_TRUE(cfg.has_value());
    for (const Vector& t : kIpv4Vectors) {
        const RxSteering s = select_rx_queue(cfg.value(), ipv4_frame(t));
        EXPECT_EQ(s.hash, t.with_tcp);
        EXPECT_EQ(s.hash_report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
        EXPECT_EQ(s.queue, table[t.with_tcp & 127]) << t.src;
    }
    // 0x51ccc178 & 127 = 120: (120 * 3 + 1) % 4 = 1; 0xc626b0ea & 127 = 106: 3.
    EXPECT_EQ(select_rx_queue(cfg.value(), ipv4_frame(kIpv4Vectors[0])).queue, 1);
    EXPECT_EQ(select_rx_queue(cfg.value(), ipv4_frame(kIpv4Vectors[1])).queue, 3);
    // No hash: the unclassified queue, nothing to report.
    Bytes arp = ipv4_frame(kIpv4Vectors[0]);
    put16(arp, 12, 0x0806);
    const RxSteering s = select_rx_queue(cfg.value(), arp);
    EXPECT_EQ(s.queue, 2);
    EXPECT_EQ(s.hash, 0u);
    EXPECT_EQ(s.hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
}

TEST(SelectRxQueue, SmallTablesUseTheLowBits) {
    const auto one = parse_rss_config(encode({.table = {3}}), kPairs);
    ASSERT_TRUE(one.has_value());
    const auto two = parse_rss_config(encode({.table = {2, 1}}), kPairs);
    ASSERT_TRUE(two.has_value());
    for (const Vector& t : kIpv6Vectors) {
        EXPECT_EQ(select_rx_queue(one.value(), ipv6_frame(t, kUdp)).queue, 3);
        EXPECT_EQ(select_rx_queue(two.value(), ipv6_frame(t, kUdp)).queue,
                  (t.with_tcp & 1) ? 1 : 2);
    }
}

// flow_hash_symmetric (flow_hash.h): a request and its reply hash alike.
Vector reversed(const Vector& t) {
    return Vector{t.src, t.sport, t.dst, t.dport, 0, 0};
}

TEST(FlowHashSymmetric, BothDirectionsOfAFlowHashAlike) {
    for (const Vector& t : kIpv4Vectors) {
        for (const uint8_t proto : {kTcp, kUdp}) {
            const uint32_t h = flow_hash_symmetric(ipv4_frame(t, {.proto = proto}));
            EXPECT_NE(h, 0u) << t.src;
            EXPECT_EQ(flow_hash_symmetric(ipv4_frame(reversed(t), {.proto = proto})), h) << t.src;
        }
    }
    for (const Vector& t : kIpv6Vectors) {
        const uint32_t h = flow_hash_symmetric(ipv6_frame(t, kUdp));
        EXPECT_NE(h, 0u) << t.src;
        EXPECT_EQ(flow_hash_symmetric(ipv6_frame(reversed(t), kUdp)), h) << t.src;
    }
}

TEST(FlowHashSymmetric, PortsProtocolAndAddressesTellFlowsApart) {
    const Vector& t = kIpv4Vectors[0];
    const uint32_t h = flow_hash_symmetric(ipv4_frame(t, {.proto = kUdp}));
    Vector other_port = t;
    ++other_port.sport;
    EXPECT_NE(flow_hash_symmetric(ipv4_frame(other_port, {.proto = kUdp})), h);
    EXPECT_NE(flow_hash_symmetric(ipv4_frame(t, {.proto = kTcp})), h);
    EXPECT_NE(flow_hash_symmetric(ipv4_frame(kIpv4Vectors[1], {.proto = kUdp})), h);
    // Equal addresses: the ports alone order the endpoints.
    const Vector self{t.src, 1000, t.src, 2000, 0, 0};
    EXPECT_EQ(flow_hash_symmetric(ipv4_frame(self, {.proto = kUdp})),
              flow_hash_symmetric(ipv4_frame(reversed(self), {.proto = kUdp})));
}

TEST(FlowHashSymmetric, NoIpHeaderIsNoFlow) {
    Bytes arp = ipv4_frame(kIpv4Vectors[0]);
    put16(arp, 12, 0x0806);
    EXPECT_EQ(flow_hash_symmetric(arp), 0u);
    EXPECT_EQ(flow_hash_symmetric(Bytes(10, 0)), 0u);
    // Cut anywhere inside the IP header: no flow, no read past the end.
    const Bytes f = ipv4_frame(kIpv4Vectors[0], {.proto = kUdp});
    for (std::size_t n = 0; n < 14 + 20; ++n) {
        EXPECT_EQ(flow_hash_symmetric(std::span<const uint8_t>(f.data(), n)), 0u) << n;
    }
}

}  // namespace
}  // namespace pvnet::net
