// VhostNet's handlers called directly, without the worker thread: a test
// plays the guest driver on real split rings in one MemoryRegion (gpa
// 0x100000) and a FakePort plays the world. Everything is decided by
// counters and by what reaches the port and the used rings, so no test
// depends on time (STYLE.md §11). Covers packet defects (STYLE.md §5
// severity 1), ring violations (severity 2), the rx re-arm when the guest
// runs out of buffers and the interrupt decision; the weights are in
// vhost_net_weight_test.cc.
#include "pvnet/backend/vhost_net.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench

INSTANTIATE_TEST_SUITE_P(VhostNet, EventIdx, ::testing::Bool(), event_idx_name);

// ---- (f) packet defects: drop, count, return used with 0, go on ----------------

TEST(HandleTx, DropsChainsWithAWritablePart) {
    Harness h({});
    const uint32_t len = 64;
    ASSERT_EQ(h.add_tx(0, len), AddStatus::Ok);
    write_packet(h.host(Harness::slot_gpa(1)), 1, len);
    const Buf out{Harness::slot_gpa(1), len};
    const Buf in{Harness::slot_gpa(100), len};
    ASSERT_EQ(h.txd().add(std::span<const Buf>(&out, 1), std::span<const Buf>(&in, 1), 1),
              AddStatus::Ok);  // readable + writable
    ASSERT_EQ(h.add_tx(2, len), AddStatus::Ok);
    ASSERT_EQ(h.txd().add({}, std::span<const Buf>(&in, 1), 3), AddStatus::Ok);  // writable only
    ASSERT_EQ(h.add_tx(4, len), AddStatus::Ok);
    h.txd().publish();

    run_tx(h);
    EXPECT_EQ(h.stats().tx_drop_bad_chain.get(), 2u);
    EXPECT_EQ(h.port.sent_seqs, (std::vector<uint64_t>{0, 2, 4}));
    EXPECT_EQ(h.port.send_bad, 0u);
    EXPECT_FALSE(h.dev().tx_queue().broken());
    const auto used = Harness::reap(h.txd());
    ASSERT_EQ(used.size(), 5u);
    for (uint64_t i = 0; i < 5; ++i) {
        EXPECT_EQ(used[i].token, i);
        EXPECT_EQ(used[i].len, 0u);
    }
    EXPECT_FALSE(h.txd().broken());
    // The queue goes on.
    h.add_tx_burst(5, 1, len);
    run_tx(h);
    EXPECT_EQ(h.port.sent_seqs.back(), 5u);
}

TEST(HandleTx, DropsChainsShorterThanTheHeader) {
    Harness h({});
    for (const uint32_t len : {11u, 1u, kHdr, 64u, kHdr - 1}) {
        ASSERT_EQ(h.add_tx(h.txd().stats().adds.get(), len), AddStatus::Ok);
    }
    // A header split over two descriptors still counts as a header.
    const Buf two[2] = {{Harness::slot_gpa(5), 6}, {Harness::slot_gpa(5) + 6, 6}};
    ASSERT_EQ(h.txd().add(two, {}, 5), AddStatus::Ok);
    h.txd().publish();

    run_tx(h);
    EXPECT_EQ(h.stats().tx_drop_bad_chain.get(), 3u);
    EXPECT_EQ(h.port.sent_lens, (std::vector<uint32_t>{kHdr, 64, kHdr}));
    EXPECT_FALSE(h.dev().tx_queue().broken());
    const auto used = Harness::reap(h.txd());
    ASSERT_EQ(used.size(), 6u);
    for (const UsedBuf& u : used) EXPECT_EQ(u.len, 0u);
}

TEST(HandleRx, DropsChainsWithAReadablePart) {
    Harness h({});
    h.port.rx_left = 2;
    const Buf out{Harness::slot_gpa(100), 16};
    const Buf in{Harness::slot_gpa(0), Harness::kSlotBytes};
    ASSERT_EQ(h.rxd().add(std::span<const Buf>(&out, 1), std::span<const Buf>(&in, 1), 0),
              AddStatus::Ok);
    h.add_rx_burst(1, 2);

    EXPECT_EQ(run_rx(h), 3u);
    EXPECT_EQ(h.stats().rx_drop_bad_chain.get(), 1u);
    // The frame was not taken from the port for the bad chain: none is lost.
    EXPECT_EQ(h.port.recv_calls, 2u);
    EXPECT_EQ(h.port.rx_left, 0u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
    const auto used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 3u);
    EXPECT_EQ(used[0].len, 0u);
    for (uint64_t i = 1; i < 3; ++i) {
        EXPECT_EQ(used[i].len, 64u);
        EXPECT_EQ(check_packet(h.host(Harness::slot_gpa(i)), 64), std::optional<uint64_t>(i - 1));
    }
}

TEST(HandleRx, DropsFramesLargerThanTheBuffer) {
    Harness h({});
    h.port.rx_left = 3;
    h.port.rx_len = 1514;
    ASSERT_EQ(h.add_rx(0), AddStatus::Ok);
    ASSERT_EQ(h.add_rx(1, 100), AddStatus::Ok);
    ASSERT_EQ(h.add_rx(2), AddStatus::Ok);
    h.rxd().publish();

    EXPECT_EQ(run_rx(h), 3u);
    EXPECT_EQ(h.stats().rx_drop_no_room.get(), 1u);
    EXPECT_EQ(h.stats().rx_bytes.get(), 2u * 1514u);
    const auto used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 3u);
    EXPECT_EQ(used[0].len, 1514u);
    EXPECT_EQ(used[1].len, 0u);
    EXPECT_EQ(used[2].len, 1514u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
    EXPECT_FALSE(h.rxd().broken());
}

TEST(HandleRx, FillsAChainOfSeveralBuffers) {
    Harness h({});
    h.port.rx_left = 1;
    h.port.rx_len = 1514;
    // Header alone in the first buffer, the frame across two more.
    const Buf in[3] = {
        {Harness::slot_gpa(0), kHdr}, {Harness::slot_gpa(1), 1000}, {Harness::slot_gpa(2), 1000}};
    ASSERT_EQ(h.rxd().add({}, in, 0), AddStatus::Ok);
    h.rxd().publish();
    EXPECT_EQ(run_rx(h), 1u);
    const auto used = Harness::reap(h.rxd());
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0].len, 1514u);
    std::vector<std::byte> pkt;
    pkt.insert(pkt.end(), h.host(in[0].gpa), h.host(in[0].gpa) + kHdr);
    pkt.insert(pkt.end(), h.host(in[1].gpa), h.host(in[1].gpa) + 1000);
    pkt.insert(pkt.end(), h.host(in[2].gpa), h.host(in[2].gpa) + (1514 - 1000 - kHdr));
    EXPECT_EQ(check_packet(pkt.data(), 1514), std::optional<uint64_t>(0));
}

// ---- (g) ring violations break the queue --------------------------------------

TEST(HandleTx, HeadOutOfRangeBreaksTheQueueForGood) {
    Harness h({});
    const auto& a = h.tx_addrs();
    h.set_avail_slot(a, 0, h.size());  // head == size
    h.set_avail_idx(a, 1);

    run_tx(h);
    EXPECT_TRUE(h.dev().tx_queue().broken());
    EXPECT_EQ(h.dev().tx_queue().broken_reason(), RingError::HeadOutOfRange);
    EXPECT_EQ(h.dev().tx_queue().stats().errors.get(RingError::HeadOutOfRange), 1u);
    EXPECT_TRUE(h.port.sent_lens.empty());
    EXPECT_EQ(h.used_idx(a), 0);
    EXPECT_EQ(h.stats().tx_runs.get(), 1u);

    // A well-formed chain after it is not looked at: the queue needs a reset.
    write_packet(h.host(Harness::slot_gpa(0)), 0, 64);
    h.write_desc(a, 0, Harness::slot_gpa(0).value, 64, 0, 0);
    h.set_avail_slot(a, 1, 0);
    h.set_avail_idx(a, 2);
    run_tx(h);
    run_tx(h);
    EXPECT_TRUE(h.port.sent_lens.empty());
    EXPECT_EQ(h.stats().tx_runs.get(), 1u);
    EXPECT_EQ(h.dev().tx_queue().stats().pops.get(), 0u);
    EXPECT_EQ(h.used_idx(a), 0);

    // The other direction is not affected.
    h.port.rx_left = 1;
    h.add_rx_burst(0, 1);
    EXPECT_EQ(run_rx(h), 1u);
    EXPECT_FALSE(h.dev().rx_queue().broken());
}

TEST(HandleTx, BadChainAfterGoodOnesStopsTheRun) {
    Harness h({});
    h.add_tx_burst(0, 2, 64);
    const auto& a = h.tx_addrs();
    h.set_avail_slot(a, 2, 0xffff);
    h.set_avail_idx(a, 3);
    run_tx(h);
    EXPECT_EQ(h.port.sent_seqs, (std::vector<uint64_t>{0, 1}));
    EXPECT_TRUE(h.dev().tx_queue().broken());
    h.dev().handle_tx();
    EXPECT_EQ(h.port.sent_seqs.size(), 2u);
}

TEST(HandleRx, AvailIdxJumpBreaksTheQueueForGood) {
    Harness h({});
    h.port.rx_left = FakePort::kFlood;
    h.set_avail_idx(h.rx_addrs(), static_cast<uint16_t>(h.size() + 1));
    run_rx(h);
    EXPECT_TRUE(h.dev().rx_queue().broken());
    EXPECT_EQ(h.dev().rx_queue().broken_reason(), RingError::AvailIdxJump);
    EXPECT_EQ(h.port.recv_calls, 0u);
    EXPECT_EQ(h.stats().rx_runs.get(), 1u);
    run_rx(h);
    EXPECT_EQ(h.stats().rx_runs.get(), 1u);
    EXPECT_EQ(h.port.recv_calls, 0u);
}

TEST(HandleRx, NextOutOfRangeBreaksTheQueue) {
    Harness h({});
    h.port.rx_left = FakePort::kFlood;
    const auto& a = h.rx_addrs();
    h.write_desc(a, 0, Harness::slot_gpa(0).value, 2048,
                 virtio::VIRTQ_DESC_F_WRITE | virtio::VIRTQ_DESC_F_NEXT, h.size());
    h.set_avail_slot(a, 0, 0);
    h.set_avail_idx(a, 1);
    run_rx(h);
    EXPECT_TRUE(h.dev().rx_queue().broken());
    EXPECT_EQ(h.dev().rx_queue().broken_reason(), RingError::NextOutOfRange);
    EXPECT_EQ(h.port.recv_calls, 0u);
    EXPECT_EQ(h.used_idx(a), 0);
}

TEST(HandleTx, BufferOutsideGuestMemoryBreaksTheQueue) {
    Harness h({});
    const auto& a = h.tx_addrs();
    h.write_desc(a, 0, Harness::kBase + Harness::kMemBytes - 8, 64, 0, 0);  // runs past the end
    h.set_avail_slot(a, 0, 0);
    h.set_avail_idx(a, 1);
    run_tx(h);
    EXPECT_TRUE(h.dev().tx_queue().broken());
    EXPECT_EQ(h.dev().tx_queue().broken_reason(), RingError::AddrUnmapped);
    EXPECT_TRUE(h.port.sent_lens.empty());
}

// ---- (h) out of rx buffers: count, re-arm, wake on the refill kick --------------

TEST_P(EventIdx, HandleRxOutOfBuffersCountsAndRearms) {
    Harness h({.size = 256, .event_idx = GetParam()});
    h.port.rx_left = FakePort::kFlood;
    h.add_rx_burst(0, 10);

    EXPECT_EQ(run_rx(h), 10u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 1u);
    EXPECT_EQ(h.stats().rx_weight_requeue.get(), 0u);
    EXPECT_EQ(h.dev().rx_queue().last_avail_idx().value(), 10);
    expect_rearmed(h, h.rx_addrs(), 10, GetParam());

    // The guest's refill kicks: the device asked for it.
    for (uint64_t t = 10; t < 15; ++t) ASSERT_EQ(h.add_rx(t), AddStatus::Ok);
    EXPECT_TRUE(h.rxd().kick_prepare());
    EXPECT_EQ(run_rx(h), 5u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 2u);
    expect_rearmed(h, h.rx_addrs(), 15, GetParam());
    EXPECT_EQ(h.port.rx_seq, 15u);  // no frame lost while the ring was empty
}

TEST(HandleRx, EmptyPortIsNotAnEmptyRing) {
    Harness h({});
    h.port.rx_left = 5;
    h.add_rx_burst(0, 10);
    EXPECT_EQ(run_rx(h), 5u);
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 0u);
    EXPECT_EQ(h.port.recv_calls, 5u);
}

// ---- (i) the interrupt decision --------------------------------------------------

TEST(HandleTx, SignalsOncePerBurstWhenInterruptsAreOn) {
    Harness h({});
    h.add_tx_burst(0, 100, 64);
    run_tx(h);
    const uint64_t bursts = (100 + kMaxBurst - 1) / kMaxBurst;
    EXPECT_EQ(h.stats().tx_calls.get(), bursts);
    ASSERT_TRUE(h.tx_call().wait(0));
    EXPECT_EQ(h.tx_call().consume(), bursts);
    EXPECT_EQ(h.stats().rx_calls.get(), 0u);
    EXPECT_FALSE(h.rx_call().wait(0));
}

TEST(HandleTx, NoSignalWhenTheDriverDisabledInterrupts) {
    Harness h({});
    h.txd().disable_cb();
    h.add_tx_burst(0, 100, 64);
    run_tx(h);
    EXPECT_EQ(h.stats().tx_calls.get(), 0u);
    EXPECT_FALSE(h.tx_call().wait(0));
    EXPECT_EQ(h.dev().tx_queue().stats().signals_suppressed.get(),
              (100 + kMaxBurst - 1) / kMaxBurst);
    // Interrupts back on: the next burst signals.
    (void)Harness::reap(h.txd());
    ASSERT_TRUE(h.txd().enable_cb());
    h.add_tx_burst(100, 1, 64);
    run_tx(h);
    EXPECT_EQ(h.stats().tx_calls.get(), 1u);
    EXPECT_TRUE(h.tx_call().wait(0));
}

TEST(HandleTx, EventIdxSignalsOnlyWhenUsedEventIsCrossed) {
    Harness h({.event_idx = true});
    h.add_tx_burst(0, 100, 64);
    run_tx(h);
    // used_event stays 0 (nothing reaped): crossed by the first burst only.
    EXPECT_EQ(h.stats().tx_calls.get(), 1u);
    ASSERT_EQ(Harness::reap(h.txd()).size(), 100u);
    ASSERT_TRUE(h.txd().enable_cb());  // used_event = 100
    h.add_tx_burst(100, 40, 64);
    run_tx(h);  // bursts end at 132 (crosses 100) and 140 (does not)
    EXPECT_EQ(h.stats().tx_calls.get(), 2u);
    EXPECT_EQ(h.tx_call().consume(), 2u);
}

TEST(HandleRx, SignalsTheRxCall) {
    Harness h({.event_idx = true});
    h.port.rx_left = 3;
    h.add_rx_burst(0, 8);
    run_rx(h);
    EXPECT_EQ(h.stats().rx_calls.get(), 1u);
    EXPECT_TRUE(h.rx_call().wait(0));
    EXPECT_FALSE(h.tx_call().wait(0));
}

TEST(VhostNetPollMode, NeverSignalsNorRearms) {
    Harness h({.mode = RunMode::Poll});
    h.add_tx_burst(0, 100, 64);
    h.port.rx_left = FakePort::kFlood;
    h.add_rx_burst(0, 50);
    EXPECT_EQ(run_tx(h), 100u);
    EXPECT_EQ(run_rx(h), 50u);
    EXPECT_EQ(h.stats().tx_calls.get() + h.stats().rx_calls.get(), 0u);
    EXPECT_FALSE(h.tx_call().wait(0));
    EXPECT_FALSE(h.rx_call().wait(0));
    EXPECT_EQ(h.stats().rx_ring_empty.get(), 1u);
    EXPECT_EQ(h.dev().tx_queue().stats().notify_rechecks.get(), 0u);
    EXPECT_EQ(h.dev().rx_queue().stats().notify_rechecks.get(), 0u);
}

// RunMode::Poll is documented as "spin on the rings with notifications off
// (DPDK's poll mode)", but the handlers call disable_notify() only in event
// mode, so without EVENT_IDX used.flags stays 0 and the guest writes a kick
// eventfd nobody reads on every flush (seen in PVP: ~45k tx kicks in a 0.3 s
// poll-mode run without EVENT_IDX, 0 with the fix).
TEST(VhostNetPollMode, TurnsGuestKicksOff) {
    Harness h({.mode = RunMode::Poll});
    h.add_tx_burst(0, 10, 64);
    h.port.rx_left = FakePort::kFlood;
    h.add_rx_burst(0, 10);
    run_tx(h);
    run_rx(h);
    EXPECT_EQ(h.used_flags(h.tx_addrs()), virtio::VIRTQ_USED_F_NO_NOTIFY);
    EXPECT_EQ(h.used_flags(h.rx_addrs()), virtio::VIRTQ_USED_F_NO_NOTIFY);
    ASSERT_EQ(h.add_tx(10, 64), AddStatus::Ok);
    EXPECT_FALSE(h.txd().kick_prepare());
    ASSERT_EQ(h.add_rx(10), AddStatus::Ok);
    EXPECT_FALSE(h.rxd().kick_prepare());
    // And they stay off across runs that find the rings empty.
    run_tx(h);
    run_rx(h);
    EXPECT_EQ(h.used_flags(h.tx_addrs()), virtio::VIRTQ_USED_F_NO_NOTIFY);
    EXPECT_EQ(h.used_flags(h.rx_addrs()), virtio::VIRTQ_USED_F_NO_NOTIFY);
}

// ---- pending_work(): what the handlers queued for themselves --------------------

// pending_work() is documented as the work the handlers queued for
// themselves, but VhostNet initialises pending_ to kTxWork | kRxWork (the
// worker's own start state) and the handlers never clear their bit, so a
// device that never requeued reports both and the kTxWork checks above
// cannot tell a requeue from no requeue.
TEST(VhostNetPendingWork, ShowsOnlyRequeuedWork) {
    Harness h({.tx_weight = {4, 0}});
    EXPECT_EQ(h.dev().pending_work(), 0u) << "a fresh device has queued nothing";
    h.add_tx_burst(0, 2, 64);
    run_tx(h);  // ring emptied: no requeue
    EXPECT_EQ(h.dev().pending_work() & Dev::kTxWork, 0u);
    h.add_tx_burst(2, 8, 64);
    run_tx(h);  // weight 4 reached: requeued
    EXPECT_NE(h.dev().pending_work() & Dev::kTxWork, 0u);
    run_tx(h);  // the last 4: the weight again, requeued
    run_tx(h);  // nothing left: this run consumed the requeue and made none
    EXPECT_EQ(h.dev().pending_work() & Dev::kTxWork, 0u);
}

}  // namespace
}  // namespace pvnet::backend
