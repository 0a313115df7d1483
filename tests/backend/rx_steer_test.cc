// RxSteer, the device's receive steering state (VIRTIO 1.2 multiqueue
// steering and RSS): the pairs in use and where a frame goes without and with RSS
// (net::select_rx_queue, modulo the pairs in use as QEMU), the control
// side's clamps, and a reader steering while the control side flips
// snapshots (label threads: the TSan build runs it).
#include "pvnet/backend/rx_steer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "pvnet/net/rss.h"
#include "steer_frames.h"

namespace pvnet::backend {
namespace {

using test::udp4_frame;

/// RSS over `pairs` queues: table i % pairs, a key of `key_byte`s.
net::RssConfig rss_over(uint16_t pairs, uint16_t max_tx_vq, uint8_t key_byte = 0x6d) {
    net::RssConfig c;
    c.hash_types = net::kRssSupportedHashTypes;
    c.table_len = 64;
    for (uint16_t i = 0; i < c.table_len; ++i) c.table[i] = static_cast<uint16_t>(i % pairs);
    c.key_len = 40;
    c.key.fill(key_byte);
    c.unclassified_queue = 0;
    c.max_tx_vq = max_tx_vq;
    return c;
}

TEST(RxSteer, StartsWithEveryPairAndNoRss) {
    const RxSteer s(4);
    EXPECT_EQ(s.max_pairs(), 4);
    EXPECT_EQ(s.active_pairs(), 4);
    EXPECT_FALSE(s.rss_enabled());
    const auto f = udp4_frame(1000, 2000);
    for (uint16_t a = 0; a < 4; ++a) EXPECT_EQ(s.steer(f, a).queue, a) << "the arrival pair";
    EXPECT_EQ(s.steer(f, 6).queue, 2) << "beyond the pairs: modulo";
    EXPECT_EQ(s.steer(f, 6).hash_report, virtio::VIRTIO_NET_HASH_REPORT_NONE);
}

TEST(RxSteer, PairsSetNarrowsTheArrivalQueues) {
    RxSteer s(4);
    s.set_active_pairs(2);
    EXPECT_EQ(s.active_pairs(), 2);
    const auto f = udp4_frame(1, 2);
    EXPECT_EQ(s.steer(f, 0).queue, 0);
    EXPECT_EQ(s.steer(f, 1).queue, 1);
    EXPECT_EQ(s.steer(f, 2).queue, 0);
    EXPECT_EQ(s.steer(f, 3).queue, 1);
    // The control side clamps what its caller validated anyway.
    s.set_active_pairs(0);
    EXPECT_EQ(s.active_pairs(), 1);
    s.set_active_pairs(9);
    EXPECT_EQ(s.active_pairs(), 4);
}

TEST(RxSteer, RssPicksByToeplitzAndPairsSetTurnsItOff) {
    RxSteer s(4);
    const net::RssConfig c = rss_over(4, 4);
    s.set_rss(c);
    EXPECT_TRUE(s.rss_enabled());
    EXPECT_EQ(s.active_pairs(), 4) << "max_tx_vq";
    std::set<uint16_t> seen;
    for (uint16_t port = 1000; port < 1064; ++port) {
        const auto f = udp4_frame(port, 53);
        const net::RxSteering want = net::select_rx_queue(c, f);
        const net::RxSteering got = s.steer(f, 3);
        EXPECT_EQ(got.queue, want.queue) << port;
        EXPECT_EQ(got.hash, want.hash) << port;
        EXPECT_EQ(got.hash_report, virtio::VIRTIO_NET_HASH_REPORT_UDPv4);
        seen.insert(got.queue);
    }
    EXPECT_EQ(seen.size(), 4u) << "64 flows over 4 queues";
    // A frame without a hash goes to unclassified_queue, whatever its arrival.
    const std::vector<uint8_t> arp(60, 0);
    EXPECT_EQ(s.steer(arp, 2).queue, c.unclassified_queue);

    s.set_active_pairs(2);
    EXPECT_FALSE(s.rss_enabled());
    EXPECT_EQ(s.steer(udp4_frame(1000, 53), 3).queue, 1);
}

TEST(RxSteer, RssTableBeyondMaxTxVqWrapsToThePairsInUse) {
    RxSteer s(4);
    const net::RssConfig c = rss_over(4, 2);  // the table names 4 queues, 2 in use
    s.set_rss(c);
    EXPECT_EQ(s.active_pairs(), 2);
    for (uint16_t port = 1000; port < 1032; ++port) {
        const auto f = udp4_frame(port, 53);
        EXPECT_EQ(s.steer(f).queue, net::select_rx_queue(c, f).queue % 2) << port;
    }
}

TEST(RxSteer, ResetForgetsRss) {
    RxSteer s(4);
    s.set_rss(rss_over(4, 3));
    s.reset(1);
    EXPECT_FALSE(s.rss_enabled());
    EXPECT_EQ(s.active_pairs(), 1);
    EXPECT_EQ(s.steer(udp4_frame(5, 6), 3).queue, 0);
    s.reset(4);
    EXPECT_EQ(s.active_pairs(), 4);
}

// Config k: every table entry and unclassified_queue k, a key of k + 1s; a
// reader checks each answer against its own queue's config, so a snapshot
// torn between two configs (table of one, key of another) shows.
TEST(RxSteer, ReaderSeesWholeSnapshotsWhileTheControlSideFlips) {
    constexpr uint16_t kPairs = 4;
    RxSteer s(kPairs);
    std::vector<net::RssConfig> cfgs;
    for (uint16_t k = 0; k < kPairs; ++k) {
        net::RssConfig c = rss_over(1, kPairs, static_cast<uint8_t>(k + 1));
        c.table.fill(k);
        c.unclassified_queue = k;
        cfgs.push_back(c);
    }
    const auto frame = udp4_frame(4242, 80);
    const net::HashInput in = net::extract_hash_input(frame, net::kRssSupportedHashTypes);
    std::vector<uint32_t> hash_of;
    for (const auto& c : cfgs) {
        hash_of.push_back(net::toeplitz_hash({c.key.data(), c.key_len}, in.span()));
    }

    std::atomic<bool> done{false};
    std::atomic<uint64_t> reads{0}, bad{0}, rss_reads{0};
    std::thread reader([&] {
        while (!done.load(std::memory_order_relaxed)) {
            const net::RxSteering r = s.steer(frame, 3);
            if (r.hash_report == virtio::VIRTIO_NET_HASH_REPORT_NONE) {
                // RSS off: 3 % n for n in 1..4 pairs.
                if (r.queue != 0 && r.queue != 1 && r.queue != 3) bad.fetch_add(1);
            } else {
                rss_reads.fetch_add(1, std::memory_order_relaxed);
                if (r.queue >= kPairs || r.hash != hash_of[r.queue]) bad.fetch_add(1);
            }
            reads.fetch_add(1, std::memory_order_relaxed);
        }
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int i = 0; i < 4000 && std::chrono::steady_clock::now() < deadline; ++i) {
        if (i % 5 == 4) {
            s.set_active_pairs(static_cast<uint16_t>(1 + i % kPairs));
        } else {
            s.set_rss(cfgs[static_cast<std::size_t>(i) % kPairs]);
        }
        // Let the reader in between some flips (it is the only other thread).
        if (i % 64 == 0) {
            const uint64_t r0 = reads.load();
            while (reads.load() == r0 && std::chrono::steady_clock::now() < deadline) {
                std::this_thread::yield();
            }
        }
    }
    // The last snapshot (RSS off) read whole, too.
    const uint64_t r_end = reads.load();
    while (reads.load() < r_end + 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
    }
    done.store(true);
    reader.join();
    EXPECT_EQ(bad.load(), 0u);
    EXPECT_GT(rss_reads.load(), 0u) << "the reader saw RSS snapshots";
    EXPECT_GT(reads.load(), rss_reads.load()) << "and the others";
}

}  // namespace
}  // namespace pvnet::backend
