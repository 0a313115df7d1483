// VhostNet's handle_rx with mergeable rx buffers (VIRTIO_NET_F_MRG_RXBUF,
// VIRTIO 1.2 5.1.6.4), handlers called directly: a 64 KiB GSO-sized packet
// fills ceil(len / buffer) chains and says so in num_buffers; chains popped
// but not needed go back to the ring; too few guest buffers stop rx (counted)
// until a refill, never truncating; a port that cannot peek gets room for the
// largest packet; hostile chains (a readable part, more than kMaxIov pieces).
// Decided by counters, used entries and bytes; no timing.
#include "pvnet/backend/vhost_net.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench

constexpr uint32_t kBig = 65550;  // 12-byte header + a 64 KiB GSO frame
constexpr uint32_t kBigBufs = (kBig + Harness::kSlotBytes - 1) / Harness::kSlotBytes;  // 33

uint16_t num_buffers_at(const std::byte* hdr) {
    uint16_t v = 0;
    std::memcpy(&v, hdr + offsetof(virtio::virtio_net_hdr, num_buffers), sizeof v);
    return virtio::le_to_host(v);
}

/// One packet reassembled from the used entries the guest reaped.
struct Rx {
    uint16_t num_buffers = 0;
    uint32_t bufs = 0;
    std::vector<std::byte> bytes;
};

/// Reaps and reassembles every packet the device completed on rx; each
/// packet's first buffer names how many follow.
std::vector<Rx> reap_packets(Harness& h) {
    std::vector<Rx> out;
    const std::vector<UsedBuf> used = Harness::reap(h.rxd());
    for (std::size_t i = 0; i < used.size();) {
        Rx p;
        p.num_buffers = num_buffers_at(h.host(Harness::slot_gpa(used[i].token)));
        for (uint32_t k = 0; k < p.num_buffers && i < used.size(); ++k, ++i) {
            const std::byte* b = h.host(Harness::slot_gpa(used[i].token));
            p.bytes.insert(p.bytes.end(), b, b + used[i].len);
            ++p.bufs;
        }
        if (p.num_buffers == 0) ++i;
        out.push_back(std::move(p));
    }
    return out;
}

/// The packet as FakePort wrote it: num_buffers cleared, then checked.
std::optional<uint64_t> check_rx(Rx& p) {
    if (p.bytes.size() < kHdr) return std::nullopt;
    std::memset(p.bytes.data() + offsetof(virtio::virtio_net_hdr, num_buffers), 0, 2);
    return check_packet(p.bytes.data(), static_cast<uint32_t>(p.bytes.size()));
}

class Peek : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(MrgRx, Peek, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                             return p.param ? "PortPeeks" : "LengthUnknown";
                         });

TEST_P(Peek, BigPacketFillsNBuffersAndSaysSoInNumBuffers) {
    Harness h({.size = 256, .event_idx = true, .mergeable_rx = true});
    h.port.peek = GetParam();
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 64);
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_EQ(h.stats().rx_bytes.get(), kBig);
    EXPECT_EQ(h.stats().rx_merged_pkts.get(), 1u);
    EXPECT_EQ(h.port.recv_calls, 1u) << "one recv over the gathered buffers";
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), 1u);
    EXPECT_EQ(pkts[0].num_buffers, kBigBufs);
    EXPECT_EQ(pkts[0].bufs, kBigBufs);
    ASSERT_EQ(pkts[0].bytes.size(), kBig);
    EXPECT_EQ(check_rx(pkts[0]), std::optional<uint64_t>(0)) << "byte-identical";
    // The chains not needed went back: the next packet starts at chain 33.
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), kBigBufs);
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST_P(Peek, SmallAndLargePacketsMixInOneBurst) {
    Harness h({.size = 256, .mergeable_rx = true});
    h.port.peek = GetParam();
    const std::vector<uint32_t> lens = {64, kBig, 1514, 2048, 2049, 60000, 100};
    h.port.rx_lens = lens;
    h.port.rx_left = lens.size();
    h.add_rx_burst(0, 256);
    EXPECT_EQ(run_rx(h), lens.size());
    EXPECT_EQ(h.stats().rx_merged_pkts.get(), 3u);
    EXPECT_EQ(h.dev().rx_queue().stats().used_publishes.get(), 1u) << "one burst";
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), lens.size());
    uint32_t bufs = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) {
        const uint32_t want = (lens[i] + Harness::kSlotBytes - 1) / Harness::kSlotBytes;
        EXPECT_EQ(pkts[i].num_buffers, want) << i;
        EXPECT_EQ(pkts[i].bytes.size(), lens[i]) << i;
        EXPECT_EQ(check_rx(pkts[i]), std::optional<uint64_t>(i)) << i;
        bufs += want;
    }
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), bufs) << "the rest went back";
}

TEST_P(Peek, TooFewBuffersWaitForARefillNeverTruncate) {
    Harness h({.size = 256, .event_idx = true, .mergeable_rx = true});
    h.port.peek = GetParam();
    h.port.rx_left = 1;
    // Known length: 64 KiB does not fit 10 buffers. Unknown: even 64 bytes
    // wait, since the packet could be 64 KiB.
    h.port.rx_len = GetParam() ? kBig : 64;
    h.add_rx_burst(0, 10);
    EXPECT_EQ(run_rx(h), 0u);
    EXPECT_EQ(h.stats().rx_ring_short.get(), 1u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);
    EXPECT_EQ(h.port.recv_calls, 0u) << "the packet stays at the port";
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 0);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 0) << "all 10 given back";
    // Re-armed past the buffers given back: the refill's publish kicks.
    EXPECT_EQ(h.avail_event(h.rx_addrs()), 10);
    h.add_rx_burst(10, 30);
    EXPECT_EQ(run_rx(h), 1u);
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), 1u);
    EXPECT_EQ(pkts[0].bytes.size(), h.port.rx_len);
    EXPECT_EQ(check_rx(pkts[0]), std::optional<uint64_t>(0));
    EXPECT_EQ(h.stats().rx_ring_short.get(), 1u);
}

TEST(MrgRx, AnEmptyRingCountsAsEmptyNotShort) {
    Harness h({.size = 64, .mergeable_rx = true});
    h.port.rx_left = 1;
    EXPECT_EQ(run_rx(h), 0u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 1u);
    EXPECT_EQ(h.stats().rx_ring_short.get(), 0u);
    EXPECT_EQ(h.used_flags(h.rx_addrs()), 0) << "re-armed for the refill";
}

TEST(MrgRx, ByteWeightCountsWholePackets) {
    // 0x80000 bytes is 8 packets of 65,550 (the 8th reaches it).
    Harness h({.size = 1024, .mergeable_rx = true});
    h.port.peek = true;
    h.port.rx_left = FakePort::kFlood;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 1000);
    EXPECT_EQ(run_rx(h), 8u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 1u);
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 8 * kBigBufs);
}

TEST(MrgRx, ReadableChainIsAPacketDefectTheGatheredChainsReturnEmpty) {
    Harness h({.size = 256, .mergeable_rx = true});
    h.port.peek = true;
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    ASSERT_EQ(h.add_rx(0), AddStatus::Ok);
    ASSERT_EQ(h.add_rx(1), AddStatus::Ok);
    const Buf bad{Harness::slot_gpa(2), 64};
    ASSERT_EQ(h.rxd().add(std::span<const Buf>(&bad, 1), {}, 2), AddStatus::Ok);
    h.add_rx_burst(3, 40);
    EXPECT_EQ(run_rx(h), 2u) << "the defect, then the packet";
    EXPECT_EQ(h.stats().rx_drop_bad_chain.get(), 1u);
    const std::vector<UsedBuf> used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 3u + kBigBufs);
    for (uint64_t t = 0; t < 3; ++t) {
        EXPECT_EQ(used[t].token, t);
        EXPECT_EQ(used[t].len, 0u) << "the driver drops it as too short";
    }
    EXPECT_EQ(used[3].token, 3u);
    EXPECT_EQ(num_buffers_at(h.host(Harness::slot_gpa(3))), kBigBufs);
    EXPECT_EQ(h.port.rx_seq, 1u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST(MrgRx, PacketNeedingMoreThanMaxIovPiecesBreaksTheQueue) {
    // 1100 buffers of 48 bytes: 1024 pieces hold 49,152 bytes, short of 65,550.
    Harness h({.size = 2048, .mergeable_rx = true});
    h.port.peek = true;
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 1100, 48);
    EXPECT_EQ(run_rx(h), 0u);
    EXPECT_TRUE(h.dev().rx_queue().broken());
    EXPECT_EQ(h.dev().rx_queue().broken_reason(), RingError::TooManyIovs);
    EXPECT_EQ(h.dev().rx_queue().stats().errors.get(RingError::TooManyIovs), 1u);
    EXPECT_EQ(h.port.recv_calls, 0u);
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 0);
    EXPECT_EQ(run_rx(h), 0u) << "a broken queue is left alone";
}

TEST(MrgRx, PortDropGivesEveryChainBack) {
    // Longer than the room gathered for an unknown length: the port drops it.
    Harness h({.size = 64, .mergeable_rx = true});
    h.port.rx_left = 1;
    h.port.rx_len = 70000;
    h.add_rx_burst(0, 64);
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_EQ(h.port.rx_no_room, 1u);
    EXPECT_EQ(h.stats().rx_drop_no_room.get(), 1u);
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 0);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 0) << "all given back";
    h.port.rx_left = 1;
    h.port.rx_len = 64;
    EXPECT_EQ(run_rx(h), 1u);
    const std::vector<UsedBuf> used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0].token, 0u) << "the first buffer serves the next packet";
    EXPECT_EQ(used[0].len, 64u);
}

}  // namespace
}  // namespace pvnet::backend
