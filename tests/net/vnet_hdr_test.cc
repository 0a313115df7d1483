// validate_tx_hdr: one table, a good and a bad case for every rule (issue 5),
// then what the validated header handed to the receiver looks like.
#include "pvnet/net/vnet_hdr.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pvnet::net {
namespace {

namespace v = virtio;
using E = HdrError;

constexpr uint8_t kCsum = v::VIRTIO_NET_HDR_F_NEEDS_CSUM;
constexpr uint8_t kTcp4 = v::VIRTIO_NET_HDR_GSO_TCPV4;
constexpr uint8_t kTcp6 = v::VIRTIO_NET_HDR_GSO_TCPV6;
constexpr uint8_t kUfo = v::VIRTIO_NET_HDR_GSO_UDP;
constexpr uint8_t kUso = v::VIRTIO_NET_HDR_GSO_UDP_L4;
constexpr uint8_t kEcn = v::VIRTIO_NET_HDR_GSO_ECN;

struct Fields {
    uint8_t flags = 0;
    uint8_t gso_type = 0;
    uint16_t hdr_len = 0;
    uint16_t gso_size = 0;
    uint16_t csum_start = 0;
    uint16_t csum_offset = 0;
};

v::virtio_net_hdr make(const Fields& f) {
    v::virtio_net_hdr h{};
    h.flags = f.flags;
    h.gso_type = f.gso_type;
    h.hdr_len.set(f.hdr_len);
    h.gso_size.set(f.gso_size);
    h.csum_start.set(f.csum_start);
    h.csum_offset.set(f.csum_offset);
    return h;
}

Offloads without(bool Offloads::*which) {
    Offloads o = Offloads::all();
    o.*which = false;
    return o;
}

/// Every offload but HOST_HDRLEN: hdr_len is a hint, as without the feature.
const Offloads kHint = without(&Offloads::hdr_len);

// Ethernet 14 + IPv4 20 + TCP 20 = 54; IPv6 makes it 74; UDP over IPv4 42.
constexpr Fields kTso4{kCsum, kTcp4, 54, 1448, 34, 16};
constexpr Fields kTso6{kCsum, kTcp6, 74, 1440, 54, 16};
constexpr Fields kUso4{kCsum, kUso, 42, 1472, 34, 6};
constexpr Fields kUfo4{kCsum, kUfo, 42, 1472, 34, 6};
constexpr Fields kPartial{kCsum, 0, 0, 0, 34, 16};  // checksum offload only

Fields with_flags(Fields f, uint8_t flags) {
    f.flags = flags;
    return f;
}
Fields with_gso(Fields f, uint8_t gso_type) {
    f.gso_type = gso_type;
    return f;
}
Fields with_gso_size(Fields f, uint16_t n) {
    f.gso_size = n;
    return f;
}
Fields with_hdr_len(Fields f, uint16_t n) {
    f.hdr_len = n;
    return f;
}
Fields with_csum(Fields f, uint16_t start, uint16_t offset) {
    f.csum_start = start;
    f.csum_offset = offset;
    return f;
}

struct Case {
    E rule;     ///< the rule this case exercises
    bool good;  ///< passes (good) or fails with `rule` (bad)
    const char* name;
    Fields f;
    uint32_t frame_bytes;
    Offloads off = kHint;
};

const std::vector<Case>& cases() {
    static const std::vector<Case> c = {
        {E::FrameTooShort, true, "eth_header_only", {}, 14},
        {E::FrameTooShort, false, "below_eth_header", {}, 13},

        {E::UnknownFlag, true, "no_flags", {}, 60},
        {E::UnknownFlag, false, "flag_bit_3", with_flags({}, 0x08), 60},
        {E::UnknownFlag, false, "flag_bit_7", with_flags({}, 0x80), 60},

        {E::FlagNotForTx, true, "needs_csum", kPartial, 60},
        {E::FlagNotForTx, false, "data_valid", with_flags({}, v::VIRTIO_NET_HDR_F_DATA_VALID), 60},
        {E::FlagNotForTx, false, "rsc_info", with_flags({}, v::VIRTIO_NET_HDR_F_RSC_INFO), 60},

        {E::CsumNotNegotiated, true, "csum_negotiated", kPartial, 60},
        {E::CsumNotNegotiated, false, "csum_not_negotiated", kPartial, 60,
         without(&Offloads::csum)},

        {E::BadGsoType, true, "tcpv4", kTso4, 54 + 2896},
        {E::BadGsoType, true, "tcpv6", kTso6, 74 + 2880},
        {E::BadGsoType, true, "udp_ufo", kUfo4, 42 + 2944},
        {E::BadGsoType, true, "udp_l4", kUso4, 42 + 2944},
        {E::BadGsoType, false, "type_2", with_gso(kTso4, 2), 2950},
        {E::BadGsoType, false, "type_6", with_gso(kTso4, 6), 2950},
        {E::BadGsoType, false, "type_0x7f", with_gso(kTso4, 0x7f), 2950},

        {E::EcnWithoutTcp, true, "ecn_tcpv4", with_gso(kTso4, kTcp4 | kEcn), 2950},
        {E::EcnWithoutTcp, true, "ecn_tcpv6", with_gso(kTso6, kTcp6 | kEcn), 2954},
        {E::EcnWithoutTcp, false, "ecn_alone", with_gso({}, kEcn), 60},
        {E::EcnWithoutTcp, false, "ecn_ufo", with_gso(kUfo4, kUfo | kEcn), 2986},
        {E::EcnWithoutTcp, false, "ecn_uso", with_gso(kUso4, kUso | kEcn), 2986},

        {E::GsoNotNegotiated, true, "tso4_negotiated", kTso4, 2950},
        {E::GsoNotNegotiated, false, "tso4", kTso4, 2950, without(&Offloads::tso4)},
        {E::GsoNotNegotiated, false, "tso6", kTso6, 2954, without(&Offloads::tso6)},
        {E::GsoNotNegotiated, false, "ufo", kUfo4, 2986, without(&Offloads::ufo)},
        {E::GsoNotNegotiated, false, "uso", kUso4, 2986, without(&Offloads::uso)},

        {E::EcnNotNegotiated, true, "ecn_negotiated", with_gso(kTso4, kTcp4 | kEcn), 2950},
        {E::EcnNotNegotiated, false, "ecn_not_negotiated", with_gso(kTso4, kTcp4 | kEcn), 2950,
         without(&Offloads::ecn)},

        {E::GsoSizeZero, true, "zero_without_gso", with_gso_size({}, 0), 60},
        {E::GsoSizeZero, true, "nonzero_ignored_without_gso", with_gso_size({}, 1448), 60},
        {E::GsoSizeZero, false, "zero_with_gso", with_gso_size(kTso4, 0), 2950},

        {E::GsoSizeByFrags, true, "largest_mss", with_gso_size(kTso4, 0xfffe), 2950},
        {E::GsoSizeByFrags, false, "gso_by_frags", with_gso_size(kTso4, 0xffff), 2950},

        {E::CsumStartBeforeL4, true, "start_at_ipv4_min", with_csum(kPartial, 20, 16), 60},
        {E::CsumStartBeforeL4, false, "start_below_ipv4_min", with_csum(kPartial, 19, 16), 60},
        {E::CsumStartBeforeL4, true, "tcpv6_start_at_ipv6_min", with_csum(kTso6, 40, 16), 2954},
        {E::CsumStartBeforeL4, false, "tcpv6_start_below_ipv6_min", with_csum(kTso6, 39, 16), 2954},

        // start + 18 fits 100 bytes but the 20-byte TCP header does not.
        {E::CsumBeyondFrame, true, "tcp_header_fits", with_csum(kTso4, 80, 16), 100},
        {E::CsumBeyondFrame, false, "tcp_header_past_frame", with_csum(kTso4, 81, 16), 100},
        {E::CsumBeyondFrame, true, "tcpv6_header_fits", with_csum(kTso6, 80, 16), 100},
        {E::CsumBeyondFrame, false, "tcpv6_header_past_frame", with_csum(kTso6, 81, 16), 100},

        {E::CsumOffsetNotL4, true, "tcp_check_field", kTso4, 2950},
        {E::CsumOffsetNotL4, false, "tcp_offset_6", with_csum(kTso4, 34, 6), 2950},
        {E::CsumOffsetNotL4, true, "udp_check_field", kUso4, 2986},
        {E::CsumOffsetNotL4, false, "udp_offset_16", with_csum(kUso4, 34, 16), 2986},

        // Without NEEDS_CSUM, tun needs the minimal network + transport header.
        {E::GsoFrameTooShort, true, "tcpv4_40", with_flags(with_hdr_len(kTso4, 0), 0), 40},
        {E::GsoFrameTooShort, false, "tcpv4_39", with_flags(with_hdr_len(kTso4, 0), 0), 39},
        {E::GsoFrameTooShort, true, "tcpv6_60", with_flags(with_hdr_len(kTso6, 0), 0), 60},
        {E::GsoFrameTooShort, false, "tcpv6_59", with_flags(with_hdr_len(kTso6, 0), 0), 59},

        {E::UsoWithoutCsum, true, "uso_with_csum", kUso4, 2986},
        {E::UsoWithoutCsum, false, "uso_without_csum", with_flags(kUso4, 0), 2986},

        // p_off 42 + 64 segments of 100 bytes.
        {E::UsoTooManySegments, true, "64_segments", with_gso_size(kUso4, 100), 42 + 6400},
        {E::UsoTooManySegments, false, "65_segments", with_gso_size(kUso4, 100), 42 + 6401},

        {E::HdrLenBeyondFrame, true, "hdr_len_is_frame", with_hdr_len({}, 100), 100},
        {E::HdrLenBeyondFrame, false, "hdr_len_past_frame", with_hdr_len({}, 101), 100},
        // tun raises hdr_len to csum_start + csum_offset + 2 first.
        {E::HdrLenBeyondFrame, true, "csum_field_ends_frame", with_csum(kPartial, 82, 16), 100},
        {E::HdrLenBeyondFrame, false, "csum_field_past_frame", with_csum(kPartial, 83, 16), 100},

        {E::HdrLenBelowEth, true, "hdr_len_zero", with_hdr_len({}, 0), 60},
        {E::HdrLenBelowEth, true, "hdr_len_eth", with_hdr_len({}, 14), 60},
        {E::HdrLenBelowEth, false, "hdr_len_13", with_hdr_len({}, 13), 60},

        {E::HdrLenBelowTransport, true, "exact_hdr_len", kTso4, 2950, Offloads::all()},
        {E::HdrLenBelowTransport, false, "short_hdr_len", with_hdr_len(kTso4, 53), 2950,
         Offloads::all()},
        {E::HdrLenBelowTransport, true, "short_hdr_len_is_a_hint", with_hdr_len(kTso4, 53), 2950},
    };
    return c;
}

class VnetHdrRule : public testing::TestWithParam<Case> {};

TEST_P(VnetHdrRule, GoodPassesBadFailsWithItsRule) {
    const Case& c = GetParam();
    const auto r = validate_tx_hdr(make(c.f), c.frame_bytes, c.off);
    if (c.good) {
        EXPECT_TRUE(r.has_value()) << to_string(r.error());
    } else {
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error(), c.rule) << to_string(r.error());
    }
}

INSTANTIATE_TEST_SUITE_P(Table, VnetHdrRule, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) {
                             return std::string(i.param.good ? "good_" : "bad_") + i.param.name;
                         });

TEST(VnetHdrTable, EveryRuleHasAGoodAndABadCase) {
    std::set<E> good, bad;
    for (const Case& c : cases()) (c.good ? good : bad).insert(c.rule);
    for (std::size_t i = 0; i < static_cast<std::size_t>(E::Count); ++i) {
        const auto e = static_cast<E>(i);
        EXPECT_TRUE(good.count(e)) << "no good case for " << to_string(e);
        EXPECT_TRUE(bad.count(e)) << "no bad case for " << to_string(e);
    }
}

TEST(VnetHdrToString, NamesEveryRuleDistinctly) {
    std::set<std::string_view> seen;
    for (std::size_t i = 0; i < static_cast<std::size_t>(E::Count); ++i) {
        const std::string_view s = to_string(static_cast<E>(i));
        EXPECT_NE(s, "unknown HdrError");
        EXPECT_TRUE(seen.insert(s).second) << s;
    }
    EXPECT_EQ(to_string(E::Count), "unknown HdrError");
}

TEST(VnetHdrDelivered, LargeGsoKeepsItsFieldsWithOneBuffer) {
    const auto r = validate_tx_hdr(make(kTso4), 54 + 2896, kHint);
    ASSERT_TRUE(r.has_value());
    const v::virtio_net_hdr& h = r.value();
    EXPECT_EQ(h.flags, kCsum);
    EXPECT_EQ(h.gso_type, kTcp4);
    EXPECT_EQ(h.gso_size.get(), 1448);
    EXPECT_EQ(h.hdr_len.get(), 54);
    EXPECT_EQ(h.csum_start.get(), 34);
    EXPECT_EQ(h.csum_offset.get(), 16);
    EXPECT_EQ(h.num_buffers.get(), 1);
}

TEST(VnetHdrDelivered, GsoNoLargerThanOneSegmentBecomesNone) {
    // 54 bytes of headers + 1448 of payload: one segment, not really GSO.
    const auto r = validate_tx_hdr(make(kTso4), 54 + 1448, kHint);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r.value().gso_type, v::VIRTIO_NET_HDR_GSO_NONE);
    EXPECT_EQ(r.value().gso_size.get(), 0);
    EXPECT_EQ(r.value().hdr_len.get(), 0);
    EXPECT_EQ(r.value().flags, kCsum);  // the checksum is still to be done
    EXPECT_EQ(validate_tx_hdr(make(kTso4), 54 + 1449, kHint).value().gso_type, kTcp4);
}

TEST(VnetHdrDelivered, UfoSizeExcludesTheUdpHeader) {
    // UFO's gso_size may not count the UDP header: 1480 bytes past the IP header is one segment.
    const Fields f = with_gso_size(kUfo4, 1480);
    EXPECT_EQ(validate_tx_hdr(make(f), 34 + 1480, kHint).value().gso_type,
              v::VIRTIO_NET_HDR_GSO_NONE);
    EXPECT_EQ(validate_tx_hdr(make(f), 34 + 1481, kHint).value().gso_type, kUfo);
}

TEST(VnetHdrDelivered, WithoutGsoSizeAndHdrLenAreCleared) {
    const auto r = validate_tx_hdr(make(with_hdr_len(with_gso_size({}, 1448), 54)), 60, kHint);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r.value().gso_size.get(), 0);
    EXPECT_EQ(r.value().hdr_len.get(), 0);
    EXPECT_EQ(r.value().csum_start.get(), 0);
    EXPECT_EQ(r.value().num_buffers.get(), 1);
}

TEST(VnetHdrDelivered, HintHdrLenIsRaisedToCoverTheChecksum) {
    const auto r = validate_tx_hdr(make(with_hdr_len(kTso4, 20)), 2950, kHint);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r.value().hdr_len.get(), 34 + 16 + 2);
}

TEST(VnetHdrDelivered, IsAcceptedAgain) {
    for (const Case& c : cases()) {
        if (!c.good) continue;
        const auto r = validate_tx_hdr(make(c.f), c.frame_bytes, c.off);
        ASSERT_TRUE(r.has_value()) << c.name;
        EXPECT_TRUE(validate_tx_hdr(r.value(), c.frame_bytes, c.off).has_value()) << c.name;
    }
}

}  // namespace
}  // namespace pvnet::net
