// The control virtqueue carrying VIRTIO_NET_CTRL_NOTF_COAL and
// VIRTIO_NET_CTRL_MQ (VIRTIO 1.2 5.1.6.5: multiqueue steering, RSS, 5.1.6.5.9):
// the parser over a table of good and bad commands
// (also split across iovecs, as ANY_LAYOUT allows); CtrlQueue on hostile
// chains (no ack byte, ack in the readable part, unmapped buffer: counted,
// answered or broken, never a crash); and end to end, VirtioNet's
// set_coalesce against a VhostNet worker, the effect shown by counters.
// Every wait is bounded; no assertion on time.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/net/rss.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/pair/guest_pair.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using harness::wait_until;
using notify::CoalesceParams;
using Op = CtrlCommand::Op;

/// hdr {class, cmd}, then `data` as little-endian 32-bit words.
std::vector<std::byte> cmd_bytes(uint8_t cls, uint8_t cmd, std::vector<uint32_t> words) {
    std::vector<std::byte> b{std::byte{cls}, std::byte{cmd}};
    for (const uint32_t w : words) {
        for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::byte>((w >> (8 * i)) & 0xffu));
    }
    return b;
}

iovec iov_of(std::span<std::byte> b) { return iovec{b.data(), b.size()}; }

/// hdr {VIRTIO_NET_CTRL_MQ, cmd}, then `data` as is.
std::vector<std::byte> mq_bytes(uint8_t cmd, std::span<const uint8_t> data) {
    std::vector<std::byte> b{std::byte{virtio::VIRTIO_NET_CTRL_MQ}, std::byte{cmd}};
    for (const uint8_t x : data) b.push_back(std::byte{x});
    return b;
}

/// VQ_PAIRS_SET with le16 `n`, and `extra` bytes more.
std::vector<std::byte> pairs_set_bytes(uint16_t n, std::size_t extra = 0) {
    std::vector<uint8_t> d{static_cast<uint8_t>(n & 0xffu), static_cast<uint8_t>(n >> 8)};
    d.resize(d.size() + extra, 0);
    return mq_bytes(virtio::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, d);
}

/// A valid RSS config for `pairs` queues: `table_len` entries round-robin,
/// a `key_len`-byte key.
net::RssConfig rss_cfg(uint16_t pairs, uint16_t table_len = 8, uint8_t key_len = 40) {
    net::RssConfig c;
    c.hash_types = net::kRssSupportedHashTypes;
    c.table_len = table_len;
    for (uint16_t i = 0; i < table_len; ++i) c.table[i] = static_cast<uint16_t>(i % pairs);
    c.key_len = key_len;
    for (uint8_t i = 0; i < key_len; ++i) c.key[i] = static_cast<uint8_t>(0x6d + 3 * i);
    c.unclassified_queue = static_cast<uint16_t>(pairs - 1);
    c.max_tx_vq = pairs;
    return c;
}

std::vector<std::byte> rss_bytes(const std::vector<uint8_t>& data) {
    return mq_bytes(virtio::VIRTIO_NET_CTRL_MQ_RSS_CONFIG, data);
}

void expect_rss_eq(const net::RssConfig& got, const net::RssConfig& want) {
    EXPECT_EQ(got.hash_types, want.hash_types);
    EXPECT_EQ(got.key_len, want.key_len);
    EXPECT_EQ(got.key, want.key);
    EXPECT_EQ(got.table_len, want.table_len);
    EXPECT_TRUE(std::equal(got.table.begin(), got.table.begin() + got.table_len,
                           want.table.begin()));
    EXPECT_EQ(got.unclassified_queue, want.unclassified_queue);
    EXPECT_EQ(got.max_tx_vq, want.max_tx_vq);
}

// Feature sets of the table: a device of 4 pairs.
constexpr CtrlFeatures kNone{false, false, false, 4};
constexpr CtrlFeatures kCoal{true, false, false, 4};
constexpr CtrlFeatures kMqOnly{false, true, false, 4};
constexpr CtrlFeatures kRssOnly{false, false, true, 4};
constexpr CtrlFeatures kAll{true, true, true, 4};
constexpr CtrlFeatures kMqMaxPairs{false, true, false, virtio::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MAX};
/// VIRTIO_NET_F_HASH_REPORT alone (HASH_CONFIG served), and with RSS (not).
constexpr CtrlFeatures kHashOnly{false, false, false, 4, true};
constexpr CtrlFeatures kHashMq{false, true, false, 4, true};
constexpr CtrlFeatures kHashRss{false, true, true, 4, true};

// ---- parse_ctrl_command ----------------------------------------------------------------

struct ParseCase {
    const char* name;
    std::vector<std::byte> bytes;
    CtrlFeatures f;
    std::optional<CtrlError> err;  ///< nullopt: parses to op/coal/pairs/rss
    Op op = Op::NotfCoalTxSet;
    CoalesceParams coal{};
    uint16_t pairs = 0;
    std::optional<net::RssConfig> rss{};       ///< MqRssConfig: what it parses to
    std::optional<net::RssError> rss_err{};  ///< BadRss / BadHashConfig: the reason
    std::optional<net::HashConfig> hash{};     ///< MqHashConfig: what it parses to
};

std::vector<ParseCase> parse_cases() {
    using namespace virtio;  // NOLINT(google-build-using-namespace): spec constants
    using net::RssError;
    constexpr uint8_t C = VIRTIO_NET_CTRL_NOTF_COAL;
    std::vector<std::byte> long_cmd = cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, {1, 2});
    long_cmd.resize(4096, std::byte{0x5a});
    const net::RssConfig good = rss_cfg(4);
    const net::RssConfig biggest =
        rss_cfg(4, VIRTIO_NET_RSS_MAX_TABLE_LEN, VIRTIO_NET_RSS_MAX_KEY_SIZE);
    const std::vector<uint8_t> biggest_bytes = net::serialize_rss_config(biggest);
    // The wire struct by hand where the serializer cannot say it.
    auto with = [](std::vector<uint8_t> d, std::size_t at, uint8_t v) {
        d.at(at) = v;
        return d;
    };
    const std::vector<uint8_t> good_bytes = net::serialize_rss_config(good);
    const std::size_t key_len_at = 8 + 2 * std::size_t{good.table_len} + 2;
    auto plus = [](std::vector<uint8_t> d, std::size_t n) {
        d.resize(d.size() + n, 0);
        return d;
    };
    std::vector<uint8_t> rss_page = biggest_bytes;
    rss_page.resize(4096, 0x5a);
    net::HashConfig hash;
    hash.hash_types = net::kRssSupportedHashTypes;
    hash.key_len = 40;
    for (uint8_t i = 0; i < 40; ++i) hash.key[i] = static_cast<uint8_t>(i * 7 + 1);
    std::array<uint8_t, net::kHashConfigMaxBytes> hash_buf{};
    const std::vector<uint8_t> hash_good(
        hash_buf.begin(),
        hash_buf.begin() + static_cast<std::ptrdiff_t>(net::serialize_hash_config(hash, hash_buf)));
    std::vector<uint8_t> hash_page = hash_good;
    hash_page.resize(4096, 0x5a);
    return {
        {"GoodRxSet", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, {8, 0}), kCoal, std::nullopt,
         Op::NotfCoalRxSet, {8, 0}},
        {"GoodTxSet", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_TX_SET, {16, 50}), kCoal,
         std::nullopt, Op::NotfCoalTxSet, {16, 50}},
        {"LittleEndianWords", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_TX_SET, {0x01020304, ~0u}),
         kCoal, std::nullopt, Op::NotfCoalTxSet, {0x01020304, ~0u}},
        {"Empty", {}, kAll, CtrlError::ShortHeader},
        {"OneByte", {std::byte{C}}, kAll, CtrlError::ShortHeader},
        {"HeaderOnly", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, {}), kCoal,
         CtrlError::BadDataSize},
        {"ShortData", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, {8}), kCoal,
         CtrlError::BadDataSize},
        {"OneByteLong", [&] {
             auto b = cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_TX_SET, {16, 50});
             b.push_back(std::byte{0});
             return b;
         }(), kCoal, CtrlError::BadDataSize},
        {"PageLong", long_cmd, kCoal, CtrlError::BadDataSize},
        {"UnknownClassRx", cmd_bytes(0, 0, {8, 0}), kAll, CtrlError::UnknownClass},
        {"UnknownClass255", cmd_bytes(255, 1, {8, 0}), kAll, CtrlError::UnknownClass},
        {"UnknownCmdVqSet", cmd_bytes(C, 3, {0, 8, 0}), kCoal, CtrlError::UnknownCmd},
        {"UnknownCmd2", cmd_bytes(C, 2, {8, 0}), kCoal, CtrlError::UnknownCmd},
        {"FeatureOffRx", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, {8, 0}), kNone,
         CtrlError::NotNegotiated},
        {"FeatureOffTx", cmd_bytes(C, VIRTIO_NET_CTRL_NOTF_COAL_TX_SET, {16, 50}), kMqOnly,
         CtrlError::NotNegotiated},
        // VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET: 1..max_pairs, with MQ.
        {"VqPairsSetOne", pairs_set_bytes(1), kMqOnly, std::nullopt, Op::MqVqPairsSet, {}, 1},
        {"VqPairsSetMax", pairs_set_bytes(4), kAll, std::nullopt, Op::MqVqPairsSet, {}, 4},
        {"VqPairsSetLittleEndian", pairs_set_bytes(0x0003), kMqOnly, std::nullopt,
         Op::MqVqPairsSet, {}, 3},
        {"VqPairsSetZero", pairs_set_bytes(0), kMqOnly, CtrlError::OutOfRange},
        {"VqPairsSetAboveMaxPairs", pairs_set_bytes(5), kMqOnly, CtrlError::OutOfRange},
        {"VqPairsSetAboveSpecMax", pairs_set_bytes(0x8001), kMqMaxPairs, CtrlError::OutOfRange},
        {"VqPairsSetSpecMax", pairs_set_bytes(0x8000), kMqMaxPairs, std::nullopt, Op::MqVqPairsSet,
         {}, 0x8000},
        {"VqPairsSetShort", mq_bytes(VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, std::vector<uint8_t>{2}),
         kMqOnly, CtrlError::BadDataSize},
        {"VqPairsSetLong", pairs_set_bytes(2, 1), kMqOnly, CtrlError::BadDataSize},
        {"VqPairsSetWithoutMq", pairs_set_bytes(2), kRssOnly, CtrlError::NotNegotiated},
        {"MqClassWithoutMqOrRss", pairs_set_bytes(2), kCoal, CtrlError::NotNegotiated},
        // VIRTIO_NET_CTRL_MQ_HASH_CONFIG: net::parse_hash_config, with HASH_REPORT
        // and without RSS (with it, RSS_CONFIG sets the hash).
        {"HashConfigWithoutHashReport", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, hash_good), kAll,
         CtrlError::NotNegotiated},
        {"HashConfigWithRss", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, hash_good), kHashRss,
         CtrlError::NotNegotiated},
        {"HashConfigGood", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, hash_good), kHashOnly,
         std::nullopt, Op::MqHashConfig, {}, 0, std::nullopt, std::nullopt, hash},
        {"HashConfigWithMq", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, hash_good), kHashMq,
         std::nullopt, Op::MqHashConfig, {}, 0, std::nullopt, std::nullopt, hash},
        {"HashConfigUnsupportedType", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, with(hash_good, 1, 1)),
         kHashOnly, CtrlError::BadHashConfig, Op::NotfCoalTxSet, {}, 0, std::nullopt,
         RssError::UnsupportedHashType},
        {"HashConfigKeyTooLong",
         mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, plus(with(hash_good, 12, 41), 1)), kHashOnly,
         CtrlError::BadHashConfig, Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::KeyTooLong},
        {"HashConfigCut",
         mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, {hash_good.begin(), hash_good.end() - 1}),
         kHashOnly, CtrlError::BadHashConfig, Op::NotfCoalTxSet, {}, 0, std::nullopt,
         RssError::DataTooShort},
        {"HashConfigTrailingByte", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, plus(hash_good, 1)),
         kHashOnly, CtrlError::BadHashConfig, Op::NotfCoalTxSet, {}, 0, std::nullopt,
         RssError::TrailingBytes},
        {"HashConfigPageLong", mq_bytes(VIRTIO_NET_CTRL_MQ_HASH_CONFIG, hash_page), kHashOnly,
         CtrlError::BadHashConfig, Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TrailingBytes},
        {"VqPairsSetWithHashReportAlone", pairs_set_bytes(2), kHashOnly, CtrlError::NotNegotiated},
        {"MqUnknownCmd", mq_bytes(7, std::vector<uint8_t>{1, 0}), kMqOnly, CtrlError::UnknownCmd},
        // VIRTIO_NET_CTRL_MQ_RSS_CONFIG: net::parse_rss_config against max_pairs, with RSS.
        {"RssConfigGood", rss_bytes(good_bytes), kRssOnly, std::nullopt, Op::MqRssConfig, {}, 0,
         good},
        {"RssConfigLongest", rss_bytes(biggest_bytes), kAll, std::nullopt, Op::MqRssConfig, {}, 0,
         biggest},
        {"RssConfigWithoutRss", rss_bytes(good_bytes), kMqOnly, CtrlError::NotNegotiated},
        {"RssConfigTableNotPowerOfTwo", rss_bytes(with(good_bytes, 4, 2)), kAll, CtrlError::BadRss,
         Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TableLengthNotPowerOfTwo},
        {"RssConfigQueueOutOfRange", rss_bytes(with(good_bytes, 8, 4)), kAll, CtrlError::BadRss,
         Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TableQueueOutOfRange},
        {"RssConfigQueuesOfABiggerDevice", rss_bytes(net::serialize_rss_config(rss_cfg(8))), kAll,
         CtrlError::BadRss, Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TableQueueOutOfRange},
        {"RssConfigKeyTooLong", rss_bytes(plus(with(good_bytes, key_len_at, 41), 1)), kAll,
         CtrlError::BadRss, Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::KeyTooLong},
        {"RssConfigTrailingByte", rss_bytes(plus(good_bytes, 1)), kAll, CtrlError::BadRss,
         Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TrailingBytes},
        {"RssConfigLongestPlusOne", rss_bytes(plus(biggest_bytes, 1)), kAll, CtrlError::BadRss,
         Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TrailingBytes},
        {"RssConfigPageLong", rss_bytes(rss_page), kAll, CtrlError::BadRss, Op::NotfCoalTxSet, {},
         0, std::nullopt, RssError::TrailingBytes},
        {"RssConfigPageLongBadPrefix", rss_bytes(with(rss_page, 4, 2)), kAll, CtrlError::BadRss,
         Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::TableLengthNotPowerOfTwo},
        {"RssConfigCut", rss_bytes({good_bytes.begin(), good_bytes.end() - 1}), kAll,
         CtrlError::BadRss, Op::NotfCoalTxSet, {}, 0, std::nullopt, RssError::DataTooShort},
        {"RssConfigHeaderOnly", rss_bytes({}), kAll, CtrlError::BadRss, Op::NotfCoalTxSet, {}, 0,
         std::nullopt, RssError::DataTooShort},
    };
}

void expect_parse(const ParseCase& c, std::span<const iovec> iov) {
    net::RssError why = net::RssError::Count;
    const auto r = parse_ctrl_command(iov, c.f, &why);
    if (c.err) {
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error(), *c.err) << to_string(r.error());
        EXPECT_EQ(why, c.rss_err.value_or(net::RssError::Count)) << net::to_string(why);
    } else {
        ASSERT_TRUE(r.has_value()) << to_string(r.error()) << ": " << net::to_string(why);
        EXPECT_EQ(r.value().op, c.op);
        if (c.op == Op::NotfCoalRxSet || c.op == Op::NotfCoalTxSet) {
            EXPECT_EQ(r.value().coal, c.coal);
        }
        if (c.op == Op::MqVqPairsSet) {
            EXPECT_EQ(r.value().pairs, c.pairs);
        }
        if (c.op == Op::MqRssConfig) {
            ASSERT_TRUE(c.rss.has_value());
            expect_rss_eq(r.value().rss, *c.rss);
        }
        if (c.op == Op::MqHashConfig) {
            ASSERT_TRUE(c.hash.has_value());
            EXPECT_EQ(r.value().hash.hash_types, c.hash->hash_types);
            EXPECT_EQ(r.value().hash.key_len, c.hash->key_len);
            EXPECT_EQ(r.value().hash.key, c.hash->key);
        }
    }
}

class ParseCtrl : public ::testing::TestWithParam<ParseCase> {};
INSTANTIATE_TEST_SUITE_P(CtrlQueue, ParseCtrl, ::testing::ValuesIn(parse_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

TEST_P(ParseCtrl, OneIovec) {
    std::vector<std::byte> b = GetParam().bytes;
    const iovec v = iov_of(b);
    expect_parse(GetParam(), std::span<const iovec>(&v, b.empty() ? 0 : 1));
}

TEST_P(ParseCtrl, SameResultSplitAnywhere) {
    // ANY_LAYOUT: the readable part may be split at any byte, in any number of pieces.
    std::vector<std::byte> b = GetParam().bytes;
    const std::size_t n = std::min<std::size_t>(b.size(), 16);
    for (std::size_t cut = 0; cut <= n; ++cut) {
        SCOPED_TRACE(cut);
        const std::array<iovec, 2> two{iov_of(std::span(b).first(cut)),
                                       iov_of(std::span(b).subspan(cut))};
        expect_parse(GetParam(), two);
    }
    std::vector<iovec> bytewise;
    for (std::byte& x : std::span(b).first(n)) bytewise.push_back(iovec{&x, 1});
    if (n < b.size()) bytewise.push_back(iov_of(std::span(b).subspan(n)));
    expect_parse(GetParam(), bytewise);
}

// ---- clamp_notf_coal ----------------------------------------------------------------------

// A guest's 32-bit limits are capped: max_packets at 2^15 (a deferred
// decision never spans a wrapped used.idx), max_usecs at one second. The
// parser reports what the guest sent; the clamp is a separate step.
TEST(ClampNotfCoal, LowersLimitsAboveTheCapsAndSaysWhich) {
    struct Case {
        CoalesceParams in;
        CoalesceParams out;
        bool packets;
        bool usecs;
    };
    const Case cases[] = {
        {{0, 0}, {0, 0}, false, false},
        {{16, 50}, {16, 50}, false, false},
        {{kNotfCoalMaxPackets, kNotfCoalMaxUsecs}, {kNotfCoalMaxPackets, kNotfCoalMaxUsecs},
         false, false},
        {{kNotfCoalMaxPackets + 1, 50}, {kNotfCoalMaxPackets, 50}, true, false},
        {{65536, 50}, {kNotfCoalMaxPackets, 50}, true, false},
        {{~0u, 50}, {kNotfCoalMaxPackets, 50}, true, false},
        {{16, kNotfCoalMaxUsecs + 1}, {16, kNotfCoalMaxUsecs}, false, true},
        {{16, ~0u}, {16, kNotfCoalMaxUsecs}, false, true},
        {{~0u, ~0u}, {kNotfCoalMaxPackets, kNotfCoalMaxUsecs}, true, true},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(testing::Message() << c.in.max_frames << "/" << c.in.max_usecs);
        CoalesceParams p = c.in;
        const NotfCoalClamps got = clamp_notf_coal(p);
        EXPECT_EQ(p, c.out);
        EXPECT_EQ(got.max_packets, c.packets);
        EXPECT_EQ(got.max_usecs, c.usecs);
    }
}

TEST(ClampNotfCoal, ParserStillReportsTheGuestsValues) {
    auto b = cmd_bytes(virtio::VIRTIO_NET_CTRL_NOTF_COAL, virtio::VIRTIO_NET_CTRL_NOTF_COAL_RX_SET,
                       {~0u, ~0u});
    const iovec v = iov_of(b);
    const auto r = parse_ctrl_command(std::span<const iovec>(&v, 1), kCoal);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r.value().coal, (CoalesceParams{~0u, ~0u}));
}

// ---- CtrlQueue on chains, no worker -------------------------------------------------------

/// Guest memory with the control ring at kBase and command buffers after it,
/// a test-driven driver, the call doorbell and the CtrlQueue under test.
class CtrlBench {
public:
    static constexpr uint64_t kBase = 0x100000;
    static constexpr uint64_t kBufGpa = kBase + 0x10000;
    static constexpr uint64_t kMemBytes = 0x20000;
    static constexpr uint16_t kSize = 256;

    explicit CtrlBench(bool notf_coal = true, bool event_idx = false) {
        auto r = mem::MemoryRegion::create(kMemBytes, "ctrl_queue_test");
        if (!r) throw std::runtime_error("MemoryRegion::create");
        region_.emplace(std::move(r.value()));
        if (!table_.add(mem::GuestAddr(kBase), region_->bytes())) throw std::runtime_error("table");
        ring::DriverQueueConfig dq;
        dq.addrs = ring::split_ring_addrs_at(mem::GuestAddr(kBase), kSize);
        dq.event_idx = event_idx;
        auto d = ring::SplitDriverQueue::create(table_, dq);
        auto call = notify::EventFd::create();
        if (!d || !call) throw std::runtime_error("driver queue / eventfd");
        drv_ = std::move(*d);
        call_.emplace(std::move(*call));
        CtrlQueueConfig cfg;
        cfg.ring.addrs = dq.addrs;
        cfg.ring.features =
            (event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0) |
            (notf_coal ? virtio::feature_mask(virtio::VIRTIO_NET_F_NOTF_COAL) : 0);
        auto q = CtrlQueue::create(table_, cfg, notify::QueueFds{nullptr, &*call_});
        if (!q) throw std::runtime_error("CtrlQueue::create");
        q_ = std::move(*q);
    }

    /// Writes `bytes` at the buffer of command `k`; returns its gpa.
    mem::GuestAddr put(uint64_t k, std::span<const std::byte> bytes) {
        const uint64_t gpa = kBufGpa + k * 64;
        std::memcpy(host(gpa), bytes.data(), bytes.size());
        return mem::GuestAddr(gpa);
    }
    /// Command `k` as Linux lays it out: out hdr, out data, in ack (preset to 0xff).
    void add_cmd(uint64_t k, std::span<const std::byte> cmd) {
        const mem::GuestAddr g = put(k, cmd);
        *ack(k) = std::byte{0xff};
        const ring::Buf out[] = {{g, 2}, {g + 2, static_cast<uint32_t>(cmd.size() - 2)}};
        const ring::Buf in{ack_gpa(k), 1};
        if (drv_->add(out, std::span<const ring::Buf>(&in, 1), k) != ring::AddStatus::Ok) {
            throw std::logic_error("add");
        }
    }
    static mem::GuestAddr ack_gpa(uint64_t k) { return mem::GuestAddr(kBufGpa + k * 64 + 32); }
    std::byte* ack(uint64_t k) { return host(ack_gpa(k).value); }
    std::byte* host(uint64_t gpa) { return region_->host() + (gpa - kBase); }

    /// Runs handle() once, recording the commands applied.
    bool handle() {
        return q_->handle([this](const CtrlCommand& c) { applied.push_back(c); });
    }
    std::vector<ring::UsedBuf> reap() {
        std::vector<ring::UsedBuf> out;
        ring::UsedBuf u;
        while (drv_->get_used(u)) out.push_back(u);
        return out;
    }

    ring::SplitDriverQueue& drv() { return *drv_; }
    const CtrlQueue& q() const { return *q_; }
    const notify::EventFd& call() const { return *call_; }
    std::vector<CtrlCommand> applied;

private:
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::unique_ptr<ring::SplitDriverQueue> drv_;
    std::optional<notify::EventFd> call_;
    std::unique_ptr<CtrlQueue> q_;
};

std::vector<std::byte> good_tx() {
    return cmd_bytes(virtio::VIRTIO_NET_CTRL_NOTF_COAL, virtio::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET,
                     {16, 50});
}

TEST(CtrlQueue, GoodCommandIsAppliedAckedOkAndSignalled) {
    CtrlBench b;
    const auto cmd = good_tx();
    b.add_cmd(0, cmd);
    b.drv().publish();
    EXPECT_FALSE(b.handle()) << "ring drained";
    ASSERT_EQ(b.applied.size(), 1u);
    EXPECT_EQ(b.applied[0].op, Op::NotfCoalTxSet);
    EXPECT_EQ(b.applied[0].coal, (CoalesceParams{16, 50}));
    const auto used = b.reap();
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0].len, 1u);
    EXPECT_EQ(*b.ack(0), std::byte{virtio::VIRTIO_NET_OK});
    EXPECT_EQ(b.q().stats().cmds_ok.get(), 1u);
    EXPECT_EQ(b.q().stats().cmds_err.total(), 0u);
    EXPECT_EQ(b.q().stats().calls.get(), 1u);
    EXPECT_EQ(b.call().consume(), 1u);
}

// What the guest asked beyond the caps is lowered before apply sees it,
// acked OK, and counted per limit.
TEST(CtrlQueue, ClampsCoalescingLimitsBeforeApplyingAndCountsIt) {
    CtrlBench b;
    using namespace virtio;  // NOLINT(google-build-using-namespace): spec constants
    b.add_cmd(0, cmd_bytes(VIRTIO_NET_CTRL_NOTF_COAL, VIRTIO_NET_CTRL_NOTF_COAL_TX_SET,
                           {1u << 20, 50}));
    b.add_cmd(1, cmd_bytes(VIRTIO_NET_CTRL_NOTF_COAL, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET,
                           {~0u, ~0u}));
    b.add_cmd(2, good_tx());
    b.drv().publish();
    EXPECT_FALSE(b.handle());
    ASSERT_EQ(b.applied.size(), 3u);
    EXPECT_EQ(b.applied[0].coal, (CoalesceParams{kNotfCoalMaxPackets, 50}));
    EXPECT_EQ(b.applied[1].op, Op::NotfCoalRxSet);
    EXPECT_EQ(b.applied[1].coal, (CoalesceParams{kNotfCoalMaxPackets, kNotfCoalMaxUsecs}));
    EXPECT_EQ(b.applied[2].coal, (CoalesceParams{16, 50}));
    ASSERT_EQ(b.reap().size(), 3u);
    for (uint64_t k = 0; k < 3; ++k) EXPECT_EQ(*b.ack(k), std::byte{VIRTIO_NET_OK}) << k;
    const auto& s = b.q().stats();
    EXPECT_EQ(s.coal_max_packets_clamped.get(), 2u);
    EXPECT_EQ(s.coal_max_usecs_clamped.get(), 1u);
    EXPECT_EQ(s.cmds_ok.get(), 3u);
    EXPECT_EQ(s.cmds_err.total(), 0u);
}

TEST(CtrlQueue, BadCommandsAreAckedErrAndCountedByReason) {
    CtrlBench b(/*notf_coal=*/true);
    using namespace virtio;  // NOLINT(google-build-using-namespace): spec constants
    const std::vector<std::vector<std::byte>> bad{
        cmd_bytes(0, 0, {1}),                                            // unknown class
        cmd_bytes(VIRTIO_NET_CTRL_NOTF_COAL, 9, {8, 0}),                 // unknown cmd
        cmd_bytes(VIRTIO_NET_CTRL_NOTF_COAL, VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, {8}),  // short
    };
    for (uint64_t k = 0; k < bad.size(); ++k) b.add_cmd(k, bad[k]);
    b.drv().publish();
    EXPECT_FALSE(b.handle());
    EXPECT_TRUE(b.applied.empty());
    const auto used = b.reap();
    ASSERT_EQ(used.size(), 3u);
    for (uint64_t k = 0; k < 3; ++k) {
        EXPECT_EQ(used[k].len, 1u);
        EXPECT_EQ(*b.ack(k), std::byte{VIRTIO_NET_ERR});
    }
    const auto& s = b.q().stats();
    EXPECT_EQ(s.cmds_err.get(CtrlError::UnknownClass), 1u);
    EXPECT_EQ(s.cmds_err.get(CtrlError::UnknownCmd), 1u);
    EXPECT_EQ(s.cmds_err.get(CtrlError::BadDataSize), 1u);
    EXPECT_EQ(s.cmds_ok.get(), 0u);
    EXPECT_FALSE(b.q().queue().broken()) << "bad commands are not ring violations";
}

TEST(CtrlQueue, FeatureOffIsAnsweredErr) {
    CtrlBench b(/*notf_coal=*/false);
    b.add_cmd(0, good_tx());
    b.drv().publish();
    b.handle();
    EXPECT_TRUE(b.applied.empty());
    ASSERT_EQ(b.reap().size(), 1u);
    EXPECT_EQ(*b.ack(0), std::byte{virtio::VIRTIO_NET_ERR});
    EXPECT_EQ(b.q().stats().cmds_err.get(CtrlError::NotNegotiated), 1u);
}

TEST(CtrlQueue, ChainWithoutWritableByteIsUsedWithZeroLength) {
    // The ack buffer put in the readable part: nothing to answer into.
    CtrlBench b;
    auto cmd = good_tx();
    cmd.push_back(std::byte{0xff});  // the "ack"
    const mem::GuestAddr g = b.put(0, cmd);
    const ring::Buf out[] = {{g, 2}, {g + 2, 8}, {g + 10, 1}};
    ASSERT_EQ(b.drv().add(out, {}, 7), ring::AddStatus::Ok);
    b.drv().publish();
    EXPECT_FALSE(b.handle());
    EXPECT_TRUE(b.applied.empty()) << "an unanswerable command is not applied";
    const auto used = b.reap();
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0].token, 7u);
    EXPECT_EQ(used[0].len, 0u);
    EXPECT_EQ(*b.host(g.value + 10), std::byte{0xff}) << "readable memory never written";
    EXPECT_EQ(b.q().stats().cmds_err.get(CtrlError::NoAck), 1u);
    EXPECT_FALSE(b.q().queue().broken());
}

TEST(CtrlQueue, ReadableShorterThanHeaderIsAnsweredErr) {
    CtrlBench b;
    const std::byte one{virtio::VIRTIO_NET_CTRL_NOTF_COAL};
    const mem::GuestAddr g = b.put(0, std::span(&one, 1));
    const ring::Buf out{g, 1};
    const ring::Buf in{CtrlBench::ack_gpa(0), 1};
    ASSERT_EQ(b.drv().add(std::span(&out, 1), std::span(&in, 1), 0), ring::AddStatus::Ok);
    b.drv().publish();
    b.handle();
    ASSERT_EQ(b.reap().size(), 1u);
    EXPECT_EQ(*b.ack(0), std::byte{virtio::VIRTIO_NET_ERR});
    EXPECT_EQ(b.q().stats().cmds_err.get(CtrlError::ShortHeader), 1u);
}

TEST(CtrlQueue, UnmappedBufferBreaksTheRingWithoutCrashing) {
    CtrlBench b;
    b.add_cmd(0, good_tx());  // served before the bad one
    const ring::Buf out[] = {{mem::GuestAddr(0xdead0000), 2}, {mem::GuestAddr(0xdead0002), 8}};
    const ring::Buf in{CtrlBench::ack_gpa(1), 1};
    ASSERT_EQ(b.drv().add(out, std::span(&in, 1), 1), ring::AddStatus::Ok);
    b.add_cmd(2, good_tx());  // never reached
    b.drv().publish();
    EXPECT_FALSE(b.handle());
    EXPECT_TRUE(b.q().queue().broken());
    EXPECT_EQ(b.q().queue().broken_reason(), ring::RingError::AddrUnmapped);
    EXPECT_EQ(b.q().queue().stats().errors.get(ring::RingError::AddrUnmapped), 1u);
    EXPECT_EQ(b.applied.size(), 1u) << "only the command before the bad chain";
    EXPECT_EQ(b.q().stats().calls.get(), 0u) << "a broken queue signals no more";
    // Served no more: a later run touches nothing.
    const uint64_t runs = b.q().stats().runs.get();
    EXPECT_FALSE(b.handle());
    EXPECT_EQ(b.q().stats().runs.get(), runs);
    EXPECT_EQ(b.applied.size(), 1u);
}

TEST(CtrlQueue, StopsAtTheWeightAndAsksToRunAgain) {
    CtrlBench b;
    const auto cmd = good_tx();
    constexpr uint64_t kCmds = kCtrlWeight + 10;
    for (uint64_t k = 0; k < kCmds; ++k) b.add_cmd(k, cmd);
    b.drv().publish();
    EXPECT_TRUE(b.handle()) << "weight reached, commands left";
    EXPECT_EQ(b.applied.size(), kCtrlWeight);
    EXPECT_FALSE(b.handle());
    EXPECT_EQ(b.applied.size(), kCmds);
    EXPECT_EQ(b.q().stats().cmds_ok.get(), kCmds);
    EXPECT_EQ(b.reap().size(), kCmds);
}

TEST(CtrlQueue, DriverSuppressionIsRespected) {
    // used_event stays 0 (the driver never re-arms): only the first
    // publish crosses it.
    CtrlBench b(/*notf_coal=*/true, /*event_idx=*/true);
    b.add_cmd(0, good_tx());
    b.add_cmd(1, good_tx());
    b.drv().publish();
    b.handle();
    EXPECT_EQ(b.q().stats().calls.get(), 1u);
    b.add_cmd(2, good_tx());
    b.drv().publish();
    b.handle();
    EXPECT_EQ(b.q().stats().calls.get(), 1u);
    EXPECT_EQ(b.q().stats().calls_suppressed.get(), 1u);
}

// ---- end to end: VirtioNet's set_coalesce against a VhostNet worker ---------------------

using Dev = VhostNet<harness::FakePort>;

/// A guest (VirtioNet with a control virtqueue) and a running VhostNet.
class EndToEnd {
public:
    /// `ctrl_err`: the control vring's err fd (none if null).
    explicit EndToEnd(bool notf_coal, RunMode mode = RunMode::Event,
                      const notify::EventFd* ctrl_err = nullptr) {
        frontend::VirtioNetConfig fc;
        fc.rx_size = fc.tx_size = 256;
        fc.ctrl_vq = true;
        if (auto err = tb_.setup(fc)) throw std::runtime_error(*err);
        // The guest drives a control queue either way; without NOTF_COAL in
        // the negotiated word the device refuses its coalescing commands.
        DeviceSetup s = tb_.device_setup();
        if (!notf_coal) s.features &= ~virtio::feature_mask(virtio::VIRTIO_NET_F_NOTF_COAL);
        s.vrings.back().err = ctrl_err;
        VhostNetOptions opt;
        opt.mode = mode;
        auto d = Dev::create(s, opt, port_);
        if (!d) throw std::runtime_error("VhostNet::create");
        dev_ = std::move(*d);
        dev_->start();
    }
    ~EndToEnd() { dev_->stop(); }

    /// Sends `n` 64-byte packets in one publish, then waits until the
    /// backend has moved them all.
    bool send_burst(uint32_t n) {
        frontend::QueuePair& qp = tb_.qp();
        const uint64_t before = dev_->stats().tx_pkts.get();
        if (!harness::xmit_packets(qp, seq_, n)) return false;
        return wait_until([&] { return dev_->stats().tx_pkts.get() == before + n; });
    }

    frontend::VirtioNet& fe() { return tb_.fe(); }
    Dev& dev() { return *dev_; }
    const VhostNetStats& stats() const { return dev_->stats(); }
    /// The control ring's avail.idx, as a driver publishes it (a release
    /// store), whatever it holds.
    void publish_ctrl_avail_idx(uint16_t idx) {
        const ring::SplitRingAddrs& a = tb_.fe().ctrl_addrs();
        auto* p = reinterpret_cast<uint16_t*>(
            tb_.guest_host(a.avail + virtio::SplitRingLayout::avail_idx_off()));
        std::atomic_ref<uint16_t>(*p).store(virtio::host_to_le(idx), std::memory_order_release);
    }

private:
    pair::GuestPair tb_;
    harness::FakePort port_;
    std::unique_ptr<Dev> dev_;
    uint64_t seq_ = 0;
};

TEST(CtrlEndToEnd, SetCoalesceReachesTheBackendsCoalescers) {
    EndToEnd e(/*notf_coal=*/true);
    const auto st = e.fe().set_coalesce({8, 0}, {16, 50});
    ASSERT_TRUE(st.has_value()) << static_cast<int>(st.error());
    // Both commands were applied by the worker before it used them, and
    // the used entries were reaped: no wait needed to see the effect.
    EXPECT_EQ(e.dev().device_stats().coalesce_updates.get(), 2u);
    // The coalescers' limits are the worker's: read them once it stopped.
    e.dev().stop();
    EXPECT_EQ(e.dev().rx_coalescer().params(), (CoalesceParams{8, 0}));
    EXPECT_EQ(e.dev().tx_coalescer().params(), (CoalesceParams{16, 50}));
    const CtrlQueue* cq = e.dev().ctrl_queue();
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(cq->stats().cmds_ok.get(), 2u);
    EXPECT_EQ(cq->stats().cmds_err.total(), 0u);
    EXPECT_EQ(e.fe().ctrl_stats().cmds.get(), 2u);
    EXPECT_EQ(e.fe().ctrl_stats().cmds_failed.get(), 0u);
    // The second command may land while the worker still has kicks off
    // (finishing the first): then its kick is suppressed and the re-arm's
    // recheck finds it.
    EXPECT_EQ(e.fe().ctrl_stats().kicks.get() +
                  e.fe().ctrl_queue()->stats().kicks_suppressed.get(),
              2u);
}

TEST(CtrlEndToEnd, ABurstAfterSetCoalesceIsCoalesced) {
    EndToEnd e(/*notf_coal=*/true);
    const VhostNetStats& s = e.stats();
    // 0/0: a burst of 8 is one signal decision, at once.
    ASSERT_TRUE(e.send_burst(8));
    EXPECT_EQ(s.tx_signals_coalesced.get(), 0u);
    const uint64_t decisions = s.tx_calls.get() + s.tx_signals_suppressed_event_idx.get();
    EXPECT_GE(decisions, 1u);

    ASSERT_TRUE(e.fe().set_coalesce({8, 0}, {16, 50}).has_value());
    // 8 < tx_max_packets: deferred, then the 50 us timer signals them.
    ASSERT_TRUE(e.send_burst(8));
    EXPECT_EQ(s.tx_signals_coalesced.get(), 1u);
    ASSERT_TRUE(wait_until([&] {
        return s.tx_calls.get() + s.tx_signals_suppressed_event_idx.get() == decisions + 1;
    }));
    EXPECT_EQ(s.tx_coalesce_timer_fires.get(), 1u);
    EXPECT_EQ(e.dev().tx_coalescer().stats().signals_timer.get(), 1u);
    // A burst of tx_max_packets is signalled at once by the frame count.
    ASSERT_TRUE(e.send_burst(16));
    EXPECT_EQ(s.tx_signals_coalesced.get(), 1u);
    EXPECT_EQ(e.dev().tx_coalescer().stats().signals_frames.get(), 1u);
    EXPECT_EQ(s.tx_calls.get() + s.tx_signals_suppressed_event_idx.get(), decisions + 2);
}

TEST(CtrlEndToEnd, NotfCoalNotNegotiatedGivesTheGuestErr) {
    EndToEnd e(/*notf_coal=*/false);
    const auto st = e.fe().set_coalesce({8, 0}, {16, 50});
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), frontend::FrontendError::CtrlDeviceErr);
    EXPECT_EQ(e.fe().ctrl_stats().cmds.get(), 1u) << "stops at the first refusal";
    EXPECT_EQ(e.fe().ctrl_stats().cmds_failed.get(), 1u);
    EXPECT_EQ(e.dev().ctrl_queue()->stats().cmds_err.get(CtrlError::NotNegotiated), 1u);
    EXPECT_EQ(e.dev().device_stats().coalesce_updates.get(), 0u);
    EXPECT_EQ(e.dev().tx_coalescer().params(), (CoalesceParams{}));
}

TEST(CtrlEndToEnd, PollModeWorkerServesTheControlQueue) {
    EndToEnd e(/*notf_coal=*/true, RunMode::Poll);
    ASSERT_TRUE(e.fe().set_coalesce({4, 100}, {32, 100}).has_value());
    EXPECT_EQ(e.dev().rx_coalescer().params(), (CoalesceParams{4, 100}));
    EXPECT_EQ(e.dev().tx_coalescer().params(), (CoalesceParams{32, 100}));
}

TEST(CtrlEndToEnd, ABreakThePollModeProbeFindsIsReported) {
    // A poll-mode worker looks at the control ring's avail.idx on every pass
    // (ctrl_ready): a jump it finds there breaks the ring, and no command
    // run follows to report it.
    auto err = notify::EventFd::create();
    ASSERT_TRUE(err);
    EndToEnd e(/*notf_coal=*/true, RunMode::Poll, &*err);
    ASSERT_TRUE(wait_until([&] { return e.dev().device_stats().rounds.get() >= 1; }));
    const uint64_t runs = e.dev().ctrl_queue()->stats().runs.get();
    e.publish_ctrl_avail_idx(1000);
    ASSERT_TRUE(wait_until([&] { return e.dev().device_stats().vrings_broken.get() == 1; }))
        << "the probe found the break silently";
    EXPECT_EQ(e.dev().ctrl_queue()->stats().runs.get(), runs) << "found by the probe, not a run";
    EXPECT_EQ(e.dev().status(), virtio::VIRTIO_CONFIG_S_NEEDS_RESET);
    EXPECT_EQ(e.dev().vring_error(ctrl_vring(1)), ring::RingError::AvailIdxJump);
    EXPECT_EQ(err->consume(), 1u);
    // The data vrings are still served.
    ASSERT_TRUE(e.send_burst(4));
    e.dev().stop();
    EXPECT_EQ(e.dev().device_stats().vrings_broken.get(), 1u);
}

TEST(CtrlEndToEnd, SilentDeviceTimesOutThenBusyUntilItAnswers) {
    // No backend serves the ring: the command stays with the "device".
    frontend::VirtioNetConfig fc;
    fc.ctrl_vq = true;
    fc.ctrl_timeout_us = 20'000;
    pair::GuestPair tb;
    ASSERT_FALSE(tb.setup(fc).has_value());
    auto st = tb.fe().set_coalesce({8, 0}, {16, 50});
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), frontend::FrontendError::CtrlTimeout);
    st = tb.fe().set_coalesce({8, 0}, {16, 50});
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), frontend::FrontendError::CtrlBusy) << "its buffer is still posted";
    EXPECT_EQ(tb.fe().ctrl_stats().cmds_failed.get(), 2u);

    // The device wakes up late and serves it: the guest can go on.
    harness::FakePort port;
    auto d = Dev::create(tb.device_setup(), VhostNetOptions{}, port);
    ASSERT_TRUE(d.has_value());
    (*d)->start();
    ASSERT_TRUE(wait_until([&] { return (*d)->ctrl_queue()->stats().cmds_ok.get() == 1; }));
    // The device counts a command before its used entry is published, so the driver may
    // still find its buffer out (CtrlBusy, nothing posted) for a moment: it retries.
    Status<frontend::FrontendError> ok = unexpected(frontend::FrontendError::CtrlBusy);
    ASSERT_TRUE(wait_until([&] {
        ok = tb.fe().set_coalesce({8, 0}, {16, 50});
        return ok.has_value() || ok.error() != frontend::FrontendError::CtrlBusy;
    }));
    (*d)->stop();
    ASSERT_TRUE(ok.has_value()) << static_cast<int>(ok.error());
    EXPECT_EQ((*d)->ctrl_queue()->stats().cmds_ok.get(), 3u) << "the late one, then rx and tx";
}

TEST(CtrlEndToEnd, WithoutAControlQueueNothingChanges) {
    pair::GuestPair tb;
    ASSERT_FALSE(tb.setup(256, true).has_value());
    EXPECT_EQ(tb.fe().ctrl_queue(), nullptr);
    const auto st = tb.fe().set_coalesce({8, 0}, {16, 50});
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), frontend::FrontendError::NoCtrlVq);
    // The device is told of no control queue: no CTRL_VQ, no third vring.
    const DeviceSetup s = tb.device_setup();
    EXPECT_EQ(s.features & virtio::feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ), 0u);
    EXPECT_EQ(s.vrings.size(), 2u);
    harness::FakePort port;
    auto d = Dev::create(s, VhostNetOptions{}, port);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ((*d)->ctrl_queue(), nullptr);
}

}  // namespace
}  // namespace pvnet::backend
