// The optional port concepts that save the relay's system calls (issue 24),
// handlers called directly over a port that adds them to FakePort:
// - HasRecvEmpty: handle_rx reads without asking rx_pending() first; a read
//   that finds nothing ends the run, its chains given back unused, no drop.
// - Mergeable rx without a length to peek: the chains a small frame did not
//   fill are held for the run's next packet and given back at its end, each
//   chain used once or given back once, also when a bad chain or a broken
//   ring comes among them.
// - HasSendBatch: handle_tx hands a burst to the port in one call; packets
//   not taken (a Retry) go back in order and come again, once each.
// Decided by used entries, counters and the bytes the port saw; no timing.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench

/// A guest that accepts 64 KiB GSO frames: with no length to peek, the
/// device gathers 64 KiB (33 buffers of 2 KiB) for every frame.
constexpr uint64_t kGuestTso4 = virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_TSO4);
constexpr uint32_t kGather = (kMaxGsoPacketBytes + Harness::kSlotBytes - 1) / Harness::kSlotBytes;

/// FakePort plus recv_was_empty (a read of an empty port says so) and
/// send_batch (the frames in order through FakePort::send, up to a Retry).
struct TryPort : FakePort {
    bool was_empty = false;
    uint64_t empty_reads = 0;
    uint64_t pending_asks = 0;
    std::vector<uint32_t> batch_sizes;

    bool rx_pending() noexcept {
        ++pending_asks;
        return FakePort::rx_pending();
    }
    uint32_t recv(std::span<const iovec> dst) noexcept {
        was_empty = rx_left == 0;
        if (was_empty) {
            ++empty_reads;
            return 0;
        }
        return FakePort::recv(dst);
    }
    bool recv_was_empty() const noexcept { return was_empty; }

    port::SendBatchResult send_batch(std::span<const port::TxFrame> frames) noexcept {
        batch_sizes.push_back(static_cast<uint32_t>(frames.size()));
        port::SendBatchResult r;
        for (const port::TxFrame& f : frames) {
            const port::SendResult s = send(f.iov, f.len);
            if (s == port::SendResult::Retry) {
                r.retry = true;
                break;
            }
            ++r.taken;
            if (s == port::SendResult::Sent) {
                ++r.sent;
                r.sent_bytes += f.len;
            }
        }
        return r;
    }
};
static_assert(port::HasRecvEmpty<TryPort> && port::HasSendBatch<TryPort>);
using TryHarness = BasicHarness<TryPort>;

Options mergeable_gso() {
    Options o;
    o.mergeable_rx = true;
    o.extra_features = kGuestTso4;
    return o;
}

/// Every used entry's token, in ring order; each may appear once only.
std::vector<uint64_t> used_tokens(TryHarness& h, std::set<uint64_t>& seen) {
    std::vector<uint64_t> out;
    for (const UsedBuf& u : TryHarness::reap(h.rxd())) {
        EXPECT_TRUE(seen.insert(u.token).second) << "buffer " << u.token << " used twice";
        out.push_back(u.token);
    }
    return out;
}

TEST(TryRead, SmallFramesUseOneHeldChainEachAndTheRunsEndGivesTheRestBack) {
    TryHarness h(mergeable_gso());
    h.add_rx_burst(0, 64);
    h.port.rx_left = 5;
    h.port.rx_len = 64;
    h.dev().handle_rx();
    EXPECT_EQ(h.stats().rx_pkts.get(), 5u);
    EXPECT_EQ(h.port.pending_asks, 0u) << "the read is the test";
    EXPECT_EQ(h.port.empty_reads, 1u) << "the read after the last frame ended the run";
    EXPECT_EQ(h.stats().rx_drop_no_room.get(), 0u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);
    // 33 gathered for the first frame, one more for each further frame and
    // for the read that found nothing (32 held are 64 KiB, a little short).
    EXPECT_EQ(h.dev().rx_queue().stats().pops.get(), kGather + 5u);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 5u) << "the held went back";
    std::set<uint64_t> seen;
    EXPECT_EQ(used_tokens(h, seen), (std::vector<uint64_t>{0, 1, 2, 3, 4})) << "pop order";

    // The next run starts where the last used one ended, with the given-back chains.
    h.port.rx_left = 3;
    h.dev().handle_rx();
    EXPECT_EQ(h.stats().rx_pkts.get(), 8u);
    EXPECT_EQ(used_tokens(h, seen), (std::vector<uint64_t>{5, 6, 7}));
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 8u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST(TryRead, EmptyPortGivesTheChainBackWithoutAMergeableRing) {
    Options o;
    TryHarness h(o);
    h.add_rx_burst(0, 4);
    h.port.rx_left = 2;
    h.dev().handle_rx();
    EXPECT_EQ(h.stats().rx_pkts.get(), 2u);
    EXPECT_EQ(h.port.empty_reads, 1u);
    EXPECT_EQ(h.stats().rx_drop_no_room.get(), 0u);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 2u) << "the tried chain went back";
    std::set<uint64_t> seen;
    EXPECT_EQ(used_tokens(h, seen), (std::vector<uint64_t>{0, 1}));
}

TEST(TryRead, WithoutGuestBuffersThePortIsAskedSoAnEmptyPortIsNoRefillWait) {
    TryHarness h(mergeable_gso());
    h.dev().handle_rx();  // no buffers, nothing waiting
    EXPECT_EQ(h.port.pending_asks, 1u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u) << "the port was empty: nothing to wait for";
    h.port.rx_left = 1;
    h.dev().handle_rx();  // a frame, still no buffers: the guest must refill
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 1u);
    h.add_rx_burst(0, 40);
    h.dev().handle_rx();
    EXPECT_EQ(h.stats().rx_pkts.get(), 1u);
}

TEST(HeldChains, ABadChainAfterHeldOnesReturnsThemAllUsedOnceAndTheFrameWaits) {
    TryHarness h(mergeable_gso());
    // 34 good buffers (tokens 0..33), then a readable one (a packet defect), then 40 good.
    for (uint64_t t = 0; t < 34; ++t) ASSERT_EQ(h.add_rx(t), AddStatus::Ok);
    const Buf bad{TryHarness::slot_gpa(34), Harness::kSlotBytes};
    ASSERT_EQ(h.rxd().add(std::span<const Buf>(&bad, 1), {}, 34), AddStatus::Ok);
    for (uint64_t t = 35; t < 75; ++t) ASSERT_EQ(h.add_rx(t), AddStatus::Ok);
    h.rxd().publish();
    h.port.rx_left = 3;
    h.port.rx_len = 64;
    h.dev().handle_rx();
    // Frame 0 fills 0 (1..32 held), frame 1 fills 1 (pops 33), frame 2 meets
    // 34: the 32 held (2..33) and 34 go back used with 0; frame 2 then takes 35.. .
    EXPECT_EQ(h.stats().rx_drop_bad_chain.get(), 1u);
    EXPECT_EQ(h.stats().rx_pkts.get(), 3u);
    EXPECT_EQ(h.port.rx_seq, 3u) << "no frame lost to the bad chain";
    std::set<uint64_t> seen;
    const std::vector<uint64_t> used = used_tokens(h, seen);
    ASSERT_EQ(used.size(), 2u + 33u + 1u);
    EXPECT_EQ(used.front(), 0u);
    EXPECT_EQ(used[1], 1u);
    EXPECT_EQ(used.back(), 35u) << "frame 2 in the first chain past the bad one";
    for (uint64_t t = 2; t <= 34; ++t) EXPECT_EQ(seen.count(t), 1u) << t;
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 36u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST(HeldChains, ABrokenRingStopsTheRunAndNoHeldChainIsUsed) {
    TryHarness h(mergeable_gso());
    h.add_rx_burst(0, 40);
    // Avail slot 40 names a head past the ring: the 41st pop breaks the queue.
    h.set_avail_slot(h.rx_addrs(), 40, h.size());
    h.set_avail_idx(h.rx_addrs(), 41);
    h.port.rx_left = 20;
    h.port.rx_len = 64;
    h.dev().handle_rx();
    // Frame 0 pops 33, frames 1..7 one each (33..39); frame 8 meets the bad head.
    EXPECT_TRUE(h.dev().rx_queue().broken());
    EXPECT_EQ(h.stats().rx_pkts.get(), 8u);
    // A broken ring is not written to: the burst's used entries stay unpublished.
    EXPECT_EQ(h.used_idx(h.rx_addrs()), 0u);
    const uint64_t pops = h.dev().rx_queue().stats().pops.get();
    h.port.rx_left = 20;
    h.dev().handle_rx();
    EXPECT_EQ(h.dev().rx_queue().stats().pops.get(), pops) << "nothing popped from a broken ring";
    EXPECT_EQ(h.stats().rx_pkts.get(), 8u);
}

TEST(SendBatch, ABurstGoesToThePortInOneCall) {
    Options o;
    TryHarness h(o);
    h.add_tx_burst(0, 10, 64);
    h.dev().handle_tx();
    EXPECT_EQ(h.port.batch_sizes, (std::vector<uint32_t>{10}));
    EXPECT_EQ(h.stats().tx_pkts.get(), 10u);
    EXPECT_EQ(h.stats().tx_bytes.get(), 640u);
    std::vector<uint64_t> want(10);
    for (uint64_t i = 0; i < 10; ++i) want[i] = i;
    EXPECT_EQ(h.port.sent_seqs, want);
    std::vector<uint64_t> used;
    for (const UsedBuf& u : TryHarness::reap(h.txd())) used.push_back(u.token);
    EXPECT_EQ(used, want);
}

TEST(SendBatch, ARetryMidBatchGivesTheRestBackInOrderAndTheyComeOnce) {
    Options o;
    TryHarness h(o);
    h.add_tx_burst(0, 10, 64);
    // Frames 0..3 are taken, then the port is full for one try.
    h.port.on_send = [&h] {
        if (h.port.sent_lens.size() == 4) h.port.tx_retry_left = 1;
    };
    h.dev().handle_tx();
    EXPECT_EQ(h.stats().tx_pkts.get(), 4u);
    EXPECT_EQ(h.stats().tx_retry.get(), 1u);
    EXPECT_EQ(h.dev().tx_queue().last_avail_idx().value(), 4u) << "6 given back";
    std::vector<uint64_t> used;
    for (const UsedBuf& u : TryHarness::reap(h.txd())) used.push_back(u.token);
    EXPECT_EQ(used, (std::vector<uint64_t>{0, 1, 2, 3}));
    h.port.on_send = nullptr;
    h.dev().handle_tx();
    std::vector<uint64_t> want(10);
    for (uint64_t i = 0; i < 10; ++i) want[i] = i;
    EXPECT_EQ(h.port.sent_seqs, want) << "in order, each once";
    for (const UsedBuf& u : TryHarness::reap(h.txd())) used.push_back(u.token);
    EXPECT_EQ(used, want);
    EXPECT_EQ(h.stats().tx_pkts.get(), 10u);
}

TEST(SendBatch, ABadChainSendsTheStagedFirstAndARetryThenGivesItBackToo) {
    Options o;
    TryHarness h(o);
    // 0..2 good, 3 writable (a defect), 4..5 good.
    for (uint64_t s = 0; s < 3; ++s) ASSERT_EQ(h.add_tx(s, 64), AddStatus::Ok);
    const Buf w{TryHarness::slot_gpa(3), 64};
    ASSERT_EQ(h.txd().add({}, std::span<const Buf>(&w, 1), 3), AddStatus::Ok);
    for (uint64_t s = 4; s < 6; ++s) ASSERT_EQ(h.add_tx(s, 64), AddStatus::Ok);
    h.txd().publish();
    h.port.tx_retry_left = 1;  // the first batch (0..2) finds no room
    h.dev().handle_tx();
    EXPECT_EQ(h.stats().tx_pkts.get(), 0u);
    EXPECT_EQ(h.stats().tx_drop_bad_chain.get(), 0u) << "the bad chain went back unseen";
    EXPECT_EQ(h.dev().tx_queue().last_avail_idx().value(), 0u);
    EXPECT_TRUE(TryHarness::reap(h.txd()).empty());
    h.dev().handle_tx();
    EXPECT_EQ(h.port.batch_sizes, (std::vector<uint32_t>{3, 3, 2}));
    EXPECT_EQ(h.port.sent_seqs, (std::vector<uint64_t>{0, 1, 2, 4, 5}));
    EXPECT_EQ(h.stats().tx_drop_bad_chain.get(), 1u);
    std::vector<uint64_t> used;
    for (const UsedBuf& u : TryHarness::reap(h.txd())) used.push_back(u.token);
    EXPECT_EQ(used, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5})) << "used in pop order";
}

}  // namespace
}  // namespace pvnet::backend
