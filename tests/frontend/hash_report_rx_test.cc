// The driver's side of VIRTIO_NET_F_HASH_REPORT (VIRTIO 1.2 "Hash reporting
// for incoming packets"): with hash_report the header is 20 bytes, a used
// length up to it is a defect, and the hash and its type are read once from
// the header the device wrote and checked — an unknown type is counted and
// taken as NONE, a NONE never carries a hash. The device is the fixture's
// SplitDeviceQueue writing headers by hand, as a hostile device could.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "virtio_net_fixture.h"

namespace pvnet::frontend {
namespace {

using namespace fixture;  // NOLINT(google-build-using-namespace): the fixture's helpers
namespace v = virtio;
constexpr uint32_t kHashHdr = sizeof(v::virtio_net_hdr_v1_hash);

/// What poll_rx_packets handed over for one packet.
struct Seen {
    uint32_t len;
    uint32_t hash_value;
    uint16_t hash_report;
};

/// The driver (one pair, with or without hash_report), its rx buffers
/// posted; the test plays the device on the chains it pops.
class HashReportRx : public ::testing::Test {
protected:
    /// Starts the driver and pops `n` rx chains.
    std::vector<Popped> start(std::size_t n, bool hash_report = true) {
        VirtioNetConfig c = config(1, 64, 64);
        c.hash_report = hash_report;
        env_.emplace(c);
        env_->start();
        qp().try_fill_recv();
        free_after_fill_ = qp().free_bufs();
        std::vector<Popped> got = env_->pop_rx(0, n);
        EXPECT_EQ(got.size(), n);
        return got;
    }
    /// Writes a 20-byte header with `value` / `report`, then filler, into a
    /// popped chain, and stages it with used length `used`.
    void fill(const Popped& p, uint32_t value, uint16_t report, uint32_t used) {
        v::virtio_net_hdr_v1_hash h{};
        h.hdr.num_buffers.set(1);
        h.hash_value.set(value);
        h.hash_report.set(report);
        std::memcpy(p.host, &h, sizeof h);
        std::memset(p.host + sizeof h, 0x5c, p.room - sizeof h);
        if (!env_->dev().rx->add_used(p.head, used)) throw std::logic_error("add_used");
    }
    /// Publishes what was filled and polls it all.
    std::vector<Seen> poll() {
        env_->dev().rx->flush_used();
        std::vector<Seen> seen;
        qp().poll_rx_packets(64, [&](std::span<const RxPiece> p) {
            seen.push_back(Seen{p[0].len, p[0].hash_value, p[0].hash_report});
            return false;
        });
        return seen;
    }
    QueuePair& qp() { return env_->qp(); }

    std::optional<Env> env_;
    uint32_t free_after_fill_ = 0;
};

TEST(HashReportConfig, TheHeaderIs20BytesBothWays) {
    VirtioNetConfig c = config(1, 64, 64);
    EXPECT_EQ(c.hdr_bytes(), 12u);
    c.hash_report = true;
    EXPECT_EQ(c.hdr_bytes(), kHashHdr);
    Env env(c);
    auto net = env.create(env.area());
    ASSERT_TRUE(net.has_value());
    EXPECT_EQ((*net)->hdr_bytes(), kHashHdr);
}

TEST_F(HashReportRx, HashAndTypeAreHandedOverWithTheFirstPiece) {
    const std::vector<Popped> got = start(3);
    ASSERT_EQ(got.size(), 3u);
    fill(got[0], 0xdeadbeef, v::VIRTIO_NET_HASH_REPORT_TCPv4, kHashHdr + 60);
    fill(got[1], 0x01020304, v::VIRTIO_NET_HASH_REPORT_UDPv6_EX, kHashHdr + 60);
    fill(got[2], 0x77777777, v::VIRTIO_NET_HASH_REPORT_NONE, kHashHdr + 60);
    const std::vector<Seen> seen = poll();
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].hash_value, 0xdeadbeefu);
    EXPECT_EQ(seen[0].hash_report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
    EXPECT_EQ(seen[0].len, kHashHdr + 60);
    EXPECT_EQ(seen[1].hash_report, v::VIRTIO_NET_HASH_REPORT_UDPv6_EX) << "a spec type";
    EXPECT_EQ(seen[2].hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
    EXPECT_EQ(seen[2].hash_value, 0u) << "no hash without a type";
    EXPECT_EQ(qp().stats().rx_hash_report_unknown.get(), 0u);

    // The hash is the flow's (sk_rxhash) and XPS's flow hash.
    Flow flow(1 << 20);
    EXPECT_FALSE(flow.rxhash().has_value());
    flow.record_rxhash(seen[0].hash_value);
    ASSERT_TRUE(flow.rxhash().has_value());
    EXPECT_EQ(*flow.rxhash(), 0xdeadbeefu);
}

TEST_F(HashReportRx, AnUnknownTypeIsCountedAndTakenAsNone) {
    const std::vector<Popped> got = start(2);
    ASSERT_EQ(got.size(), 2u);
    fill(got[0], 0x12345678, v::VIRTIO_NET_HASH_REPORT_UDPv6_EX + 1, kHashHdr + 1);
    fill(got[1], 0x12345678, 0xffff, kHashHdr + 1);
    const std::vector<Seen> seen = poll();
    ASSERT_EQ(seen.size(), 2u);
    for (const Seen& s : seen) {
        EXPECT_EQ(s.hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
        EXPECT_EQ(s.hash_value, 0u);
    }
    EXPECT_EQ(qp().stats().rx_hash_report_unknown.get(), 2u);
    EXPECT_FALSE(qp().rx_queue().broken()) << "a packet's field, not a ring rule";
}

TEST_F(HashReportRx, UsedLenUpToTheHashHeaderIsDropped) {
    const std::vector<Popped> got = start(3);
    ASSERT_EQ(got.size(), 3u);
    // 13 bytes: a header and a byte without the feature, short of one with it.
    const uint32_t lens[] = {kHdr + 1, kHashHdr, kHashHdr + 1};
    for (std::size_t k = 0; k < 3; ++k) fill(got[k], 1, v::VIRTIO_NET_HASH_REPORT_IPv4, lens[k]);
    const std::vector<Seen> seen = poll();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].len, kHashHdr + 1);
    EXPECT_EQ(qp().stats().rx_drop_bad_len.get(), 2u);
    EXPECT_EQ(qp().free_bufs(), free_after_fill_ + 3u);
}

TEST_F(HashReportRx, WithoutTheFeatureNothingIsReadFromPastTheHeader) {
    const std::vector<Popped> got = start(1, /*hash_report=*/false);
    ASSERT_EQ(got.size(), 1u);
    fill(got[0], 0xabcdef01, v::VIRTIO_NET_HASH_REPORT_TCPv4, kHashHdr + 10);
    const std::vector<Seen> seen = poll();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].hash_report, v::VIRTIO_NET_HASH_REPORT_NONE) << "frame bytes, not a hash";
    EXPECT_EQ(seen[0].hash_value, 0u);
}

}  // namespace
}  // namespace pvnet::frontend
