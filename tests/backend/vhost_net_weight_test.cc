// VhostNet's handler weights called directly, without the worker thread
// (vhost_net_harness.h): the weights of seed 001 (packet weight, byte weight,
// "no limit", 2 x queue size) on tx and rx, decided by counters and by what
// reaches the port and the used rings, never by time (STYLE.md §11).
#include "pvnet/backend/vhost_net.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench

INSTANTIATE_TEST_SUITE_P(VhostNet, EventIdx, ::testing::Bool(), event_idx_name);

// ---- (a) tx packet weight ----------------------------------------------------

TEST_P(EventIdx, HandleTxRequeuesAfterPacketWeight) {
    Harness h({.size = 1024, .event_idx = GetParam(), .tx_weight = {256, kByteWeight}});
    h.add_tx_burst(0, 1000, 64);

    EXPECT_EQ(run_tx(h), 256u);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 1u);
    EXPECT_NE(h.dev().pending_work() & Dev::kTxWork, 0u);
    EXPECT_EQ(h.stats().tx_max_run_pkts.get(), 256u);
    EXPECT_EQ(h.stats().tx_pkts.get(), 256u);
    EXPECT_EQ(h.stats().tx_bytes.get(), 256u * 64u);
    EXPECT_EQ(h.dev().tx_queue().last_avail_idx().value(), 256);
    // The run's used entries are published, the device still polls (requeued).
    EXPECT_EQ(h.used_idx(h.tx_addrs()), 256);
    if (!GetParam()) {
        EXPECT_EQ(h.used_flags(h.tx_addrs()), virtio::VIRTQ_USED_F_NO_NOTIFY);
    }

    EXPECT_EQ(run_tx(h), 256u);
    EXPECT_EQ(run_tx(h), 256u);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 3u);
    EXPECT_EQ(run_tx(h), 1000u - 3 * 256u);  // ring empty: stops, no requeue
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 3u);
    EXPECT_EQ(h.stats().tx_runs.get(), 4u);
    EXPECT_EQ(h.stats().tx_max_run_pkts.get(), 256u);
    expect_rearmed(h, h.tx_addrs(), 1000, GetParam());
    EXPECT_EQ(run_tx(h), 0u);

    // In order, intact, every chain returned with length 0.
    ASSERT_EQ(h.port.sent_seqs.size(), 1000u);
    for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(h.port.sent_seqs[i], i);
    EXPECT_EQ(h.port.send_bad, 0u);
    const auto used = Harness::reap(h.txd());
    ASSERT_EQ(used.size(), 1000u);
    for (uint64_t i = 0; i < used.size(); ++i) {
        EXPECT_EQ(used[i].token, i);
        EXPECT_EQ(used[i].len, 0u);
    }
    EXPECT_FALSE(h.dev().tx_queue().broken());
}

TEST_P(EventIdx, HandleTxRequeuesWhenTheWeightEndsExactlyAtTheLastChain) {
    // As vhost: the weight check does not look ahead, so a run that moved
    // exactly the weight requeues even if the ring is now empty; the next
    // run finds nothing and re-arms.
    Harness h({.size = 512, .event_idx = GetParam(), .tx_weight = {256, 0}});
    h.add_tx_burst(0, 512, 64);
    EXPECT_EQ(run_tx(h), 256u);
    EXPECT_EQ(run_tx(h), 256u);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 2u);
    EXPECT_EQ(run_tx(h), 0u);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 2u);
    expect_rearmed(h, h.tx_addrs(), 512, GetParam());
}

// ---- (b) rx packet weight ----------------------------------------------------

TEST_P(EventIdx, HandleRxRequeuesAfterPacketWeightUnderAFlood) {
    Harness h({.size = 1024, .event_idx = GetParam(), .rx_weight = {128, kByteWeight}});
    h.port.rx_left = FakePort::kFlood;
    h.add_rx_burst(0, 1000);

    EXPECT_EQ(run_rx(h), 128u);
    EXPECT_EQ(h.port.rx_seq, 128u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 1u);
    EXPECT_NE(h.dev().pending_work() & Dev::kRxWork, 0u);
    EXPECT_EQ(h.stats().rx_max_run_pkts.get(), 128u);
    EXPECT_EQ(h.stats().rx_bytes.get(), 128u * 64u);
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 128);

    for (int run = 2; run <= 7; ++run) EXPECT_EQ(run_rx(h), 128u) << "run " << run;
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 7u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);
    // Out of guest buffers: the flood is still there, the run ends and re-arms.
    EXPECT_EQ(run_rx(h), 1000u - 7 * 128u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 7u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 1u);
    EXPECT_EQ(h.stats().rx_max_run_pkts.get(), 128u);
    expect_rearmed(h, h.rx_addrs(), 1000, GetParam());

    // Every buffer holds its frame, in order.
    const auto used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 1000u);
    for (uint64_t i = 0; i < used.size(); ++i) {
        ASSERT_EQ(used[i].token, i);
        ASSERT_EQ(used[i].len, 64u);
        EXPECT_EQ(check_packet(h.host(Harness::slot_gpa(i)), 64), std::optional<uint64_t>(i));
    }
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST(HandleRx, DefaultWeightYieldsAfter256SmallPackets) {
    // Seed 001: an rx flood of small packets yields to tx after kPktWeight.
    Harness h({.size = 1024});
    h.port.rx_left = FakePort::kFlood;
    h.add_rx_burst(0, 1000);
    EXPECT_EQ(run_rx(h), uint64_t{kPktWeight});
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 1u);
}

// ---- (c) byte weight -----------------------------------------------------------

/// How many packets of `sizes` (from `first`) a run with byte weight `b` moves.
uint32_t packets_until_bytes(const std::vector<uint32_t>& sizes, std::size_t first, uint64_t b) {
    uint64_t total = 0;
    uint32_t n = 0;
    for (std::size_t i = first; i < sizes.size(); ++i) {
        total += sizes[i];
        ++n;
        if (total >= b) break;
    }
    return n;
}

TEST(HandleTx, ByteWeightStopsAtThePacketThatReachesIt) {
    const std::vector<uint32_t> cycle{60, 1514, 200, 12, 800, 64, 1000};
    std::vector<uint32_t> sizes;
    for (int i = 0; i < 300; ++i)
        sizes.push_back(cycle[static_cast<std::size_t>(i) % cycle.size()]);

    for (const uint64_t b : {uint64_t{5000}, uint64_t{60 + 1514 + 200}, uint64_t{60 + 1514 + 201},
                             uint64_t{1}, uint64_t{kByteWeight}}) {
        SCOPED_TRACE(b);
        Harness h({.size = 512, .tx_weight = {0, static_cast<uint32_t>(b)}});
        for (std::size_t i = 0; i < sizes.size(); ++i)
            ASSERT_EQ(h.add_tx(i, sizes[i]), AddStatus::Ok);
        h.txd().publish();

        std::size_t done = 0;
        uint64_t requeues = 0;
        while (done < sizes.size()) {
            const uint32_t want = packets_until_bytes(sizes, done, b);
            ASSERT_EQ(run_tx(h), want) << "after " << done;
            done += want;
            uint64_t bytes = 0;
            for (std::size_t i = done - want; i < done; ++i) bytes += sizes[i];
            if (bytes >= b) ++requeues;
            ASSERT_EQ(h.stats().tx_weight_requeue.get(), requeues);
        }
        EXPECT_EQ(h.port.sent_lens, sizes);
        EXPECT_EQ(h.stats().tx_bytes.get(), h.port.sent_bytes);
        EXPECT_EQ(h.port.send_bad, 0u);
    }
}

TEST(HandleRx, ByteWeightStopsAtThePacketThatReachesIt) {
    // The default byte weight with 1000-byte frames: ceil(0x80000 / 1000).
    Harness h({.size = 1024, .rx_weight = {0, kByteWeight}});
    h.port.rx_left = FakePort::kFlood;
    h.port.rx_len = 1000;
    h.add_rx_burst(0, 1000);
    const uint64_t want = (uint64_t{kByteWeight} + 999) / 1000;
    EXPECT_EQ(run_rx(h), want);
    EXPECT_EQ(h.stats().rx_bytes.get(), want * 1000u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 1u);
}

TEST(HandleRx, WhicheverWeightIsReachedFirstEndsTheRun) {
    // 1514-byte frames: 0x80000 bytes would take 347 packets, 256 come first.
    Harness h({.size = 1024, .rx_weight = {kPktWeight, kByteWeight}});
    h.port.rx_left = FakePort::kFlood;
    h.port.rx_len = 1514;
    h.add_rx_burst(0, 1000);
    EXPECT_EQ(run_rx(h), uint64_t{kPktWeight});
    // 4000-byte weight, 16 packets: the bytes come first (3 packets).
    Harness g({.size = 256, .rx_weight = {16, 4000}});
    g.port.rx_left = FakePort::kFlood;
    g.port.rx_len = 1514;
    g.add_rx_burst(0, 100);
    EXPECT_EQ(run_rx(g), 3u);
}

// ---- (d) no limit --------------------------------------------------------------

TEST_P(EventIdx, HandleTxWithoutLimitsDrainsTheRingAndRearms) {
    Harness h({.size = 1024, .event_idx = GetParam(), .tx_weight = {0, 0}});
    h.add_tx_burst(0, 1000, 1514);
    EXPECT_EQ(run_tx(h), 1000u);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 0u);
    EXPECT_EQ(h.stats().tx_max_run_pkts.get(), 1000u);
    EXPECT_EQ(h.stats().tx_bytes.get(), 1000u * 1514u);
    expect_rearmed(h, h.tx_addrs(), 1000, GetParam());
    EXPECT_EQ(h.used_idx(h.tx_addrs()), 1000);
    // Re-armed for real: the driver's next chain asks for a kick.
    ASSERT_EQ(h.add_tx(1000, 64), AddStatus::Ok);
    EXPECT_TRUE(h.txd().kick_prepare());
}

TEST(HandleRx, WithoutLimitsRunsUntilThePortIsEmpty) {
    Harness h({.size = 1024, .rx_weight = {0, 0}});
    h.port.rx_left = 700;
    h.add_rx_burst(0, 1000);
    EXPECT_EQ(run_rx(h), 700u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 0u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);  // the port ran dry, not the ring
    EXPECT_EQ(h.port.recv_calls, 700u);
    EXPECT_EQ(run_rx(h), 0u);
}

// ---- (e) weight of 2 x queue size: the guest refills during the run --------------

TEST_P(EventIdx, HandleTxWeightOfTwiceTheQueueSize) {
    constexpr uint16_t kSize = 256;
    constexpr uint64_t kTotal = 1000;
    Harness h({.size = kSize, .event_idx = GetParam(), .tx_weight = {2u * kSize, 0}});
    uint64_t next = 0;
    // A guest transmitting as fast as completions free descriptors.
    auto refill = [&] {
        (void)Harness::reap(h.txd());
        while (next < kTotal && h.txd().num_free() > 0) {
            ASSERT_EQ(h.add_tx(next, 64), AddStatus::Ok);
            ++next;
        }
        h.txd().publish();
    };
    refill();
    h.port.on_send = refill;

    EXPECT_EQ(run_tx(h), 2u * kSize);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 1u);
    EXPECT_EQ(h.stats().tx_max_run_pkts.get(), 2u * kSize);
    EXPECT_EQ(run_tx(h), kTotal - 2u * kSize);
    EXPECT_EQ(h.stats().tx_weight_requeue.get(), 1u);
    ASSERT_EQ(h.port.sent_seqs.size(), kTotal);
    for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(h.port.sent_seqs[i], i);
    expect_rearmed(h, h.tx_addrs(), static_cast<uint16_t>(kTotal), GetParam());
}

TEST_P(EventIdx, HandleRxWeightOfTwiceTheQueueSize) {
    constexpr uint16_t kSize = 256;
    Harness h({.size = kSize, .event_idx = GetParam(), .rx_weight = {2u * kSize, 0}});
    h.port.rx_left = FakePort::kFlood;
    // Bounded, so a run that ignored its weight would end (and fail) rather than spin.
    constexpr uint64_t kBuffers = 8u * kSize;
    uint64_t next = 0;
    uint64_t reaped = 0;
    // A guest that takes each frame and posts its buffer again.
    auto refill = [&] {
        for (const UsedBuf& u : Harness::reap(h.rxd())) {
            ASSERT_EQ(u.len, 64u);
            ASSERT_EQ(check_packet(h.host(Harness::slot_gpa(u.token)), 64),
                      std::optional<uint64_t>(reaped));
            ++reaped;
        }
        while (next < kBuffers && h.rxd().num_free() > 0) {
            ASSERT_EQ(h.add_rx(next), AddStatus::Ok);
            ++next;
        }
        h.rxd().publish();
    };
    refill();
    h.port.on_recv = refill;

    EXPECT_EQ(run_rx(h), 2u * kSize);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 1u);
    EXPECT_EQ(h.stats().rx_max_run_pkts.get(), 2u * kSize);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);
    EXPECT_EQ(run_rx(h), 2u * kSize);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 2u);
}

}  // namespace
}  // namespace pvnet::backend
