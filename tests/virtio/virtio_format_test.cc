// Wire formats of VIRTIO 1.2: little-endian accessors ("Basic Facilities"),
// split/packed ring structures (2.7, 2.8), virtio_net_hdr and
// virtio_net_config (5.1), the split-ring layout arithmetic and feature names.
// Sizes and offsets are checked at run time against numbers taken from the
// spec text, and the layout offsets against model structs built per size.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "pvnet/virtio/le.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::virtio {
namespace {

template <typename T>
std::array<uint8_t, sizeof(T)> raw_bytes(const T& v) {
    std::array<uint8_t, sizeof(T)> b{};
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
}

// The little-endian byte image of `v`, computed by shifting (independent of
// the host's byte order and of le.h).
template <std::size_t N>
std::array<uint8_t, N> le_image(uint64_t v) {
    std::array<uint8_t, N> b{};
    for (std::size_t i = 0; i < N; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    return b;
}

// ---------------------------------------------------------------------------
// Le16 / Le32 / Le64

TEST(LeWire, Le16SetStoresLittleEndianBytes) {
    Le16 v{};
    v.set(0x1234);
    EXPECT_EQ(raw_bytes(v), (std::array<uint8_t, 2>{0x34, 0x12}));
    EXPECT_EQ(v.get(), 0x1234);
}

TEST(LeWire, Le32SetStoresLittleEndianBytes) {
    Le32 v{};
    v.set(0x12345678u);
    EXPECT_EQ(raw_bytes(v), (std::array<uint8_t, 4>{0x78, 0x56, 0x34, 0x12}));
    EXPECT_EQ(v.get(), 0x12345678u);
}

TEST(LeWire, Le64SetStoresLittleEndianBytes) {
    Le64 v{};
    v.set(0x0102030405060708ull);
    EXPECT_EQ(raw_bytes(v),
              (std::array<uint8_t, 8>{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));
    EXPECT_EQ(v.get(), 0x0102030405060708ull);
}

TEST(LeWire, GetDecodesLittleEndianBytesWrittenByPeer) {
    const uint8_t b16[2] = {0xcd, 0xab};
    const uint8_t b32[4] = {0xef, 0xbe, 0xad, 0xde};
    const uint8_t b64[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
    Le16 v16{};
    Le32 v32{};
    Le64 v64{};
    std::memcpy(&v16, b16, sizeof b16);
    std::memcpy(&v32, b32, sizeof b32);
    std::memcpy(&v64, b64, sizeof b64);
    EXPECT_EQ(v16.get(), 0xabcd);
    EXPECT_EQ(v32.get(), 0xdeadbeefu);
    EXPECT_EQ(v64.get(), 0x1122334455667788ull);
}

TEST(LeWire, SetGetRoundTripsAndImageMatchesForEdgeValues) {
    const uint64_t values[] = {0,
                               1,
                               0x80,
                               0xff,
                               0x100,
                               0x7fff,
                               0x8000,
                               0xffff,
                               0x10000,
                               0x7fffffff,
                               0x80000000,
                               0xffffffff,
                               0x100000000ull,
                               0x8000000000000000ull,
                               0xfedcba9876543210ull,
                               0xffffffffffffffffull};
    for (uint64_t x : values) {
        SCOPED_TRACE(x);
        Le16 a{};
        Le32 b{};
        Le64 c{};
        a.set(static_cast<uint16_t>(x));
        b.set(static_cast<uint32_t>(x));
        c.set(x);
        EXPECT_EQ(a.get(), static_cast<uint16_t>(x));
        EXPECT_EQ(b.get(), static_cast<uint32_t>(x));
        EXPECT_EQ(c.get(), x);
        EXPECT_EQ(raw_bytes(a), le_image<2>(x));
        EXPECT_EQ(raw_bytes(b), le_image<4>(x));
        EXPECT_EQ(raw_bytes(c), le_image<8>(x));
    }
}

TEST(LeWire, EveryLe16ValueRoundTripsThroughItsByteImage) {
    for (uint32_t x = 0; x <= 0xffff; ++x) {
        Le16 v{};
        v.set(static_cast<uint16_t>(x));
        ASSERT_EQ(raw_bytes(v), le_image<2>(x)) << x;
        ASSERT_EQ(v.get(), x);
    }
}

TEST(LeWire, AccessorsHaveTheSizeOfTheirWireField) {
    EXPECT_EQ(sizeof(Le16), 2u);
    EXPECT_EQ(sizeof(Le32), 4u);
    EXPECT_EQ(sizeof(Le64), 8u);
}

// ---------------------------------------------------------------------------
// Split and packed ring structures (2.7, 2.8)

TEST(RingWire, VirtqDescIs16BytesWithSpecOffsets) {
    EXPECT_EQ(sizeof(virtq_desc), 16u);
    EXPECT_EQ(offsetof(virtq_desc, addr), 0u);
    EXPECT_EQ(offsetof(virtq_desc, len), 8u);
    EXPECT_EQ(offsetof(virtq_desc, flags), 12u);
    EXPECT_EQ(offsetof(virtq_desc, next), 14u);
}

TEST(RingWire, VirtqDescByteImageIsLittleEndianFieldByField) {
    virtq_desc d{};
    d.addr.set(0x1122334455667788ull);
    d.len.set(0x99aabbccu);
    d.flags.set(VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE);
    d.next.set(0x0102);
    const std::array<uint8_t, 16> want = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                                          0xcc, 0xbb, 0xaa, 0x99, 0x03, 0x00, 0x02, 0x01};
    EXPECT_EQ(raw_bytes(d), want);
}

TEST(RingWire, AvailAndUsedHeadersAreFlagsThenIdx) {
    EXPECT_EQ(sizeof(virtq_avail_hdr), 4u);
    EXPECT_EQ(offsetof(virtq_avail_hdr, flags), 0u);
    EXPECT_EQ(offsetof(virtq_avail_hdr, idx), 2u);
    EXPECT_EQ(sizeof(virtq_used_hdr), 4u);
    EXPECT_EQ(offsetof(virtq_used_hdr, flags), 0u);
    EXPECT_EQ(offsetof(virtq_used_hdr, idx), 2u);
}

TEST(RingWire, UsedElemIsIdThenLenAsLe32) {
    EXPECT_EQ(sizeof(virtq_used_elem), 8u);
    EXPECT_EQ(offsetof(virtq_used_elem, id), 0u);
    EXPECT_EQ(offsetof(virtq_used_elem, len), 4u);
    virtq_used_elem e{};
    e.id.set(0x00000102u);
    e.len.set(0x0a0b0c0du);
    EXPECT_EQ(raw_bytes(e), (std::array<uint8_t, 8>{0x02, 0x01, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a}));
}

TEST(RingWire, PackedDescAndEventSuppressionMatchSpec) {
    EXPECT_EQ(sizeof(vring_packed_desc), 16u);
    EXPECT_EQ(offsetof(vring_packed_desc, addr), 0u);
    EXPECT_EQ(offsetof(vring_packed_desc, len), 8u);
    EXPECT_EQ(offsetof(vring_packed_desc, id), 12u);
    EXPECT_EQ(offsetof(vring_packed_desc, flags), 14u);
    EXPECT_EQ(sizeof(vring_packed_desc_event), 4u);
    EXPECT_EQ(offsetof(vring_packed_desc_event, off_wrap), 0u);
    EXPECT_EQ(offsetof(vring_packed_desc_event, flags), 2u);
}

TEST(RingWire, FlagValuesMatchSpec) {
    EXPECT_EQ(VIRTQ_DESC_F_NEXT, 1);
    EXPECT_EQ(VIRTQ_DESC_F_WRITE, 2);
    EXPECT_EQ(VIRTQ_DESC_F_INDIRECT, 4);
    EXPECT_EQ(VIRTQ_AVAIL_F_NO_INTERRUPT, 1);
    EXPECT_EQ(VIRTQ_USED_F_NO_NOTIFY, 1);
    EXPECT_EQ(VIRTQ_DESC_F_AVAIL, 0x80);
    EXPECT_EQ(VIRTQ_DESC_F_USED, 0x8000);
    EXPECT_EQ(RING_EVENT_FLAGS_ENABLE, 0);
    EXPECT_EQ(RING_EVENT_FLAGS_DISABLE, 1);
    EXPECT_EQ(RING_EVENT_FLAGS_DESC, 2);
    EXPECT_EQ(kMaxQueueSize, 32768u);
}

// ---------------------------------------------------------------------------
// virtio-net (5.1)

TEST(NetWire, NetHdrIs12BytesIncludingNumBuffers) {
    EXPECT_EQ(sizeof(virtio_net_hdr), 12u);
    EXPECT_EQ(offsetof(virtio_net_hdr, flags), 0u);
    EXPECT_EQ(offsetof(virtio_net_hdr, gso_type), 1u);
    EXPECT_EQ(offsetof(virtio_net_hdr, hdr_len), 2u);
    EXPECT_EQ(offsetof(virtio_net_hdr, gso_size), 4u);
    EXPECT_EQ(offsetof(virtio_net_hdr, csum_start), 6u);
    EXPECT_EQ(offsetof(virtio_net_hdr, csum_offset), 8u);
    EXPECT_EQ(offsetof(virtio_net_hdr, num_buffers), 10u);
}

TEST(NetWire, NetHdrByteImageIsLittleEndian) {
    virtio_net_hdr h{};
    h.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h.gso_type = VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_ECN;
    h.hdr_len.set(0x0136);
    h.gso_size.set(0x05a8);
    h.csum_start.set(0x0022);
    h.csum_offset.set(0x0010);
    h.num_buffers.set(0x0203);
    const std::array<uint8_t, 12> want = {0x01, 0x81, 0x36, 0x01, 0xa8, 0x05,
                                          0x22, 0x00, 0x10, 0x00, 0x03, 0x02};
    EXPECT_EQ(raw_bytes(h), want);
}

TEST(NetWire, HashHdrIsTheNetHdrThenHashValueReportAndPadding) {
    // 5.1.6 "struct virtio_net_hdr_v1_hash": 20 bytes, what Linux and QEMU send.
    EXPECT_EQ(sizeof(virtio_net_hdr_v1_hash), 20u);
    EXPECT_EQ(offsetof(virtio_net_hdr_v1_hash, hdr), 0u);
    EXPECT_EQ(offsetof(virtio_net_hdr_v1_hash, hash_value), 12u);
    EXPECT_EQ(offsetof(virtio_net_hdr_v1_hash, hash_report), 16u);
    EXPECT_EQ(offsetof(virtio_net_hdr_v1_hash, padding_reserved), 18u);
    EXPECT_EQ(kHashHdrExtraBytes, 8u);
    virtio_net_hdr_v1_hash h{};
    h.hdr.num_buffers.set(1);
    h.hash_value.set(0x11223344);
    h.hash_report.set(VIRTIO_NET_HASH_REPORT_TCPv6);
    const std::array<uint8_t, 20> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
                                          0x44, 0x33, 0x22, 0x11, 5, 0, 0, 0};
    EXPECT_EQ(raw_bytes(h), want);
}

TEST(NetWire, HashReportAndHashTypeValuesMatchSpec) {
    // "VIRTIO_NET_HASH_TYPE_XXX = 1 << (VIRTIO_NET_HASH_REPORT_XXX - 1)".
    const std::pair<uint16_t, uint32_t> pairs[] = {
        {VIRTIO_NET_HASH_REPORT_IPv4, VIRTIO_NET_RSS_HASH_TYPE_IPv4},
        {VIRTIO_NET_HASH_REPORT_TCPv4, VIRTIO_NET_RSS_HASH_TYPE_TCPv4},
        {VIRTIO_NET_HASH_REPORT_UDPv4, VIRTIO_NET_RSS_HASH_TYPE_UDPv4},
        {VIRTIO_NET_HASH_REPORT_IPv6, VIRTIO_NET_RSS_HASH_TYPE_IPv6},
        {VIRTIO_NET_HASH_REPORT_TCPv6, VIRTIO_NET_RSS_HASH_TYPE_TCPv6},
        {VIRTIO_NET_HASH_REPORT_UDPv6, VIRTIO_NET_RSS_HASH_TYPE_UDPv6},
        {VIRTIO_NET_HASH_REPORT_IPv6_EX, VIRTIO_NET_RSS_HASH_TYPE_IP_EX},
        {VIRTIO_NET_HASH_REPORT_TCPv6_EX, VIRTIO_NET_RSS_HASH_TYPE_TCP_EX},
        {VIRTIO_NET_HASH_REPORT_UDPv6_EX, VIRTIO_NET_RSS_HASH_TYPE_UDP_EX},
    };
    for (const auto& [report, type] : pairs) EXPECT_EQ(type, 1u << (report - 1)) << report;
    EXPECT_EQ(VIRTIO_NET_HASH_REPORT_NONE, 0);
    EXPECT_EQ(VIRTIO_NET_HASH_REPORT_UDPv6_EX, 9);
}

TEST(NetWire, HashConfigFixedFieldsMatchRssConfigLayout) {
    // "Hash calculation": le32 hash_types; le16 reserved[4]; u8 hash_key_length,
    // reserved standing where RSS_CONFIG has its mask .. max_tx_vq.
    EXPECT_EQ(offsetof(virtio_net_hash_config, hash_types), 0u);
    EXPECT_EQ(offsetof(virtio_net_hash_config, reserved), 4u);
    EXPECT_EQ(offsetof(virtio_net_hash_config, hash_key_length), 12u);
    EXPECT_EQ(kHashConfigFixedBytes, 13u);
    EXPECT_EQ(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, 2);
}

TEST(NetWire, NetHdrConstantsMatchSpec) {
    EXPECT_EQ(VIRTIO_NET_HDR_F_NEEDS_CSUM, 1);
    EXPECT_EQ(VIRTIO_NET_HDR_F_DATA_VALID, 2);
    EXPECT_EQ(VIRTIO_NET_HDR_F_RSC_INFO, 4);
    EXPECT_EQ(VIRTIO_NET_HDR_GSO_NONE, 0);
    EXPECT_EQ(VIRTIO_NET_HDR_GSO_TCPV4, 1);
    EXPECT_EQ(VIRTIO_NET_HDR_GSO_UDP, 3);
    EXPECT_EQ(VIRTIO_NET_HDR_GSO_TCPV6, 4);
    EXPECT_EQ(VIRTIO_NET_HDR_GSO_UDP_L4, 5);
    EXPECT_EQ(VIRTIO_NET_HDR_GSO_ECN, 0x80);
    EXPECT_EQ(VIRTIO_NET_S_LINK_UP, 1);
}

TEST(NetWire, NetConfigLayoutMatchesSpec) {
    EXPECT_EQ(offsetof(virtio_net_config, mac), 0u);
    EXPECT_EQ(sizeof(virtio_net_config::mac), 6u);
    EXPECT_EQ(offsetof(virtio_net_config, status), 6u);
    EXPECT_EQ(offsetof(virtio_net_config, max_virtqueue_pairs), 8u);
    EXPECT_EQ(offsetof(virtio_net_config, mtu), 10u);
    EXPECT_EQ(offsetof(virtio_net_config, speed), 12u);
    EXPECT_EQ(offsetof(virtio_net_config, duplex), 16u);
    EXPECT_EQ(offsetof(virtio_net_config, rss_max_key_size), 17u);
    EXPECT_EQ(offsetof(virtio_net_config, rss_max_indirection_table_length), 18u);
    EXPECT_EQ(offsetof(virtio_net_config, supported_hash_types), 20u);
    EXPECT_EQ(sizeof(virtio_net_config), 24u);
}

TEST(NetWire, NetConfigByteImageIsLittleEndian) {
    virtio_net_config c{};
    const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
    std::memcpy(c.mac, mac, sizeof mac);
    c.status.set(VIRTIO_NET_S_LINK_UP);
    c.max_virtqueue_pairs.set(4);
    c.mtu.set(1500);
    c.speed.set(10000);
    c.duplex = 1;
    c.rss_max_key_size = 40;
    c.rss_max_indirection_table_length.set(128);
    c.supported_hash_types.set(0x1ff);
    const std::array<uint8_t, 24> want = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56,  // mac
                                          0x01, 0x00,                          // status
                                          0x04, 0x00,                          // pairs
                                          0xdc, 0x05,                          // mtu
                                          0x10, 0x27, 0x00, 0x00,              // speed
                                          0x01, 0x28,                          // duplex, key
                                          0x80, 0x00,                          // indir len
                                          0xff, 0x01, 0x00, 0x00};             // hash types
    EXPECT_EQ(raw_bytes(c), want);
}

// ---------------------------------------------------------------------------
// SplitRingLayout: checked against model structs laid out by the compiler
// from the spec's C declarations, for each queue size.

template <uint32_t N>
struct ModelAvail {
    Le16 flags;
    Le16 idx;
    Le16 ring[N];
    Le16 used_event;
};

template <uint32_t N>
struct ModelUsed {
    Le16 flags;
    Le16 idx;
    virtq_used_elem ring[N];
    Le16 avail_event;
};

template <uint32_t N>
void check_layout() {
    SCOPED_TRACE(N);
    using L = SplitRingLayout;
    EXPECT_EQ(L::desc_bytes(N), sizeof(virtq_desc) * N);
    EXPECT_EQ(L::desc_bytes(N), 16u * N);

    EXPECT_EQ(L::avail_flags_off(), offsetof(ModelAvail<N>, flags));
    EXPECT_EQ(L::avail_idx_off(), offsetof(ModelAvail<N>, idx));
    EXPECT_EQ(L::avail_ring_off(0), offsetof(ModelAvail<N>, ring));
    EXPECT_EQ(L::avail_ring_off(N - 1), offsetof(ModelAvail<N>, ring) + 2u * (N - 1));
    EXPECT_EQ(L::used_event_off(N), offsetof(ModelAvail<N>, used_event));
    EXPECT_EQ(L::avail_bytes(N), offsetof(ModelAvail<N>, used_event) + sizeof(Le16));
    EXPECT_EQ(L::avail_bytes(N), 6u + 2u * N);

    EXPECT_EQ(L::used_flags_off(), offsetof(ModelUsed<N>, flags));
    EXPECT_EQ(L::used_idx_off(), offsetof(ModelUsed<N>, idx));
    EXPECT_EQ(L::used_ring_off(0), offsetof(ModelUsed<N>, ring));
    EXPECT_EQ(L::used_ring_off(N - 1), offsetof(ModelUsed<N>, ring) + 8u * (N - 1));
    EXPECT_EQ(L::avail_event_off(N), offsetof(ModelUsed<N>, avail_event));
    EXPECT_EQ(L::used_bytes(N), offsetof(ModelUsed<N>, avail_event) + sizeof(Le16));
    EXPECT_EQ(L::used_bytes(N), 6u + 8u * N);
}

TEST(SplitRingLayout, OffsetsMatchSpecStructsForSeveralSizes) {
    check_layout<1>();
    check_layout<2>();
    check_layout<4>();
    check_layout<64>();
    check_layout<256>();
    check_layout<1024>();
    check_layout<4096>();
    check_layout<32768>();
}

TEST(SplitRingLayout, EventFieldsSitRightAfterTheLastRingSlot) {
    using L = SplitRingLayout;
    for (uint32_t n = 1; n <= kMaxQueueSize; n *= 2) {
        SCOPED_TRACE(n);
        EXPECT_EQ(L::used_event_off(n), L::avail_ring_off(n - 1) + 2u);
        EXPECT_EQ(L::avail_event_off(n), L::used_ring_off(n - 1) + sizeof(virtq_used_elem));
        EXPECT_EQ(L::used_event_off(n) + 2u, L::avail_bytes(n));
        EXPECT_EQ(L::avail_event_off(n) + 2u, L::used_bytes(n));
    }
    // Largest queue: the parts the spec sizes for 32768 entries.
    EXPECT_EQ(L::desc_bytes(kMaxQueueSize), 524288u);
    EXPECT_EQ(L::avail_bytes(kMaxQueueSize), 65542u);
    EXPECT_EQ(L::used_bytes(kMaxQueueSize), 262150u);
}

TEST(SplitRingLayout, AlignmentsMatchSpecTable) {
    EXPECT_EQ(SplitRingLayout::kDescAlign, 16u);
    EXPECT_EQ(SplitRingLayout::kAvailAlign, 2u);
    EXPECT_EQ(SplitRingLayout::kUsedAlign, 4u);
}

TEST(SplitRingLayout, FieldAtPointsAtTheOffsetGiven) {
    alignas(16) std::byte buf[64]{};
    EXPECT_EQ(static_cast<void*>(field_at<uint16_t>(buf, 6)), static_cast<void*>(buf + 6));
    EXPECT_EQ(static_cast<void*>(field_at<virtq_desc>(buf, 16)), static_cast<void*>(buf + 16));
}

// ---------------------------------------------------------------------------
// Feature bits and names

struct NamedFeature {
    unsigned bit;
    std::string_view spelled;
    unsigned spec_bit;
};

// Every feature constant in virtio_config.h, with the bit the spec assigns.
#define PVNET_FEATURE(name, spec) NamedFeature{name, #name, spec}
const std::vector<NamedFeature>& all_features() {
    static const std::vector<NamedFeature> v = {
        PVNET_FEATURE(VIRTIO_F_NOTIFY_ON_EMPTY, 24),
        PVNET_FEATURE(VIRTIO_F_ANY_LAYOUT, 27),
        PVNET_FEATURE(VIRTIO_RING_F_INDIRECT_DESC, 28),
        PVNET_FEATURE(VIRTIO_RING_F_EVENT_IDX, 29),
        PVNET_FEATURE(VIRTIO_F_VERSION_1, 32),
        PVNET_FEATURE(VIRTIO_F_ACCESS_PLATFORM, 33),
        PVNET_FEATURE(VIRTIO_F_RING_PACKED, 34),
        PVNET_FEATURE(VIRTIO_F_IN_ORDER, 35),
        PVNET_FEATURE(VIRTIO_NET_F_CSUM, 0),
        PVNET_FEATURE(VIRTIO_NET_F_GUEST_CSUM, 1),
        PVNET_FEATURE(VIRTIO_NET_F_CTRL_GUEST_OFFLOADS, 2),
        PVNET_FEATURE(VIRTIO_NET_F_MTU, 3),
        PVNET_FEATURE(VIRTIO_NET_F_MAC, 5),
        PVNET_FEATURE(VIRTIO_NET_F_GUEST_TSO4, 7),
        PVNET_FEATURE(VIRTIO_NET_F_GUEST_TSO6, 8),
        PVNET_FEATURE(VIRTIO_NET_F_GUEST_ECN, 9),
        PVNET_FEATURE(VIRTIO_NET_F_GUEST_UFO, 10),
        PVNET_FEATURE(VIRTIO_NET_F_HOST_TSO4, 11),
        PVNET_FEATURE(VIRTIO_NET_F_HOST_TSO6, 12),
        PVNET_FEATURE(VIRTIO_NET_F_HOST_ECN, 13),
        PVNET_FEATURE(VIRTIO_NET_F_HOST_UFO, 14),
        PVNET_FEATURE(VIRTIO_NET_F_MRG_RXBUF, 15),
        PVNET_FEATURE(VIRTIO_NET_F_STATUS, 16),
        PVNET_FEATURE(VIRTIO_NET_F_CTRL_VQ, 17),
        PVNET_FEATURE(VIRTIO_NET_F_CTRL_RX, 18),
        PVNET_FEATURE(VIRTIO_NET_F_MQ, 22),
        PVNET_FEATURE(VIRTIO_NET_F_NOTF_COAL, 53),
        PVNET_FEATURE(VIRTIO_NET_F_HASH_REPORT, 57),
        PVNET_FEATURE(VIRTIO_NET_F_RSS, 60),
    };
    return v;
}
#undef PVNET_FEATURE

TEST(FeatureBits, BitNumbersMatchSpec) {
    for (const NamedFeature& f : all_features()) {
        EXPECT_EQ(f.bit, f.spec_bit) << f.spelled;
        EXPECT_LT(f.bit, 64u) << f.spelled;
    }
}

TEST(FeatureBits, EveryFeatureHasANonEmptyUniqueName) {
    std::set<std::string_view> names;
    std::set<unsigned> bits;
    for (const NamedFeature& f : all_features()) {
        const std::string_view name = feature_name(f.bit);
        EXPECT_FALSE(name.empty()) << f.spelled;
        EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
        EXPECT_TRUE(bits.insert(f.bit).second) << "duplicate bit " << f.bit;
    }
    EXPECT_EQ(names.size(), all_features().size());
}

TEST(FeatureBits, NameIsTheSpecSpellingOfTheConstant) {
    for (const NamedFeature& f : all_features()) {
        EXPECT_EQ(feature_name(f.bit), f.spelled);
    }
}

TEST(FeatureBits, UnknownBitsHaveEmptyName) {
    std::set<unsigned> known;
    for (const NamedFeature& f : all_features()) known.insert(f.bit);
    for (unsigned bit = 0; bit < 128; ++bit) {
        if (known.count(bit) == 0) {
            EXPECT_EQ(feature_name(bit), "") << bit;
        }
    }
    EXPECT_EQ(feature_name(~0u), "");
}

TEST(FeatureBits, MaskAndHasFeatureSelectExactlyOneBit) {
    EXPECT_EQ(feature_mask(VIRTIO_NET_F_CSUM), 1ull);
    EXPECT_EQ(feature_mask(VIRTIO_F_VERSION_1), 1ull << 32);
    EXPECT_EQ(feature_mask(63), 0x8000000000000000ull);
    const uint64_t f = feature_mask(VIRTIO_F_VERSION_1) | feature_mask(VIRTIO_RING_F_EVENT_IDX) |
                       feature_mask(VIRTIO_NET_F_RSS);
    for (unsigned bit = 0; bit < 64; ++bit) {
        const bool want = bit == VIRTIO_F_VERSION_1 || bit == VIRTIO_RING_F_EVENT_IDX ||
                          bit == VIRTIO_NET_F_RSS;
        EXPECT_EQ(has_feature(f, bit), want) << bit;
    }
}

TEST(DeviceStatus, ValuesMatchSpec) {
    EXPECT_EQ(VIRTIO_CONFIG_S_ACKNOWLEDGE, 1);
    EXPECT_EQ(VIRTIO_CONFIG_S_DRIVER, 2);
    EXPECT_EQ(VIRTIO_CONFIG_S_DRIVER_OK, 4);
    EXPECT_EQ(VIRTIO_CONFIG_S_FEATURES_OK, 8);
    EXPECT_EQ(VIRTIO_CONFIG_S_NEEDS_RESET, 64);
    EXPECT_EQ(VIRTIO_CONFIG_S_FAILED, 128);
}

}  // namespace
}  // namespace pvnet::virtio
