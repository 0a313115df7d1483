// VhostNet's interrupt coalescing and busy polling (seed 000; issue 4).
// Handlers called directly show the counts exactly: with N frames per
// interrupt the call eventfd is written at most M/N times plus the timer
// fires, 0/0 signals every burst as before, EVENT_IDX still suppresses what
// the coalescer lets through (counted apart). With the worker running:
// set_coalesce() from another thread, the timer in the worker's epoll, and
// busy polling that finds work published without a kick. Decided by
// counters; every wait is bounded (STYLE.md §11) and no test asserts on time.
#include <gtest/gtest.h>
#include <poll.h>

#include <cstdint>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/notify/coalescer.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench
using notify::CoalesceParams;

/// A time limit no test run reaches: only the frame count can signal.
constexpr uint32_t kNeverUs = 60'000'000;

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

/// Runs handle_tx until the tx ring is drained (weights requeue it).
void drain_tx(Harness& h) {
    do {
        h.dev().handle_tx();
    } while (h.dev().pending_work() & Dev::kTxWork);
}

/// Bursts of kMaxBurst a drain of `m` packets publishes.
uint64_t bursts(uint64_t m) { return (m + kMaxBurst - 1) / kMaxBurst; }

// ---- handlers called directly ----------------------------------------------------

TEST(Coalesce, ZeroZeroSignalsEveryBurstAsBefore) {
    Harness h({.size = 1024});
    h.add_tx_burst(0, 1000, 64);
    drain_tx(h);
    EXPECT_EQ(h.stats().tx_calls.get(), bursts(1000));
    EXPECT_EQ(h.tx_call().consume(), bursts(1000));
    EXPECT_EQ(h.stats().tx_signals_coalesced.get(), 0u);
    EXPECT_EQ(h.stats().tx_signals_suppressed_event_idx.get(), 0u);
    EXPECT_EQ(h.dev().tx_coalescer().stats().signals_immediate.get(), bursts(1000));
    EXPECT_EQ(h.dev().tx_coalescer().stats().timer_arms.get(), 0u) << "no timer syscall at 0/0";
}

class TxFrames : public ::testing::TestWithParam<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(Coalesce, TxFrames, ::testing::Values(1u, 32u, 50u, 64u, 96u, 256u));

TEST_P(TxFrames, AtMostOneSignalPerNFramesPlusTimerFires) {
    const uint32_t n = GetParam();
    constexpr uint32_t m = 1000;
    Harness h({.size = 1024, .tx_coalesce = {n, 500}});
    h.add_tx_burst(0, m, 64);
    drain_tx(h);
    // No timer handled yet: only the frame count signalled.
    const uint64_t by_frames = h.stats().tx_calls.get();
    EXPECT_LE(by_frames, m / n);
    if (n % kMaxBurst == 0) {
        EXPECT_EQ(by_frames, m / n) << "bursts end on multiples of N: exact";
    } else if (n < kMaxBurst) {
        EXPECT_EQ(by_frames, bursts(m)) << "one decision per burst at most";
    }
    EXPECT_EQ(h.stats().tx_signals_coalesced.get() + by_frames, bursts(m));
    EXPECT_EQ(h.stats().tx_signals_suppressed_event_idx.get(), 0u);

    // The rest waits for the timer; once it fires, all is signalled.
    const uint32_t left = h.dev().tx_coalescer().pending();
    if (left != 0) {
        ASSERT_TRUE(readable(h.dev().tx_coalescer().timer_fd(), 5000));
        h.dev().handle_tx_timer();
    }
    const uint64_t fires = h.stats().tx_coalesce_timer_fires.get();
    EXPECT_EQ(fires, left != 0 ? 1u : 0u);
    EXPECT_EQ(h.dev().tx_coalescer().pending(), 0u);
    EXPECT_EQ(h.stats().tx_calls.get(), by_frames + fires);
    EXPECT_LE(h.stats().tx_calls.get(), m / n + fires);
    EXPECT_EQ(h.tx_call().consume(), h.stats().tx_calls.get()) << "one eventfd write per call";
    ASSERT_EQ(Harness::reap(h.txd()).size(), m);
}

TEST(Coalesce, TimerSignalsAShortBatch) {
    Harness h({.tx_coalesce = {64, 200}});
    h.add_tx_burst(0, 40, 64);
    drain_tx(h);
    EXPECT_EQ(h.stats().tx_calls.get(), 0u);
    EXPECT_EQ(h.stats().tx_signals_coalesced.get(), 2u);  // bursts of 32 and 8
    EXPECT_FALSE(h.tx_call().wait(0));
    ASSERT_TRUE(readable(h.dev().tx_coalescer().timer_fd(), 5000));
    h.dev().handle_tx_timer();
    EXPECT_EQ(h.stats().tx_coalesce_timer_fires.get(), 1u);
    EXPECT_EQ(h.stats().tx_calls.get(), 1u);
    EXPECT_EQ(h.tx_call().consume(), 1u);
    // A spurious wakeup (nothing expired) signals nothing.
    h.dev().handle_tx_timer();
    EXPECT_EQ(h.stats().tx_calls.get(), 1u);
}

TEST(Coalesce, EventIdxStillDecidesAfterTheCoalescer) {
    Harness h({.size = 1024, .event_idx = true, .tx_coalesce = {64, 200}});
    h.add_tx_burst(0, 256, 64);
    drain_tx(h);
    // The coalescer let 4 decisions through; used_event stays 0 (nothing
    // reaped), so only the first crosses it.
    EXPECT_EQ(h.stats().tx_signals_coalesced.get(), 4u);
    EXPECT_EQ(h.stats().tx_calls.get(), 1u);
    EXPECT_EQ(h.stats().tx_signals_suppressed_event_idx.get(), 3u);
    EXPECT_EQ(h.dev().tx_queue().stats().signals_suppressed.get(), 3u);

    // Deferred entries are inside the next decision's interval: 40 entries
    // after used_event = 256, both bursts deferred, the timer's decision
    // crosses used_event.
    ASSERT_EQ(Harness::reap(h.txd()).size(), 256u);
    ASSERT_TRUE(h.txd().enable_cb());
    h.add_tx_burst(256, 40, 64);
    drain_tx(h);
    EXPECT_EQ(h.stats().tx_calls.get(), 1u);
    ASSERT_TRUE(readable(h.dev().tx_coalescer().timer_fd(), 5000));
    h.dev().handle_tx_timer();
    EXPECT_EQ(h.stats().tx_calls.get(), 2u);
    EXPECT_EQ(h.stats().tx_signals_suppressed_event_idx.get(), 3u);
}

TEST(Coalesce, DriverInterruptsOffCountAsSuppressedNotCoalesced) {
    Harness h({.tx_coalesce = {64, kNeverUs}});
    h.txd().disable_cb();
    h.add_tx_burst(0, 128, 64);
    drain_tx(h);
    EXPECT_EQ(h.stats().tx_calls.get(), 0u);
    EXPECT_EQ(h.stats().tx_signals_coalesced.get(), 2u);
    EXPECT_EQ(h.stats().tx_signals_suppressed_event_idx.get(), 2u);
    EXPECT_FALSE(h.tx_call().wait(0));
}

TEST(Coalesce, RxFramesApplyToRxInterruptsOnly) {
    // rx coalesced by rx-frames, tx left at 0/0.
    Harness r({.rx_coalesce = {64, kNeverUs}});
    r.port.rx_left = 128;
    r.add_rx_burst(0, 128);
    r.dev().handle_rx();
    EXPECT_EQ(r.stats().rx_pkts.get(), 128u);
    EXPECT_EQ(r.stats().rx_calls.get(), 2u);
    EXPECT_EQ(r.stats().rx_signals_coalesced.get(), 2u);
    EXPECT_EQ(r.rx_call().consume(), 2u);
    r.add_tx_burst(0, 64, 64);
    drain_tx(r);
    EXPECT_EQ(r.stats().tx_calls.get(), 2u) << "tx at 0/0: every burst";
    EXPECT_EQ(r.stats().tx_signals_coalesced.get(), 0u);
}

TEST(Coalesce, PollModeNeverSignalsNorArmsTimers) {
    Harness h({.mode = RunMode::Poll, .rx_coalesce = {64, 100}, .tx_coalesce = {64, 100}});
    h.add_tx_burst(0, 40, 64);
    h.port.rx_left = 10;
    h.add_rx_burst(0, 10);
    drain_tx(h);
    h.dev().handle_rx();
    EXPECT_EQ(h.stats().tx_calls.get() + h.stats().rx_calls.get(), 0u);
    EXPECT_EQ(h.stats().tx_signals_coalesced.get() + h.stats().rx_signals_coalesced.get(), 0u);
    EXPECT_EQ(h.dev().tx_coalescer().stats().timer_arms.get(), 0u);
    EXPECT_EQ(h.dev().rx_coalescer().stats().timer_arms.get(), 0u);
}

// ---- with the worker thread ----------------------------------------------------------

/// Stops the worker even when an assertion returns early.
struct Running {
    explicit Running(Harness& h) : h_(h) { h_.dev().start(); }
    ~Running() { h_.dev().stop(); }
    Harness& h_;
};

TEST(CoalesceWorker, SetCoalesceFromAnotherThreadTakesEffect) {
    Harness h({.size = 1024});
    Running run(h);
    const VhostNetStats& s = h.stats();
    const DeviceStats& ds = h.dev().device_stats();
    h.add_tx_burst(0, 64, 64);
    h.tx_kick().signal();
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == 64; }));
    EXPECT_EQ(s.tx_calls.get(), 2u) << "0/0: one interrupt per burst";

    h.dev().set_coalesce({}, {64, kNeverUs});  // from this thread, not the worker
    ASSERT_TRUE(wait_until([&] { return ds.coalesce_updates.get() == 1; }));
    h.add_tx_burst(64, 128, 64);
    h.tx_kick().signal();
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == 192; }));
    EXPECT_EQ(s.tx_calls.get(), 4u) << "64 frames per interrupt: 2 more, not 4";
    EXPECT_EQ(s.tx_signals_coalesced.get(), 2u);

    // 32 held back; switching coalescing off signals them.
    h.add_tx_burst(192, 32, 64);
    h.tx_kick().signal();
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == 224; }));
    EXPECT_EQ(s.tx_calls.get(), 4u);
    h.dev().set_coalesce({}, {});
    ASSERT_TRUE(wait_until([&] { return s.tx_calls.get() == 5; }));
    EXPECT_EQ(ds.coalesce_updates.get(), 2u);
}

TEST(CoalesceWorker, TimerInTheWorkersEpollSignalsTheRest) {
    constexpr uint32_t m = 1000, n = 64;
    Harness h({.size = 1024, .tx_coalesce = {n, 1000}});
    Running run(h);
    const VhostNetStats& s = h.stats();
    h.add_tx_burst(0, m, 64);
    h.tx_kick().signal();
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == m; }));
    // 1000 is not a multiple of 64: the last entries wait for the timer.
    ASSERT_TRUE(wait_until([&] { return s.tx_coalesce_timer_fires.get() >= 1; }));
    ASSERT_TRUE(wait_until([&] { return h.tx_call().wait(0); }));
    const uint64_t calls = s.tx_calls.get();
    EXPECT_GE(calls, 1u);
    EXPECT_LE(calls, m / n + s.tx_coalesce_timer_fires.get());
}

// ---- busy polling ---------------------------------------------------------------------

TEST(BusyPoll, FindsAChainPublishedWithoutAKick) {
    // A budget no run reaches: the worker is spinning whenever it is idle.
    Harness h({.busyloop_usecs = 10'000'000});
    h.port.rx_left = 4;  // frames wait, the guest has no rx buffers yet
    Running run(h);
    const VhostNetStats& s = h.stats();
    const DeviceStats& ds = h.dev().device_stats();
    // The initial runs are over (tx runs before rx): the worker is now
    // idle, i.e. spinning.
    ASSERT_TRUE(wait_until([&] { return s.rx_runs.get() >= 1; }));
    h.add_tx_burst(0, 1, 64);
    // Notifications stay enabled while spinning: the driver would kick...
    EXPECT_TRUE(h.txd().kick_prepare());
    // ...but this one never does; the spin finds the chain anyway.
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == 1; }));
    EXPECT_GE(ds.busy_poll_hits.get(), 1u);
    EXPECT_EQ(s.tx_kicks.get(), 0u);

    // Guest rx buffers refilled without a kick while the port has frames:
    // the spin finds the refill too (or, if it lands just as the tx round
    // ends, the round's own check of the port and the rx ring does).
    const uint64_t hits = ds.busy_poll_hits.get();
    EXPECT_EQ(s.rx_pkts.get(), 0u);
    EXPECT_EQ(s.rx_ring_empty.get(), 1u) << "the initial rx run found no buffers";
    h.add_rx_burst(0, 4);
    ASSERT_TRUE(wait_until([&] { return s.rx_pkts.get() == 4; }));
    EXPECT_LE(ds.busy_poll_hits.get(), hits + 1);
    EXPECT_EQ(s.rx_kicks.get(), 0u);
    EXPECT_EQ(s.tx_kicks.get(), 0u);
}

TEST(BusyPoll, AKickThatLandsWhileSpinningIsConsumedNotLost) {
    Harness h({.busyloop_usecs = 20'000});
    Running run(h);
    const VhostNetStats& s = h.stats();
    const DeviceStats& ds = h.dev().device_stats();
    ASSERT_TRUE(wait_until([&] { return s.rx_runs.get() >= 1; }));
    h.add_tx_burst(0, 1, 64);
    ASSERT_TRUE(h.txd().kick_prepare());
    h.tx_kick().signal();
    // Whether the spin or the kick finds the chain, the kick is read by an
    // epoll wait (right after the hit, or once the budget runs out).
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == 1 && s.tx_kicks.get() == 1; }));
    EXPECT_FALSE(h.tx_kick().wait(0)) << "kick eventfd drained";
    EXPECT_GE(ds.busy_poll_hits.get() + ds.busy_poll_misses.get(), 1u);
}

TEST(BusyPoll, BudgetRunsOutWhenIdle) {
    Harness h({.busyloop_usecs = 50});
    Running run(h);
    const VhostNetStats& s = h.stats();
    const DeviceStats& ds = h.dev().device_stats();
    ASSERT_TRUE(wait_until([&] { return ds.busy_poll_misses.get() >= 1; }));
    EXPECT_EQ(ds.busy_poll_hits.get(), 0u);
    EXPECT_EQ(s.tx_pkts.get() + s.rx_pkts.get(), 0u);
}

TEST(BusyPoll, OffByDefault) {
    Harness h({});
    Running run(h);
    const VhostNetStats& s = h.stats();
    const DeviceStats& ds = h.dev().device_stats();
    ASSERT_TRUE(wait_until([&] { return s.rx_runs.get() >= 1; }));  // initial runs over
    h.add_tx_burst(0, 1, 64);
    h.tx_kick().signal();
    ASSERT_TRUE(wait_until([&] { return s.tx_pkts.get() == 1 && s.tx_kicks.get() == 1; }));
    EXPECT_EQ(ds.busy_poll_hits.get() + ds.busy_poll_misses.get(), 0u);
}

}  // namespace
}  // namespace pvnet::backend
