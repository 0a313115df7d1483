// VIRTIO_NET_F_HASH_REPORT's side of net (issue 12): the
// VIRTIO_NET_CTRL_MQ_HASH_CONFIG parser and encoder (every rejection of a
// hostile one), hash_frame (the hash without steering), and the rule the
// device relies on: a frame's hash input is the same from a copy of its
// first kHashHeadBytes and its length as from the whole frame.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "pvnet/net/rss.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::net {
namespace {

namespace v = virtio;
using Bytes = std::vector<uint8_t>;

HashConfig hash_cfg(uint32_t types, uint8_t key_len = 40) {
    HashConfig c;
    c.hash_types = types;
    c.key_len = key_len;
    for (uint8_t i = 0; i < key_len; ++i) c.key[i] = static_cast<uint8_t>(0x6d ^ (i * 29));
    return c;
}

Bytes wire(const HashConfig& c) {
    std::array<uint8_t, kHashConfigMaxBytes> buf{};
    const std::size_t n = serialize_hash_config(c, buf);
    return {buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n)};
}

void put16(Bytes& f, std::size_t at, uint16_t x) {
    f.at(at) = static_cast<uint8_t>(x >> 8);
    f.at(at + 1) = static_cast<uint8_t>(x & 0xffu);
}

/// Ethernet + IPv4 + TCP 1000 -> 80, `payload` bytes after the TCP header.
Bytes tcp4_frame(uint32_t payload) {
    Bytes f(14 + 20 + 20 + payload, 0xab);
    put16(f, 12, 0x0800);
    f[14] = 0x45;
    f[15] = 0;
    put16(f, 16, static_cast<uint16_t>(20 + 20 + payload));
    put16(f, 20, 0);  // not a fragment
    f[23] = 6;
    for (std::size_t i = 0; i < 8; ++i) f[26 + i] = static_cast<uint8_t>(10 + i);
    put16(f, 34, 1000);
    put16(f, 36, 80);
    return f;
}

/// Ethernet + IPv6 + `ext` destination-options headers of 64 bytes each + TCP.
Bytes ipv6_tcp_frame(int ext) {
    Bytes f(14 + 40, 0);
    put16(f, 12, 0x86dd);
    f[14] = 0x60;
    for (std::size_t i = 0; i < 32; ++i) f[22 + i] = static_cast<uint8_t>(0x20 + i);
    std::size_t next_at = 14 + 6;
    for (int i = 0; i < ext; ++i) {
        f[next_at] = 60;  // IPPROTO_DSTOPTS
        next_at = f.size();
        Bytes h(64, 0);
        h[1] = 7;  // hdr_ext_len: (7 + 1) * 8 bytes
        f.insert(f.end(), h.begin(), h.end());
    }
    f[next_at] = 6;
    Bytes tcp(20, 0);
    put16(tcp, 0, 4000);
    put16(tcp, 2, 443);
    f.insert(f.end(), tcp.begin(), tcp.end());
    put16(f, 14 + 4, static_cast<uint16_t>(f.size() - 14 - 40));
    return f;
}

bool same_input(const HashInput& a, const HashInput& b) {
    return a.hash_report == b.hash_report && a.len == b.len &&
           std::equal(a.bytes.begin(), a.bytes.begin() + a.len, b.bytes.begin());
}

TEST(ParseHashConfig, ValidConfigRoundTripsThroughTheEncoder) {
    const HashConfig c = hash_cfg(kRssSupportedHashTypes);
    const Bytes w = wire(c);
    ASSERT_EQ(w.size(), v::kHashConfigFixedBytes + 40);
    const auto got = parse_hash_config(w);
    ASSERT_TRUE(got.has_value()) << to_string(got.error());
    EXPECT_EQ(got.value().hash_types, c.hash_types);
    EXPECT_EQ(got.value().key_len, 40);
    EXPECT_EQ(got.value().key, c.key);
    // hash_types 0 with no key: hashing off, a valid command.
    const auto off = parse_hash_config(wire(hash_cfg(0, 0)));
    ASSERT_TRUE(off.has_value());
    EXPECT_EQ(off.value().hash_types, 0u);
}

TEST(ParseHashConfig, ReservedWordsAreNotChecked) {
    // Linux before 6.5 sends max_tx_vq in reserved[3] (the RSS layout).
    Bytes w = wire(hash_cfg(v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4));
    w[10] = 2;
    EXPECT_TRUE(parse_hash_config(w).has_value());
}

TEST(ParseHashConfig, HostileConfigsAreRejected) {
    const Bytes good = wire(hash_cfg(kRssSupportedHashTypes));
    auto with = [&](std::size_t at, uint8_t x) {
        Bytes d = good;
        d.at(at) = x;
        return d;
    };
    Bytes long_key = with(12, 41);
    long_key.push_back(0);
    Bytes trailing = good;
    trailing.push_back(0);
    const Bytes cut_key(good.begin(), good.end() - 1);
    const Bytes cut_fixed(good.begin(), good.begin() + 12);
    const struct {
        const char* name;
        Bytes data;
        RssError why;
    } bad[] = {
        {"IP_EX", with(0, 0x40), RssError::UnsupportedHashType},
        {"TopBit", with(3, 0x80), RssError::UnsupportedHashType},
        {"KeyTooLong", long_key, RssError::KeyTooLong},
        {"KeyCut", cut_key, RssError::DataTooShort},
        {"FixedFieldsCut", cut_fixed, RssError::DataTooShort},
        {"Empty", {}, RssError::DataTooShort},
        {"Trailing", trailing, RssError::TrailingBytes},
        {"TypesWithoutKey", wire(hash_cfg(v::VIRTIO_NET_RSS_HASH_TYPE_IPv4, 0)),
         RssError::KeyMissing},
    };
    for (const auto& c : bad) {
        const auto got = parse_hash_config(c.data);
        ASSERT_FALSE(got.has_value()) << c.name;
        EXPECT_EQ(got.error(), c.why) << c.name;
    }
}

TEST(HashFrame, ReportsTheToeplitzHashOfTheInputAndNeverAQueue) {
    const HashConfig c = hash_cfg(kRssSupportedHashTypes);
    const Bytes f = tcp4_frame(100);
    const RxSteering got = hash_frame(c, f, static_cast<uint32_t>(f.size()));
    const HashInput in = extract_hash_input(f, c.hash_types);
    ASSERT_EQ(in.hash_report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
    EXPECT_EQ(got.hash_report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
    EXPECT_EQ(got.hash, toeplitz_hash({c.key.data(), c.key_len}, in.span()));
    EXPECT_EQ(got.queue, 0);
    // IPv4 alone enabled: the addresses.
    const RxSteering ip = hash_frame(hash_cfg(v::VIRTIO_NET_RSS_HASH_TYPE_IPv4), f,
                                     static_cast<uint32_t>(f.size()));
    EXPECT_EQ(ip.hash_report, v::VIRTIO_NET_HASH_REPORT_IPv4);
    // Hashing off: NONE, hash 0 (the spec's "Initially ... reports only NONE").
    const RxSteering none = hash_frame(HashConfig{}, f, static_cast<uint32_t>(f.size()));
    EXPECT_EQ(none.hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
    EXPECT_EQ(none.hash, 0u);
}

TEST(ExtractHashInput, TheHeadAndLengthGiveWhatTheWholeFrameGives) {
    std::vector<Bytes> frames = {tcp4_frame(0), tcp4_frame(200), tcp4_frame(9000),
                                 tcp4_frame(65000)};
    // L4 header inside the head, at its edge, and past it.
    for (int ext : {0, 2, 3, 4}) frames.push_back(ipv6_tcp_frame(ext));
    for (const Bytes& f : frames) {
        SCOPED_TRACE(f.size());
        const HashInput whole = extract_hash_input(f, kRssSupportedHashTypes);
        // An exact-size copy: ASan sees any read past the head.
        const Bytes head(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(
                                                    std::min<std::size_t>(f.size(), kHashHeadBytes)));
        const HashInput from_head =
            extract_hash_input(head, static_cast<uint32_t>(f.size()), kRssSupportedHashTypes);
        EXPECT_TRUE(same_input(whole, from_head));
        EXPECT_NE(whole.hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
    }
    // The walk stops at the head: TCP behind 3 x 64 bytes of options (offset
    // 14 + 40 + 192 = 246, ports to 250) is found, behind 4 it is not.
    EXPECT_EQ(extract_hash_input(ipv6_tcp_frame(3), kRssSupportedHashTypes).hash_report,
              v::VIRTIO_NET_HASH_REPORT_TCPv6);
    EXPECT_EQ(extract_hash_input(ipv6_tcp_frame(4), kRssSupportedHashTypes).hash_report,
              v::VIRTIO_NET_HASH_REPORT_IPv6);
    // The length still rules: a head claiming more IP bytes than the frame has.
    const Bytes f = tcp4_frame(100);
    EXPECT_EQ(extract_hash_input(f, static_cast<uint32_t>(f.size() - 1), kRssSupportedHashTypes)
                  .hash_report,
              v::VIRTIO_NET_HASH_REPORT_NONE);
}

}  // namespace
}  // namespace pvnet::net
