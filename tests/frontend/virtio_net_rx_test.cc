// VirtioNet's receive side against a SplitDeviceQueue playing the device:
// rx refill and its kick decision (EVENT_IDX and flags), the NAPI rx poll
// (bytes, lengths, budget, packet defects), the interrupt re-arm, and a
// hostile device breaking the rx ring one rule at a time (STYLE.md §5, §6
// "The frontend checks used entries the same way"). Decided by counters and
// bytes; every wait is bounded; nothing asserts on time.
#include <gtest/gtest.h>

#include "virtio_net_fixture.h"

namespace pvnet::frontend::fixture {
namespace {

// ---- try_fill_recv --------------------------------------------------------------

class TryFillRecv : public ::testing::TestWithParam<bool> {};

TEST_P(TryFillRecv, PostsEveryBufferUpToRingSizeAndKicksOnce) {
    Env env(config(1, 128, 128, GetParam()));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    EXPECT_EQ(qp.try_fill_recv(), 128u);
    EXPECT_EQ(qp.rx_queue().num_free(), 0u);
    EXPECT_EQ(qp.free_bufs(), total - 128u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 1u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 1u);
    // Full ring: nothing to add, no kick.
    EXPECT_EQ(qp.try_fill_recv(), 0u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 0u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 1u);
    EXPECT_EQ(env.bells().tx_kick.consume(), 0u);

    // The device sees exactly the pool's buffers, each whole and writable.
    const std::vector<Popped> got = env.pop_rx(0, 1000);
    ASSERT_EQ(got.size(), 128u);
    std::set<const std::byte*> hosts;
    std::set<const std::byte*> pool;
    for (uint32_t id = 0; id < total; ++id) pool.insert(qp.buf_host(id));
    for (const Popped& p : got) {
        EXPECT_EQ(p.room, qp.buf_bytes());
        EXPECT_TRUE(pool.count(p.host)) << "not a pool buffer";
        hosts.insert(p.host);
    }
    EXPECT_EQ(hosts.size(), 128u) << "a buffer posted twice";
}

TEST_P(TryFillRecv, KicksOnlyWhenTheDeviceAsks) {
    const bool event_idx = GetParam();
    Env env(config(1, 64, 64, event_idx));
    env.start();
    QueuePair& qp = env.qp();
    Device& dev = env.dev();
    ASSERT_EQ(qp.try_fill_recv(), 64u);
    ASSERT_EQ(env.bells().rx_kick.consume(), 1u);

    auto cycle = [&] {
        const std::vector<Popped> got = env.pop_rx(0, 64);
        ASSERT_EQ(got.size(), 64u);
        for (const Popped& p : got) env.fill_rx(0, p, 0, 64);
        dev.rx->flush_used();
        Recorder rec;
        ASSERT_EQ(qp.poll_rx(64, rec), 64u);
    };

    // The device is polling (no kicks wanted): with EVENT_IDX avail_event
    // stays at 0, behind the new buffers; without, NO_NOTIFY is set.
    dev.rx->disable_notify();
    cycle();
    EXPECT_EQ(qp.try_fill_recv(), 64u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 0u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 1u);
    EXPECT_EQ(qp.rx_queue().stats().kicks_suppressed.get(), 1u);

    // The device goes to sleep: re-armed at its position, so the refill kicks.
    cycle();
    EXPECT_FALSE(dev.rx->enable_notify()) << "nothing new was posted yet";
    EXPECT_EQ(qp.try_fill_recv(), 64u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 1u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 2u);
}

TEST_P(TryFillRecv, StopsAndCountsWhenThePoolRunsDry) {
    VirtioNetConfig c = config(1, 64, 64, GetParam());
    c.n_bufs = 40;
    Env env(c);
    env.start();
    QueuePair& qp = env.qp();
    EXPECT_EQ(qp.try_fill_recv(), 40u);
    EXPECT_EQ(qp.free_bufs(), 0u);
    EXPECT_EQ(qp.stats().refill_empty_pool.get(), 1u);
    EXPECT_EQ(qp.rx_queue().num_free(), 24u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 1u);
    uint32_t id = 0;
    EXPECT_FALSE(qp.alloc_buf(id));
}

INSTANTIATE_TEST_SUITE_P(EventIdx, TryFillRecv, ::testing::Bool());

// ---- poll_rx ------------------------------------------------------------------------

TEST(PollRx, DeliversExactlyTheDevicesBytesWithinTheBudget) {
    Env env(config(1, 128, 128));
    env.start();
    QueuePair& qp = env.qp();
    ASSERT_EQ(qp.try_fill_recv(), 128u);
    const uint32_t free_after_fill = qp.free_bufs();

    const std::vector<Popped> got = env.pop_rx(0, 100);
    ASSERT_EQ(got.size(), 100u);
    std::vector<uint32_t> lens;
    uint64_t total_bytes = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
        const uint32_t len = kHdr + 1 + static_cast<uint32_t>((k * 397u) % 2035u);
        ASSERT_LE(len, qp.buf_bytes());
        lens.push_back(len);
        total_bytes += len;
        env.fill_rx(0, got[k], k, len);
    }
    env.dev().rx->flush_used();

    Recorder rec;
    EXPECT_EQ(qp.poll_rx(kNapiBudget, rec), 64u);
    EXPECT_EQ(rec.seen.size(), 64u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(qp.poll_rx(kNapiBudget, rec), 36u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(qp.poll_rx(kNapiBudget, rec), 0u);
    EXPECT_EQ(qp.stats().napi_polls.get(), 3u);

    ASSERT_EQ(rec.seen.size(), 100u);
    std::set<uint32_t> ids;
    for (std::size_t k = 0; k < rec.seen.size(); ++k) {
        const Recorder::Seen& s = rec.seen[k];
        EXPECT_EQ(s.len, lens[k]) << k;
        EXPECT_EQ(s.frame, got[k].host) << "buffer id maps to the chain's memory, " << k;
        EXPECT_EQ(s.frame, qp.buf_host(s.id)) << k;
        EXPECT_TRUE(packet_ok(s.frame, k, s.len)) << k;
        ids.insert(s.id);
    }
    EXPECT_EQ(ids.size(), 100u);
    EXPECT_EQ(qp.stats().rx_pkts.get(), 100u);
    EXPECT_EQ(qp.stats().rx_bytes.get(), total_bytes);
    EXPECT_EQ(qp.stats().rx_drop_bad_len.get(), 0u);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 100u) << "deliver said no: buffers freed";
    EXPECT_EQ(qp.rx_queue().num_free(), 100u);
}

TEST(PollRx, ExactlyBudgetPendingCountsExhausted) {
    Env env(config(1, 128, 128));
    env.start();
    QueuePair& qp = env.qp();
    qp.try_fill_recv();
    for (const Popped& p : env.pop_rx(0, 64)) env.fill_rx(0, p, 0, 60);
    env.dev().rx->flush_used();
    Recorder rec;
    EXPECT_EQ(qp.poll_rx(64, rec), 64u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(qp.poll_rx(64, rec), 0u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
}

TEST(PollRx, KeptBuffersStayOutOfThePoolUntilFreed) {
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    qp.try_fill_recv();
    const uint32_t free_after_fill = qp.free_bufs();
    const std::vector<Popped> got = env.pop_rx(0, 10);
    for (std::size_t k = 0; k < got.size(); ++k) env.fill_rx(0, got[k], k, 100);
    env.dev().rx->flush_used();
    std::vector<uint32_t> kept;
    uint32_t calls = 0;
    auto deliver = [&](uint32_t id, const std::byte*, uint32_t) {
        const bool keep = (calls++ % 2) == 0;
        if (keep) kept.push_back(id);
        return keep;
    };
    EXPECT_EQ(qp.poll_rx(64, deliver), 10u);
    EXPECT_EQ(kept.size(), 5u);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 5u);
    for (uint32_t id : kept) qp.free_buf(id);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 10u);
}

TEST(PollRx, UsedLenUpToHeaderSizeIsDroppedAndCounted) {
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    qp.try_fill_recv();
    const uint32_t free_after_fill = qp.free_bufs();
    const std::vector<Popped> got = env.pop_rx(0, 4);
    ASSERT_EQ(got.size(), 4u);
    const uint32_t lens[] = {0, 1, kHdr, kHdr + 1};
    for (std::size_t k = 0; k < 4; ++k) env.fill_rx(0, got[k], k, lens[k]);
    env.dev().rx->flush_used();
    Recorder rec;
    EXPECT_EQ(qp.poll_rx(64, rec), 4u);
    ASSERT_EQ(rec.seen.size(), 1u);
    EXPECT_EQ(rec.seen[0].len, kHdr + 1);
    EXPECT_EQ(rec.seen[0].frame, got[3].host);
    EXPECT_EQ(qp.stats().rx_drop_bad_len.get(), 3u);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 4u) << "dropped buffers go back to the pool";
    EXPECT_FALSE(qp.rx_queue().broken()) << "a packet defect, not a ring violation";
}

TEST(PollRx, RefillAndPollAcrossIndexWrapAround) {
    // 1030 rounds of 64: avail.idx and used.idx wrap past 65535.
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    constexpr uint32_t kRounds = 1030;
    for (uint32_t round = 0; round < kRounds; ++round) {
        qp.try_fill_recv();
        const std::vector<Popped> got = env.pop_rx(0, 64);
        ASSERT_EQ(got.size(), 64u);
        for (std::size_t k = 0; k < got.size(); ++k) env.fill_rx(0, got[k], k + round, 200);
        env.dev().rx->flush_used();
        Recorder rec;
        ASSERT_EQ(qp.poll_rx(64, rec), 64u);
        for (std::size_t k = 0; k < rec.seen.size(); ++k) {
            ASSERT_EQ(rec.seen[k].len, 200u);
            ASSERT_TRUE(packet_ok(rec.seen[k].frame, k + round, 200)) << round;
        }
        ASSERT_EQ(qp.free_bufs(), total);
    }
    EXPECT_EQ(qp.stats().rx_pkts.get(), uint64_t{kRounds} * 64u);
    EXPECT_FALSE(qp.rx_queue().broken());
}

// ---- a hostile device on the rx ring -----------------------------------------------

class HostileRxDevice : public ::testing::Test {
protected:
    void SetUp() override {
        env_.start();
        ASSERT_EQ(env_.qp().try_fill_recv(), 64u);
    }
    /// After the device broke the ring: the guest stops touching it.
    void expect_broken(RingError why) {
        QueuePair& qp = env_.qp();
        Recorder rec;
        EXPECT_EQ(qp.poll_rx(64, rec), 0u);
        EXPECT_TRUE(rec.seen.empty());
        EXPECT_TRUE(qp.rx_queue().broken());
        EXPECT_EQ(qp.rx_queue().broken_reason(), why);
        EXPECT_EQ(qp.rx_queue().stats().errors.get(why), 1u);
        // And stays stopped, even when the device then behaves.
        const std::vector<Popped> got = env_.pop_rx(0, 1);
        if (!got.empty()) {
            env_.fill_rx(0, got[0], 0, 100);
            env_.dev().rx->flush_used();
        }
        EXPECT_EQ(qp.poll_rx(64, rec), 0u);
        EXPECT_TRUE(rec.seen.empty());
        EXPECT_EQ(qp.try_fill_recv(), 0u);
        EXPECT_TRUE(qp.napi_complete()) << "broken: sleep rather than spin";
    }
    Env env_{config(1, 64, 64)};
};

TEST_F(HostileRxDevice, UsedIdOutOfRangeBreaksTheQueue) {
    env_.raw_rx_used(0, 1, 64 + 5, 100);
    expect_broken(RingError::UsedIdOutOfRange);
}

TEST_F(HostileRxDevice, HugeUsedIdBreaksTheQueue) {
    env_.raw_rx_used(0, 1, 0xffffffffu, 100);
    expect_broken(RingError::UsedIdOutOfRange);
}

TEST_F(HostileRxDevice, UsedIdNotInFlightBreaksTheQueue) {
    // One honest round trip, then the device returns the same head again.
    const std::vector<Popped> got = env_.pop_rx(0, 1);
    ASSERT_EQ(got.size(), 1u);
    env_.fill_rx(0, got[0], 0, 100);
    env_.dev().rx->flush_used();
    Recorder rec;
    ASSERT_EQ(env_.qp().poll_rx(64, rec), 1u);
    env_.raw_rx_used(0, 2, got[0].head, 100);
    expect_broken(RingError::UsedIdNotInflight);
}

TEST_F(HostileRxDevice, UsedLenAboveThePostedBufferBreaksTheQueue) {
    const std::vector<Popped> got = env_.pop_rx(0, 1);
    ASSERT_EQ(got.size(), 1u);
    env_.raw_rx_used(0, 1, got[0].head, env_.qp().buf_bytes() + 1);
    expect_broken(RingError::UsedLenTooLong);
}

TEST_F(HostileRxDevice, UsedIdxPastWhatIsInFlightBreaksTheQueue) {
    env_.raw_rx_used(0, 65, 0, 100);
    expect_broken(RingError::UsedIdxJump);
}

// ---- napi_complete / wait_rx ----------------------------------------------------------

class NapiComplete : public ::testing::TestWithParam<bool> {};

TEST_P(NapiComplete, FalseWhileUsedEntriesArePendingTrueOtherwise) {
    Env env(config(1, 64, 64, GetParam()));
    env.start();
    QueuePair& qp = env.qp();
    Device& dev = env.dev();
    qp.try_fill_recv();
    EXPECT_TRUE(qp.napi_complete()) << "nothing used yet";

    std::vector<Popped> got = env.pop_rx(0, 64);
    ASSERT_EQ(got.size(), 64u);
    for (std::size_t k = 0; k < 5; ++k) env.fill_rx(0, got[k], k, 80);
    dev.rx->flush_used();
    EXPECT_TRUE(dev.rx->should_signal());
    EXPECT_FALSE(qp.napi_complete()) << "5 used entries pending";
    EXPECT_FALSE(qp.napi_complete()) << "still pending";

    Recorder rec;
    EXPECT_EQ(qp.poll_rx(64, rec), 5u);
    // Polling: the device must not interrupt.
    env.fill_rx(0, got[5], 5, 80);
    dev.rx->flush_used();
    EXPECT_FALSE(dev.rx->should_signal());
    // Arrived between the poll and the re-arm: poll again instead of sleeping.
    EXPECT_FALSE(qp.napi_complete());
    EXPECT_EQ(qp.poll_rx(64, rec), 1u);
    EXPECT_TRUE(qp.napi_complete());
    EXPECT_TRUE(qp.napi_complete());

    // Re-armed: the next used entry interrupts.
    env.fill_rx(0, got[6], 6, 80);
    dev.rx->flush_used();
    EXPECT_TRUE(dev.rx->should_signal());
    EXPECT_FALSE(qp.napi_complete());
}

TEST_P(NapiComplete, WaitRxWakesOnTheCallFdAndTimesOutWithout) {
    Env env(config(1, 64, 64, GetParam()));
    env.start();
    QueuePair& qp = env.qp();
    qp.wait_rx(1000);
    EXPECT_EQ(qp.stats().wait_timeouts.get(), 1u);
    EXPECT_EQ(qp.stats().rx_interrupts.get(), 0u);
    env.bells().rx_call.signal();
    env.bells().rx_call.signal();
    qp.wait_rx(kBoundUs);
    EXPECT_EQ(qp.stats().rx_interrupts.get(), 1u);
    EXPECT_EQ(env.bells().rx_call.consume(), 0u) << "wait_rx consumed the merged count";
    EXPECT_EQ(env.bells().tx_call.consume(), 0u);
}

INSTANTIATE_TEST_SUITE_P(EventIdx, NapiComplete, ::testing::Bool());

}  // namespace
}  // namespace pvnet::frontend::fixture
