// VhostNet's handle_rx with mergeable rx buffers (VIRTIO_NET_F_MRG_RXBUF,
// VIRTIO 1.2 5.1.6.4), handlers called directly: a 64 KiB GSO packet (the
// guest negotiated GUEST_TSO4) fills ceil(len / buffer) chains and says so in
// num_buffers; chains popped but not needed go back to the ring. A port that
// peeks (exact length) waits for a refill when the guest's buffers are too
// few, never truncating. A port that cannot peek gets room for the largest
// frame that can arrive (64 KiB with GSO, else hdr + 1518) and, when the
// guest posted less, receives into what is there (rx_short_recv): only a
// frame that does not fit is a drop. Hostile chains: a readable part; more
// than kMaxIov pieces (a drop, not a ring violation). Decided by counters,
// used entries and bytes; no timing.
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
/// A guest that accepts 64 KiB GSO frames on receive: what lets kBig arrive.
constexpr uint64_t kGuestTso4 = virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_TSO4);
/// hdr + the largest frame a port that does not tell (no max_frame_bytes)
/// can hand over without GSO: 1500-byte MTU, Ethernet and 802.1Q headers.
constexpr uint32_t kNoGsoNeed = kHdr + kDefaultMaxFrameBytes;  // 1530

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
    Harness h({.size = 256, .event_idx = true, .mergeable_rx = true, .extra_features = kGuestTso4});
    h.port.peek = GetParam();
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 64);
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_EQ(h.stats().rx_bytes.get(), kBig);
    EXPECT_EQ(h.stats().rx_merged_pkts.get(), 1u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 0u) << "64 buffers hold the largest GSO frame";
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
    Harness h({.size = 256, .mergeable_rx = true, .extra_features = kGuestTso4});
    h.port.peek = GetParam();
    const std::vector<uint32_t> lens = {64, kBig, 1514, 2048, 2049, 60000, 100};
    h.port.rx_lens = lens;
    h.port.rx_left = lens.size();
    h.add_rx_burst(0, 256);
    EXPECT_EQ(run_rx(h), lens.size());
    EXPECT_EQ(h.stats().rx_merged_pkts.get(), 3u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 0u);
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

TEST(MrgRx, KnownLengthTooFewBuffersWaitForARefillNeverTruncate) {
    // The port peeks: 64 KiB is known not to fit 10 buffers, so rx waits.
    Harness h({.size = 256, .event_idx = true, .mergeable_rx = true, .extra_features = kGuestTso4});
    h.port.peek = true;
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 10);
    EXPECT_EQ(run_rx(h), 0u);
    EXPECT_EQ(h.stats().rx_ring_short.get(), 1u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 0u) << "a known length is not received short";
    EXPECT_EQ(h.port.recv_calls, 0u) << "the packet stays at the port";
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 0);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 0) << "all 10 given back";
    // Re-armed past the buffers given back: the refill's publish kicks.
    EXPECT_EQ(h.avail_event(h.rx_addrs()), 10);
    h.add_rx_burst(10, 30);
    EXPECT_EQ(run_rx(h), 1u);
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), 1u);
    EXPECT_EQ(pkts[0].bytes.size(), kBig);
    EXPECT_EQ(check_rx(pkts[0]), std::optional<uint64_t>(0));
    EXPECT_EQ(h.stats().rx_ring_short.get(), 1u);
}

TEST(MrgRx, UnknownLengthIsReceivedIntoFewerBuffersDroppedOnlyWhenItDoesNotFit) {
    // The port cannot peek and the guest takes GSO: room for 65,605 bytes is
    // wanted, 10 buffers (20 KiB) are posted. Waiting would stall a small
    // frame behind buffers the guest may never add: rx receives into what
    // is there (rx_short_recv), and only a frame larger than that is dropped.
    Harness h({.size = 256, .event_idx = true, .mergeable_rx = true, .extra_features = kGuestTso4});
    h.add_rx_burst(0, 10);
    h.port.rx_left = 1;
    h.port.rx_len = 64;
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_EQ(h.stats().rx_pkts.get(), 1u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 1u);
    EXPECT_EQ(h.stats().rx_ring_short.get(), 0u);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 1) << "9 of 10 given back";

    // 64 KiB does not fit the 9 left: consumed at the port, counted, every
    // chain given back, nothing truncated.
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_EQ(h.stats().rx_pkts.get(), 1u);
    EXPECT_EQ(h.port.rx_no_room, 1u);
    EXPECT_EQ(h.stats().rx_drop_no_room.get(), 1u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 2u);
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 1) << "no used entry for the drop";
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 1);

    // A frame the 9 buffers hold arrives whole, over 5 of them.
    h.port.rx_left = 1;
    h.port.rx_len = 9000;
    EXPECT_EQ(run_rx(h), 1u);
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), 2u);
    EXPECT_EQ(pkts[0].bytes.size(), 64u);
    EXPECT_EQ(check_rx(pkts[0]), std::optional<uint64_t>(0));
    EXPECT_EQ(pkts[1].num_buffers, 5u);
    ASSERT_EQ(pkts[1].bytes.size(), 9000u);
    EXPECT_EQ(check_rx(pkts[1]), std::optional<uint64_t>(1)) << "byte-identical";
    EXPECT_EQ(h.stats().rx_short_recv.get(), 3u);
    EXPECT_EQ(h.stats().rx_ring_short.get(), 0u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

/// Chains a non-peeking port's frame pops from buffers of `buf_bytes`.
uint64_t pops_for_one_small_frame(uint32_t buf_bytes, uint64_t extra_features) {
    Harness h({.size = 256, .mergeable_rx = true, .extra_features = extra_features});
    h.add_rx_burst(0, 200, buf_bytes);
    h.port.rx_left = 1;
    h.port.rx_len = 64;
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 0u);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 1) << "the rest given back";
    return h.dev().rx_queue().stats().pops.get();
}

TEST(MrgRx, UnknownLengthWithoutGsoReservesOneMaxFrame) {
    // Without GUEST_TSO4/6/UFO nothing larger than hdr + 1518 can arrive from
    // a port that does not say otherwise: exactly that much is gathered.
    EXPECT_EQ(pops_for_one_small_frame(kNoGsoNeed / 3, 0), 3u) << "3 x 510 = 1530";
    EXPECT_EQ(pops_for_one_small_frame(kNoGsoNeed / 3 - 1, 0), 4u) << "3 x 509 < 1530";
    EXPECT_EQ(pops_for_one_small_frame(Harness::kSlotBytes, 0), 1u);
    // With GSO a 64 KiB frame may come: 65,605 bytes' worth.
    EXPECT_EQ(pops_for_one_small_frame(kNoGsoNeed / 3, kGuestTso4),
              (kMaxGsoPacketBytes + kNoGsoNeed / 3 - 1) / (kNoGsoNeed / 3));

    // A largest frame lands whole in the buffers gathered for it.
    Harness h({.size = 256, .mergeable_rx = true});
    h.add_rx_burst(0, 10, kNoGsoNeed / 3);
    h.port.rx_left = 1;
    h.port.rx_len = kNoGsoNeed;
    EXPECT_EQ(run_rx(h), 1u);
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), 1u);
    EXPECT_EQ(pkts[0].num_buffers, 3u);
    ASSERT_EQ(pkts[0].bytes.size(), kNoGsoNeed);
    EXPECT_EQ(check_rx(pkts[0]), std::optional<uint64_t>(0));
    EXPECT_EQ(h.stats().rx_short_recv.get(), 0u);
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
    Harness h({.size = 1024, .mergeable_rx = true, .extra_features = kGuestTso4});
    h.port.peek = true;
    h.port.rx_left = FakePort::kFlood;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 1000);
    EXPECT_EQ(run_rx(h), 8u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 1u);
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 8 * kBigBufs);
}

TEST(MrgRx, ReadableChainIsAPacketDefectTheGatheredChainsReturnEmpty) {
    Harness h({.size = 256, .mergeable_rx = true, .extra_features = kGuestTso4});
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

TEST_P(Peek, PacketNeedingMoreThanMaxIovPiecesIsADropNotARingViolation) {
    // 1100 buffers of 48 bytes: 1024 pieces (kMaxIov) hold 49,152 bytes,
    // short of 65,550. Tiny buffers are legal: more of them cannot help a
    // packet past the piece limit, so it is received into what was gathered
    // and, not fitting, dropped; the ring stays up.
    Harness h({.size = 2048, .mergeable_rx = true, .extra_features = kGuestTso4});
    h.port.peek = GetParam();
    h.port.rx_left = 1;
    h.port.rx_len = kBig;
    h.add_rx_burst(0, 1100, 48);
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
    EXPECT_EQ(h.dev().rx_queue().stats().errors.total(), 0u);
    EXPECT_EQ(h.port.recv_calls, 1u);
    EXPECT_EQ(h.port.rx_no_room, 1u);
    EXPECT_EQ(h.stats().rx_drop_no_room.get(), 1u);
    EXPECT_EQ(h.stats().rx_short_recv.get(), 1u);
    EXPECT_EQ(h.stats().rx_ring_short.get(), 0u) << "no wait for buffers that cannot help";
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 0);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 0) << "all given back";
    // The next packet is served from the same buffers: 200 bytes in 5.
    h.port.rx_left = 1;
    h.port.rx_len = 200;
    EXPECT_EQ(run_rx(h), 1u);
    auto pkts = reap_packets(h);
    ASSERT_EQ(pkts.size(), 1u);
    EXPECT_EQ(pkts[0].num_buffers, 5u);
    ASSERT_EQ(pkts[0].bytes.size(), 200u);
    EXPECT_EQ(check_rx(pkts[0]), std::optional<uint64_t>(0));
}

TEST(MrgRx, PortDropGivesEveryChainBack) {
    // Longer than the room gathered for an unknown length (65,605 bytes with
    // GSO, 1,530 without; 64 buffers hold either): the port drops it.
    for (const uint64_t extra : {uint64_t{0}, kGuestTso4}) {
        SCOPED_TRACE(extra != 0 ? "GUEST_TSO4" : "no GSO");
        Harness h({.size = 64, .mergeable_rx = true, .extra_features = extra});
        h.port.rx_left = 1;
        h.port.rx_len = 70000;
        h.add_rx_burst(0, 64);
        EXPECT_EQ(run_rx(h), 1u);
        EXPECT_EQ(h.port.rx_no_room, 1u);
        EXPECT_EQ(h.stats().rx_drop_no_room.get(), 1u);
        EXPECT_EQ(h.stats().rx_short_recv.get(), 0u) << "the room was there; the frame is too big";
        EXPECT_EQ(h.stats().rx_pkts.get(), 0u);
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
}

// The one-chain fast path (recv_one_buffer) takes a known-length packet the
// next chain holds; a chain whose first piece splits the header, and a
// readable chain, go to the general path, with its results.
TEST(MrgRx, KnownSmallLengthFillsOneChainWhateverItsPieces) {
    Harness h({.size = 256, .mergeable_rx = true});
    h.port.peek = true;
    const std::vector<uint32_t> lens = {64, 100, 1514};
    h.port.rx_lens = lens;
    h.port.rx_left = lens.size();
    ASSERT_EQ(h.add_rx(0), AddStatus::Ok);
    // Chain 1: the header split 6 + 6 over two pieces 64 bytes apart.
    constexpr uint32_t kGap = 64;
    const Buf split[2] = {{Harness::slot_gpa(1), 6}, {Harness::slot_gpa(1) + kGap, 1984}};
    ASSERT_EQ(h.rxd().add({}, std::span<const Buf>(split, 2), 1), AddStatus::Ok);
    ASSERT_EQ(h.add_rx(2), AddStatus::Ok);
    h.rxd().publish();
    EXPECT_EQ(run_rx(h), lens.size());
    EXPECT_EQ(h.stats().rx_merged_pkts.get(), 0u);
    EXPECT_EQ(h.port.recv_calls, lens.size());
    const std::vector<UsedBuf> used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), lens.size());
    for (std::size_t i = 0; i < lens.size(); ++i) {
        EXPECT_EQ(used[i].token, i);
        EXPECT_EQ(used[i].len, lens[i]) << i;
        const std::byte* b = h.host(Harness::slot_gpa(i));
        Rx p;
        if (i == 1) {
            p.bytes.assign(b, b + 6);
            p.bytes.insert(p.bytes.end(), b + kGap, b + kGap + (used[i].len - 6));
        } else {
            p.bytes.assign(b, b + used[i].len);
        }
        EXPECT_EQ(num_buffers_at(p.bytes.data()), 1u) << i;
        EXPECT_EQ(check_rx(p), std::optional<uint64_t>(i)) << i;
    }
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST(MrgRx, KnownSmallLengthMeetsAReadableChainAsADefect) {
    Harness h({.size = 256, .mergeable_rx = true});
    h.port.peek = true;
    h.port.rx_left = 1;
    h.port.rx_len = 64;
    const Buf bad{Harness::slot_gpa(0), 64};
    ASSERT_EQ(h.rxd().add(std::span<const Buf>(&bad, 1), {}, 0), AddStatus::Ok);
    ASSERT_EQ(h.add_rx(1), AddStatus::Ok);
    h.rxd().publish();
    EXPECT_EQ(run_rx(h), 2u) << "the defect, then the packet";
    EXPECT_EQ(h.stats().rx_drop_bad_chain.get(), 1u);
    const std::vector<UsedBuf> used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 2u);
    EXPECT_EQ(used[0].token, 0u);
    EXPECT_EQ(used[0].len, 0u) << "the driver drops it as too short";
    EXPECT_EQ(used[1].token, 1u);
    EXPECT_EQ(used[1].len, 64u);
    EXPECT_EQ(num_buffers_at(h.host(Harness::slot_gpa(1))), 1u);
    EXPECT_EQ(h.port.rx_seq, 1u);
}

}  // namespace
}  // namespace pvnet::backend
