// Coalescer: the frame threshold is exact, the timer path signals pending
// entries once its fd is readable, either limit 0 means "signal at once",
// a signal disarms the timer (clearing an unread expiration), and set()
// flushes what was pending. Decided by return values and counters; the only
// waits are bounded polls on the timer fd (STYLE.md §11).
#include "pvnet/notify/coalescer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <tuple>

namespace pvnet::notify {
namespace {

using Action = CoalesceAction;

/// Long enough for any scheduler; only reached if the code under test is broken.
constexpr int kBoundMs = 5000;
/// A time limit no test run reaches: only the frame count can signal.
constexpr uint32_t kNeverUs = 60'000'000;

std::unique_ptr<Coalescer> must_create(CoalesceParams p) {
    auto r = Coalescer::create(p);
    EXPECT_TRUE(r.has_value());
    if (!r) std::abort();
    return std::move(r.value());
}

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST(Coalescer, TimerFdIsNonBlockingCloexecAndIdle) {
    auto c = must_create({});
    ASSERT_GE(c->timer_fd(), 0);
    EXPECT_NE(fcntl(c->timer_fd(), F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(fcntl(c->timer_fd(), F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_FALSE(readable(c->timer_fd(), 0));
    EXPECT_EQ(c->on_timer(), Action::Defer) << "nothing expired: a spurious wakeup";
    EXPECT_EQ(c->stats().timer_fires.get(), 0u);
}

TEST(Coalescer, ZeroZeroSignalsEveryBatch) {
    auto c = must_create({0, 0});
    for (uint32_t n : {1u, 5u, 32u, 1u, 256u}) EXPECT_EQ(c->on_used(n), Action::Signal);
    EXPECT_EQ(c->on_used(0), Action::Defer) << "nothing published, nothing to signal";
    EXPECT_EQ(c->stats().signals_immediate.get(), 5u);
    EXPECT_EQ(c->stats().signals_frames.get() + c->stats().deferred.get(), 0u);
    EXPECT_EQ(c->stats().timer_arms.get(), 0u) << "no syscall when coalescing is off";
    EXPECT_EQ(c->pending(), 0u);
}

TEST(Coalescer, EitherLimitZeroSignalsEveryBatch) {
    // VIRTIO "Notifications Coalescing": max_usecs = 0 or max_packets = 0
    // means a notification after every packet; no entry waits on a timer
    // that was never set.
    for (const CoalesceParams p : {CoalesceParams{8, 0}, CoalesceParams{0, 100}}) {
        auto c = must_create(p);
        for (int i = 0; i < 20; ++i) EXPECT_EQ(c->on_used(1), Action::Signal);
        EXPECT_EQ(c->stats().signals_immediate.get(), 20u);
        EXPECT_EQ(c->stats().timer_arms.get(), 0u);
    }
}

class FramesThreshold : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};
INSTANTIATE_TEST_SUITE_P(Coalescer, FramesThreshold,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 7u, 64u),
                                            ::testing::Values(0u, 1u, 63u, 64u, 1000u)));

TEST_P(FramesThreshold, BatchesOfOneSignalExactlyFloorMOverN) {
    const auto [n, m] = GetParam();
    auto c = must_create({n, kNeverUs});
    uint32_t signals = 0;
    for (uint32_t i = 0; i < m; ++i) {
        const Action a = c->on_used(1);
        // Exactly every n-th entry: the count restarts at each signal.
        EXPECT_EQ(a == Action::Signal, (i + 1) % n == 0) << "entry " << i;
        signals += a == Action::Signal ? 1u : 0u;
    }
    EXPECT_EQ(signals, m / n);
    EXPECT_EQ(c->stats().signals_frames.get(), m / n);
    EXPECT_EQ(c->stats().deferred.get(), m - m / n);
    EXPECT_EQ(c->stats().signals_timer.get() + c->stats().signals_immediate.get(), 0u);
    EXPECT_EQ(c->pending(), m % n);
    // One arm per pending batch, not per entry (none when n == 1: each
    // entry signals before it could wait).
    const uint32_t batches = n == 1 ? 0 : (m + n - 1) / n;
    EXPECT_EQ(c->stats().timer_arms.get(), batches);
    EXPECT_EQ(c->deadline_ns() != 0, m % n != 0) << "armed iff entries are pending";
}

TEST(Coalescer, LargeBatchSignalsAtOnceAndCarriesNoRemainder) {
    auto c = must_create({4, kNeverUs});
    EXPECT_EQ(c->on_used(3), Action::Defer);
    EXPECT_EQ(c->on_used(6), Action::Signal);  // 9 pending >= 4
    EXPECT_EQ(c->pending(), 0u) << "the interrupt covers all 9";
    EXPECT_EQ(c->on_used(3), Action::Defer);
    EXPECT_EQ(c->on_used(1), Action::Signal);
    EXPECT_EQ(c->stats().signals_frames.get(), 2u);
    EXPECT_EQ(c->stats().deferred.get(), 2u);
}

TEST(Coalescer, TimerSignalsEntriesBelowTheFrameLimit) {
    auto c = must_create({64, 200});
    EXPECT_EQ(c->on_used(3), Action::Defer);
    EXPECT_EQ(c->on_used(2), Action::Defer);
    EXPECT_EQ(c->stats().timer_arms.get(), 1u) << "armed by the first entry only";
    EXPECT_NE(c->deadline_ns(), 0u);
    ASSERT_TRUE(readable(c->timer_fd(), kBoundMs));
    EXPECT_EQ(c->on_timer(), Action::Signal);
    EXPECT_EQ(c->stats().timer_fires.get(), 1u);
    EXPECT_EQ(c->stats().signals_timer.get(), 1u);
    EXPECT_EQ(c->pending(), 0u);
    EXPECT_EQ(c->deadline_ns(), 0u);
    EXPECT_FALSE(readable(c->timer_fd(), 0)) << "on_timer consumed the expiration";
    EXPECT_EQ(c->on_timer(), Action::Defer);
    EXPECT_EQ(c->stats().timer_fires.get(), 1u);

    // The next batch arms again and the timer signals it too.
    EXPECT_EQ(c->on_used(1), Action::Defer);
    EXPECT_EQ(c->stats().timer_arms.get(), 2u);
    ASSERT_TRUE(readable(c->timer_fd(), kBoundMs));
    EXPECT_EQ(c->on_timer(), Action::Signal);
    EXPECT_EQ(c->stats().signals_timer.get(), 2u);
    EXPECT_EQ(c->stats().signals_frames.get(), 0u);
}

TEST(Coalescer, FrameSignalDisarmsTheTimerEvenIfItAlreadyExpired) {
    // 1 µs, and we wait (bounded) until its fd says it expired; the signal
    // by frames must still leave nothing for on_timer (no spurious interrupt,
    // no timer fire counted for a batch that was already signalled).
    auto c = must_create({2, 1});
    EXPECT_EQ(c->on_used(1), Action::Defer);
    ASSERT_TRUE(readable(c->timer_fd(), kBoundMs));
    EXPECT_EQ(c->on_used(1), Action::Signal);
    EXPECT_EQ(c->deadline_ns(), 0u);
    EXPECT_FALSE(readable(c->timer_fd(), 0));
    EXPECT_EQ(c->on_timer(), Action::Defer);
    EXPECT_EQ(c->stats().timer_fires.get(), 0u);
    EXPECT_EQ(c->stats().signals_frames.get(), 1u);
}

TEST(Coalescer, SetAtRuntimeAppliesAndFlushesPending) {
    auto c = must_create({0, 0});
    EXPECT_EQ(c->on_used(1), Action::Signal);

    EXPECT_EQ(c->set({4, kNeverUs}), Action::Defer) << "nothing pending";
    EXPECT_EQ(c->params(), (CoalesceParams{4, kNeverUs}));
    EXPECT_EQ(c->on_used(1), Action::Defer);
    EXPECT_EQ(c->on_used(1), Action::Defer);
    EXPECT_EQ(c->on_used(2), Action::Signal);

    EXPECT_EQ(c->on_used(2), Action::Defer);
    EXPECT_NE(c->deadline_ns(), 0u);
    // New limits: the two entries held under the old ones are signalled now.
    EXPECT_EQ(c->set({8, kNeverUs}), Action::Signal);
    EXPECT_EQ(c->pending(), 0u);
    EXPECT_EQ(c->deadline_ns(), 0u);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(c->on_used(1), Action::Defer);
    EXPECT_EQ(c->on_used(1), Action::Signal);

    EXPECT_EQ(c->on_used(1), Action::Defer);
    EXPECT_EQ(c->set({0, 0}), Action::Signal);
    EXPECT_EQ(c->on_used(1), Action::Signal);
    EXPECT_EQ(c->stats().signals_immediate.get(), 4u);  // 0/0 twice, two flushes
    EXPECT_EQ(c->stats().signals_frames.get(), 2u);
    EXPECT_FALSE(readable(c->timer_fd(), 0));
}

}  // namespace
}  // namespace pvnet::notify
