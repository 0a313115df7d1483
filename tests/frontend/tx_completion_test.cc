// Tx completion strategies of the frontend (seed 000, "virtio-net tx napi"):
// Flow send credit released at transmit (orphan) or on completion, the two
// tx modes (FreeOnXmit, Napi), tx cleaning from rx NAPI, the tx queue's stop
// and restart, and rx busy polling. A SplitDeviceQueue on the same guest
// memory plays the device, driven by hand in the test thread; the device
// signals the call fd only when should_signal() says so, as vhost does.
// Decided by counters and byte counts; time only through the injected clock
// of Flow::can_send; every wait is bounded.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>

#include "pvnet/virtio/virtio_config.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"

namespace pvnet::frontend {
namespace {

using mem::GuestAddr;
using ring::DescChain;
using ring::PopStatus;

constexpr uint64_t kBase = 0x100000;

notify::EventFd must_fd() {
    auto r = notify::EventFd::create();
    if (!r) throw std::runtime_error("EventFd::create");
    return std::move(r.value());
}

VirtioNetConfig config(TxMode mode, uint16_t tx_size = 64, bool at_rx = false) {
    VirtioNetConfig c;
    c.rx_size = 64;
    c.tx_size = tx_size;
    c.event_idx = true;
    c.tx_mode = mode;
    c.clean_tx_at_rx = at_rx;
    return c;
}

/// One queue pair, its doorbells, and a device on its rings.
class Bench {
public:
    explicit Bench(const VirtioNetConfig& cfg) {
        auto r = mem::MemoryRegion::create(VirtioNet::area_bytes(cfg), "tx_completion_test");
        if (!r) throw std::runtime_error("MemoryRegion::create");
        region_.emplace(std::move(r.value()));
        if (!table_.add(GuestAddr(kBase), region_->bytes())) throw std::runtime_error("table");
        const VirtioNetFds fds{&rx_kick, &tx_kick, &rx_call, &tx_call};
        auto n = VirtioNet::create(table_, GuestAddr(kBase), VirtioNet::area_bytes(cfg), cfg,
                                   std::span<const VirtioNetFds>(&fds, 1));
        if (!n) throw std::runtime_error("VirtioNet::create");
        net_ = std::move(*n);
        ring::DeviceQueueConfig c;
        c.features = cfg.event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0;
        c.addrs = qp().rx_addrs();
        auto rx = ring::SplitDeviceQueue::create(table_, c);
        c.addrs = qp().tx_addrs();
        auto tx = ring::SplitDeviceQueue::create(table_, c);
        if (!rx || !tx) throw std::runtime_error("SplitDeviceQueue::create");
        dev_rx_ = std::move(*rx);
        dev_tx_ = std::move(*tx);
    }

    QueuePair& qp() { return net_->queue_pair(0); }

    /// The sender: checks credit at `now_ns`, then builds and transmits.
    XmitStatus send(Flow& flow, uint32_t len, uint64_t now_ns) {
        if (!flow.can_send(len, now_ns)) return XmitStatus::NoCredit;
        uint32_t id = 0;
        if (!qp().alloc_buf(id)) throw std::logic_error("pool empty");
        const XmitStatus s = qp().xmit(flow, id, len);
        if (s == XmitStatus::NoCredit || s == XmitStatus::Stopped) qp().free_buf(id);
        return s;
    }

    // ---- the device ---------------------------------------------------------

    /// Pops every available tx chain into the popped list.
    uint32_t pop_tx() {
        uint32_t n = 0;
        while (dev_tx_->pop(chain_) == PopStatus::Ok) {
            popped_.push_back(chain_.head);
            ++n;
        }
        return n;
    }
    /// Uses the `n` oldest popped tx chains (length 0), publishes, and
    /// signals the tx call fd if the driver asked for it.
    bool complete_tx(std::size_t n) {
        for (std::size_t k = 0; k < n && !popped_.empty(); ++k) {
            if (!dev_tx_->add_used(popped_.front(), 0)) throw std::logic_error("add_used");
            popped_.pop_front();
        }
        dev_tx_->flush_used();
        if (!dev_tx_->should_signal()) return false;
        tx_call.signal();
        ++tx_signals;
        return true;
    }
    std::size_t popped() const { return popped_.size(); }

    /// Writes `n` rx packets of `len` bytes and signals if asked.
    uint32_t deliver_rx(uint32_t n, uint32_t len) {
        uint32_t done = 0;
        while (done < n && dev_rx_->pop(chain_) == PopStatus::Ok) {
            if (!dev_rx_->add_used(chain_.head, len)) throw std::logic_error("add_used");
            ++done;
        }
        dev_rx_->flush_used();
        if (done != 0 && dev_rx_->should_signal()) rx_call.signal();
        return done;
    }

    notify::EventFd rx_kick = must_fd();
    notify::EventFd tx_kick = must_fd();
    notify::EventFd rx_call = must_fd();
    notify::EventFd tx_call = must_fd();
    uint64_t tx_signals = 0;

private:
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::unique_ptr<VirtioNet> net_;
    std::unique_ptr<ring::SplitDeviceQueue> dev_rx_, dev_tx_;
    DescChain chain_;
    std::deque<uint16_t> popped_;
};

auto drop_all = [](uint32_t, const std::byte*, uint32_t) { return false; };

// ---- Flow on its own ---------------------------------------------------------

TEST(Flow, CreditIsStrictAndStallTimeRunsFromFirstRefusalToNextSuccess) {
    Flow f(3000);
    EXPECT_TRUE(f.can_send(3000, 10));
    f.charge(2000);
    EXPECT_TRUE(f.can_send(1000, 20));
    EXPECT_FALSE(f.can_send(1001, 100));
    EXPECT_TRUE(f.stalled());
    EXPECT_FALSE(f.can_send(1001, 200)) << "still the same stall";
    EXPECT_EQ(f.stall_ns(250), 150u);
    f.release(2000, true);
    EXPECT_TRUE(f.can_send(1001, 350));
    EXPECT_FALSE(f.stalled());
    EXPECT_EQ(f.stats().sndbuf_refusals.get(), 2u);
    EXPECT_EQ(f.stats().sndbuf_stalls.get(), 1u);
    EXPECT_EQ(f.stats().sndbuf_stall_ns.get(), 250u);
    EXPECT_EQ(f.stats().max_in_flight_bytes.get(), 2000u);
    EXPECT_EQ(f.stats().completed_pkts.get(), 1u);
    EXPECT_FALSE(f.can_send(3001, 400)) << "larger than sndbuf never fits";
}

// ---- (a) Napi + OnCompletion: in flight never exceeds sndbuf ---------------------------

TEST(TxNapi, FlowInFlightNeverExceedsSndbufOverRandomSendAndComplete) {
    Bench b(config(TxMode::Napi, 64));
    QueuePair& qp = b.qp();
    constexpr uint32_t kSndbuf = 16000;
    Flow flow(kSndbuf, SndbufRelease::OnCompletion);
    std::mt19937 rng(4);
    uint64_t now = 1;
    uint64_t sent_bytes = 0;
    for (int step = 0; step < 20000; ++step) {
        now += 1000;
        switch (rng() % 3) {
            case 0: {  // a burst from the sender until credit or the queue stops it
                const auto want = static_cast<uint32_t>(rng() % 12);
                for (uint32_t k = 0; k < want; ++k) {
                    const auto len = static_cast<uint32_t>(60 + rng() % 1900);
                    const XmitStatus s = b.send(flow, len, now);
                    if (s != XmitStatus::Ok) {
                        ASSERT_NE(s, XmitStatus::Dropped);
                        break;
                    }
                    sent_bytes += len;
                }
                qp.tx_flush();
                break;
            }
            case 1:  // the device uses some of what it has
                b.pop_tx();
                b.complete_tx(rng() % (b.popped() + 1));
                break;
            default:  // the guest takes a pending tx interrupt
                qp.tx_interrupt();
                break;
        }
        ASSERT_LE(flow.in_flight_bytes(), kSndbuf) << step;
    }
    EXPECT_LE(flow.stats().max_in_flight_bytes.get(), kSndbuf);
    EXPECT_GT(flow.stats().sndbuf_stalls.get(), 0u) << "the limit was reached";
    EXPECT_EQ(flow.stats().sent_bytes.get(), sent_bytes);
    // Drain by interrupts alone: the re-arm discipline leaves no credit stranded.
    for (int round = 0; round < 4 && flow.in_flight_bytes() != 0; ++round) {
        b.pop_tx();
        b.complete_tx(b.popped());
        qp.tx_interrupt();
    }
    EXPECT_EQ(flow.in_flight_bytes(), 0u);
    EXPECT_EQ(flow.stats().completed_pkts.get(), flow.stats().sent_pkts.get());
    EXPECT_EQ(qp.free_bufs(), qp.total_bufs());
    const VirtioNetStats& st = qp.stats();
    EXPECT_EQ(st.tx_completions.get(), st.tx_pkts.get());
    EXPECT_EQ(st.tx_completions.get(), st.tx_completions_napi.get() +
                                           st.tx_completions_at_xmit.get() +
                                           st.tx_completions_at_rx.get());
    EXPECT_GT(st.tx_interrupts.get(), 0u);
    EXPECT_LE(st.tx_interrupts.get(), b.tx_signals) << "merged signals are one interrupt";
    EXPECT_EQ(st.tx_drop_ring_full.get(), 0u);
}

// ---- (b) FreeOnXmit without orphaning: the sndbuf deadlock --------------------------------

TEST(TxFreeOnXmit, WithoutOrphanASenderAtItsLimitStallsForever) {
    Bench b(config(TxMode::FreeOnXmit, 64));
    QueuePair& qp = b.qp();
    Flow flow(4000, SndbufRelease::OnCompletion);
    uint64_t now = 1000;
    for (int k = 0; k < 4; ++k) ASSERT_EQ(b.send(flow, 1000, now), XmitStatus::Ok);
    qp.tx_flush();
    EXPECT_EQ(b.send(flow, 1000, now), XmitStatus::NoCredit);

    // The device uses every buffer.
    EXPECT_EQ(b.pop_tx(), 4u);
    b.complete_tx(4);
    // The sender sleeps on the tx interrupt (bounded) and retries: nothing
    // transmits, so nothing reaps, so the credit never comes back.
    for (int round = 0; round < 3; ++round) {
        now += 1'000'000;
        ASSERT_FALSE(flow.can_send(1000, now)) << round;
        if (qp.wait_tx(1000)) qp.tx_interrupt();
    }
    EXPECT_TRUE(flow.stalled()) << "reported as stalled";
    EXPECT_EQ(flow.stall_ns(now), 3'000'000u);
    EXPECT_EQ(flow.in_flight_bytes(), 4000u);
    EXPECT_EQ(flow.stats().sndbuf_stalls.get(), 1u);
    EXPECT_EQ(flow.stats().sndbuf_refusals.get(), 4u);
    EXPECT_EQ(qp.stats().tx_completions.get(), 0u) << "the device used all 4; none reaped";
    EXPECT_EQ(qp.tx_queue().in_flight(), 4u);
    EXPECT_LE(qp.stats().tx_interrupts.get(), 1u) << "tx interrupts are off";

    // Any transmit would have reaped (here: another pass through free_old_xmit).
    EXPECT_EQ(qp.free_old_xmit(), 4u);
    EXPECT_TRUE(flow.can_send(1000, now + 500));
    EXPECT_EQ(flow.stats().sndbuf_stall_ns.get(), 3'000'500u);
}

// ---- (c) FreeOnXmit with orphaning never stalls on credit ---------------------------------

TEST(TxFreeOnXmit, WithOrphanTheSenderNeverStallsOnCredit) {
    Bench b(config(TxMode::FreeOnXmit, 16));
    QueuePair& qp = b.qp();
    Flow flow(4000, SndbufRelease::Orphan);
    uint64_t now = 0;
    uint64_t ok = 0;
    for (int round = 0; round < 500; ++round) {
        now += 1000;
        for (int k = 0; k < 8; ++k) {
            const XmitStatus s = b.send(flow, 1000, now);
            ASSERT_NE(s, XmitStatus::NoCredit) << round;
            ASSERT_NE(s, XmitStatus::Dropped);
            if (s == XmitStatus::Ok) ++ok;
            ASSERT_EQ(flow.in_flight_bytes(), 0u) << "orphaned at transmit";
        }
        qp.tx_flush();
        b.pop_tx();
        // A slow device: two rounds in four it uses nothing, and the ring
        // (not the sndbuf) pushes back.
        if (round % 4 < 2) b.complete_tx(b.popped());
    }
    EXPECT_EQ(flow.stats().sndbuf_stalls.get(), 0u);
    EXPECT_EQ(flow.stats().sndbuf_refusals.get(), 0u);
    EXPECT_EQ(flow.stats().sent_pkts.get(), ok);
    EXPECT_EQ(flow.stats().completed_pkts.get(), 0u);
    EXPECT_GT(qp.stats().tx_queue_stops.get(), 0u);
    EXPECT_GT(qp.stats().tx_busy.get(), 0u);
    EXPECT_GT(qp.stats().tx_completions_at_xmit.get(), 0u);
    EXPECT_EQ(qp.stats().tx_napi_polls.get(), 0u);
}

// ---- (d) Napi: the tx interrupt returns the credit ---------------------------------------

TEST(TxNapi, CompletionAndSignalThenPollTxReturnsTheCredit) {
    Bench b(config(TxMode::Napi, 64));
    QueuePair& qp = b.qp();
    Flow flow(4000, SndbufRelease::OnCompletion);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(b.send(flow, 1000, 100), XmitStatus::Ok);
    qp.tx_flush();
    EXPECT_EQ(b.tx_kick.consume(), 1u);
    EXPECT_FALSE(flow.can_send(1000, 100));
    EXPECT_EQ(qp.tx_interrupt(), 0u) << "no signal yet: nothing to do";
    EXPECT_EQ(qp.stats().tx_interrupts.get(), 0u);

    EXPECT_EQ(b.pop_tx(), 4u);
    EXPECT_TRUE(b.complete_tx(4)) << "tx interrupts are on in Napi mode";
    EXPECT_FALSE(flow.can_send(1000, 200)) << "not reaped before the poll";
    EXPECT_TRUE(qp.wait_tx(1'000'000));
    EXPECT_EQ(qp.tx_interrupt(), 4u);
    EXPECT_EQ(flow.in_flight_bytes(), 0u);
    EXPECT_TRUE(flow.can_send(1000, 600));
    EXPECT_EQ(flow.stats().sndbuf_stall_ns.get(), 500u);
    EXPECT_EQ(flow.stats().completed_pkts.get(), 4u);
    const VirtioNetStats& st = qp.stats();
    EXPECT_EQ(st.tx_interrupts.get(), 1u);
    EXPECT_EQ(st.tx_napi_polls.get(), 1u);
    EXPECT_EQ(st.tx_completions_napi.get(), 4u);
    EXPECT_EQ(st.tx_completions_at_xmit.get(), 0u);
    EXPECT_EQ(qp.free_bufs(), qp.total_bufs());

    // Re-armed at the next entry: one more completion interrupts again.
    ASSERT_EQ(b.send(flow, 1000, 700), XmitStatus::Ok);
    qp.tx_flush();
    b.pop_tx();
    EXPECT_TRUE(b.complete_tx(1));
    EXPECT_EQ(qp.tx_interrupt(), 1u);
    EXPECT_EQ(flow.in_flight_bytes(), 0u);
}

TEST(TxNapi, PollTxStopsAtItsBudget) {
    Bench b(config(TxMode::Napi, 64));
    QueuePair& qp = b.qp();
    Flow flow(1u << 20);
    for (int k = 0; k < 40; ++k) ASSERT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    qp.tx_flush();
    b.pop_tx();
    b.complete_tx(40);
    EXPECT_EQ(qp.poll_tx(16), 16u);
    EXPECT_EQ(qp.stats().tx_napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(flow.in_flight_bytes(), 2400u);
    EXPECT_EQ(qp.tx_interrupt(16), 24u) << "the pending signal drains the rest";
    EXPECT_EQ(flow.in_flight_bytes(), 0u);
}

TEST(TxNapi, OrphanedFlowIsCreditedAtTransmitStillReapedByNapi) {
    Bench b(config(TxMode::Napi, 64));
    QueuePair& qp = b.qp();
    Flow flow(1000, SndbufRelease::Orphan);
    for (int k = 0; k < 10; ++k) ASSERT_EQ(b.send(flow, 1000, 0), XmitStatus::Ok);
    qp.tx_flush();
    EXPECT_EQ(flow.in_flight_bytes(), 0u);
    b.pop_tx();
    b.complete_tx(10);
    EXPECT_EQ(qp.tx_interrupt(), 10u);
    EXPECT_EQ(flow.stats().completed_pkts.get(), 0u) << "completion owes an orphan nothing";
    EXPECT_EQ(qp.free_bufs(), qp.total_bufs());
}

// ---- (e) at-rx: steady rx traffic reaps tx, tx interrupts go away ---------------------------

struct SteadyResult {
    uint64_t completions, at_rx, napi, interrupts, tx_napi_polls;
};

constexpr uint32_t kSteadyBurst = 8;
constexpr uint32_t kSteadyRounds = 500;
constexpr uint16_t kSteadyTxSize = 64;

/// Without at-rx cleaning, the rounds from one tx interrupt to the next in
/// steady_stream, from Napi's re-arm rule alone. The interrupt at round r
/// reaps all B frames the device had used; each later flush re-arms with
/// enable_cb_delayed: used_event = reaped + 3/4 of in flight, and k rounds on
/// (k + 1)*B are in flight (the device is one round behind). The device's
/// used index moves from (k - 1)*B to k*B past the reaped point in round
/// r + k, so it signals at the first k with 3/4*(k + 1)*B < k*B (k = 4).
constexpr uint32_t rounds_per_tx_interrupt() {
    uint32_t k = 1;
    while ((k + 1) * kSteadyBurst * 3 / 4 >= k * kSteadyBurst) ++k;
    return k;
}
static_assert((rounds_per_tx_interrupt() + 1) * kSteadyBurst <= kSteadyTxSize,
              "the most in flight between interrupts fits the ring: no queue stop");

/// A stream with acks: each round the guest sends kSteadyBurst frames, the
/// device uses the previous round's frames (one round behind, like a wire),
/// then delivers 2 rx frames (the acks); the guest takes whatever interrupts fired.
SteadyResult steady_stream(bool at_rx) {
    Bench b(config(TxMode::Napi, kSteadyTxSize, at_rx));
    QueuePair& qp = b.qp();
    Flow flow(1u << 20);
    qp.try_fill_recv();
    for (uint32_t round = 0; round < kSteadyRounds; ++round) {
        for (uint32_t k = 0; k < kSteadyBurst; ++k) {
            if (b.send(flow, 1400, 0) != XmitStatus::Ok) throw std::logic_error("send");
        }
        qp.tx_flush();
        const std::size_t older = b.popped();
        b.pop_tx();
        b.complete_tx(older);
        b.deliver_rx(2, 66);
        if (b.rx_call.consume() != 0) {
            while (qp.poll_rx(kNapiBudget, drop_all) == kNapiBudget) {
            }
            qp.napi_complete();
            qp.try_fill_recv();
        }
        qp.tx_interrupt();
    }
    for (int round = 0; round < 4 && flow.in_flight_bytes() != 0; ++round) {
        b.pop_tx();
        b.complete_tx(b.popped());
        qp.tx_interrupt();
    }
    if (flow.in_flight_bytes() != 0) throw std::logic_error("credit stranded");
    const VirtioNetStats& st = qp.stats();
    return SteadyResult{st.tx_completions.get(), st.tx_completions_at_rx.get(),
                        st.tx_completions_napi.get(), st.tx_interrupts.get(),
                        st.tx_napi_polls.get()};
}

TEST(TxCleanAtRx, SteadyRxReapsTxSoTxInterruptsStayNearZero) {
    const SteadyResult on = steady_stream(true);
    const SteadyResult off = steady_stream(false);
    constexpr uint64_t kFrames = uint64_t{kSteadyRounds} * kSteadyBurst;
    EXPECT_EQ(on.completions, kFrames);
    EXPECT_EQ(off.completions, kFrames);
    // At-rx: all but the last round's frames are reaped by the rx poll.
    EXPECT_GE(on.at_rx, on.completions - kSteadyBurst);
    // The device's first decision always signals (vhost's signalled_used
    // not yet valid), and the final drain needs the fallback: 2 at most.
    constexpr uint64_t kFirstAndDrain = 2;
    EXPECT_LE(on.interrupts, kFirstAndDrain);
    EXPECT_LE(on.tx_napi_polls, kFirstAndDrain);
    // Without it every completion waits for a tx interrupt, one per
    // rounds_per_tx_interrupt() rounds by the delayed enable (the first
    // decision among them): fewer means used_event set further than 3/4
    // ahead, more than that plus the drain's (and a spare) means a re-arm
    // nearer than 3/4, e.g. at the next entry.
    constexpr uint64_t kPeriodic = kSteadyRounds / rounds_per_tx_interrupt();
    EXPECT_EQ(off.at_rx, 0u);
    EXPECT_GE(off.napi, off.completions - kSteadyBurst);
    EXPECT_GE(off.interrupts, kPeriodic);
    EXPECT_LE(off.interrupts, kPeriodic + kFirstAndDrain);
}

TEST(TxCleanAtRx, IgnoredInFreeOnXmitMode) {
    Bench b(config(TxMode::FreeOnXmit, 64, true));
    QueuePair& qp = b.qp();
    Flow flow(1u << 20, SndbufRelease::Orphan);
    qp.try_fill_recv();
    for (int k = 0; k < 4; ++k) ASSERT_EQ(b.send(flow, 500, 0), XmitStatus::Ok);
    qp.tx_flush();
    b.pop_tx();
    b.complete_tx(4);
    b.deliver_rx(1, 66);
    EXPECT_EQ(qp.poll_rx(kNapiBudget, drop_all), 1u);
    EXPECT_EQ(qp.stats().tx_completions_at_rx.get(), 0u);
    EXPECT_EQ(qp.free_old_xmit(), 4u);
}

// ---- (f) check_sq_full_and_disable: stop and restart ------------------------------------

class TxQueueStop : public ::testing::TestWithParam<TxMode> {};

TEST_P(TxQueueStop, StopsWhenFullRestartsAtTheWakeThreshold) {
    VirtioNetConfig c = config(GetParam(), 8);
    c.tx_wake_descs = 4;
    Bench b(c);
    QueuePair& qp = b.qp();
    Flow flow(1u << 20);
    for (int k = 0; k < 7; ++k) ASSERT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    EXPECT_FALSE(qp.tx_stopped());
    ASSERT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    EXPECT_TRUE(qp.tx_stopped()) << "no room for the largest chain";
    EXPECT_EQ(qp.stats().tx_queue_stops.get(), 1u);
    qp.tx_flush();
    const uint32_t free_before = qp.free_bufs();
    EXPECT_EQ(b.send(flow, 100, 0), XmitStatus::Stopped);
    EXPECT_EQ(qp.free_bufs(), free_before) << "a refused buffer stays with the sender";
    EXPECT_EQ(qp.stats().tx_busy.get(), 1u);
    EXPECT_EQ(qp.stats().tx_drop_ring_full.get(), 0u);

    b.pop_tx();
    b.complete_tx(2);  // 2 free < 4: stays stopped
    if (GetParam() == TxMode::Napi) qp.tx_interrupt();
    EXPECT_EQ(b.send(flow, 100, 0), XmitStatus::Stopped);
    EXPECT_TRUE(qp.tx_stopped());
    EXPECT_TRUE(b.complete_tx(6)) << "stopped: the tx interrupt is armed in both modes";
    if (GetParam() == TxMode::Napi) {
        qp.tx_interrupt();
        EXPECT_FALSE(qp.tx_stopped()) << "restarted by the tx poll";
    }
    EXPECT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    EXPECT_FALSE(qp.tx_stopped());
    EXPECT_EQ(qp.stats().tx_queue_wakes.get(), 1u);
    EXPECT_EQ(qp.stats().tx_completions.get(), 8u);
    EXPECT_EQ(flow.in_flight_bytes(), 100u);
}

TEST_P(TxQueueStop, DefaultWakeIsTheStopThreshold) {
    Bench b(config(GetParam(), 4));
    QueuePair& qp = b.qp();
    Flow flow(1u << 20);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    qp.tx_flush();
    EXPECT_TRUE(qp.tx_stopped());
    b.pop_tx();
    b.complete_tx(1);
    EXPECT_EQ(qp.free_old_xmit(), 1u);
    EXPECT_FALSE(qp.tx_stopped());
    EXPECT_EQ(qp.stats().tx_queue_wakes.get(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Modes, TxQueueStop,
                         ::testing::Values(TxMode::FreeOnXmit, TxMode::Napi));

// ---- busy poll ------------------------------------------------------------------------

TEST(BusyPollRx, HitDeliversAtOnceMissCountsAndLeavesInterruptsToTheCaller) {
    VirtioNetConfig c = config(TxMode::Napi, 64);
    c.busy_poll_usecs = 50;
    Bench b(c);
    QueuePair& qp = b.qp();
    qp.try_fill_recv();
    EXPECT_EQ(qp.busy_poll_rx(kNapiBudget, drop_all, 0), 0u) << "no budget: a plain poll";
    EXPECT_EQ(qp.stats().busy_poll_misses.get(), 0u);
    EXPECT_EQ(qp.busy_poll_rx(kNapiBudget, drop_all), 0u) << "configured 50 us, bounded";
    EXPECT_EQ(qp.stats().busy_poll_misses.get(), 1u);
    EXPECT_EQ(b.deliver_rx(3, 100), 3u);
    b.rx_call.consume();  // EVENT_IDX: a disabled ring may interrupt once more
    // A long budget returns at the first packets, not at its end.
    EXPECT_EQ(qp.busy_poll_rx(kNapiBudget, drop_all, 5'000'000), 3u);
    EXPECT_EQ(qp.stats().busy_poll_hits.get(), 1u);
    EXPECT_EQ(qp.stats().rx_pkts.get(), 3u);
    EXPECT_TRUE(qp.napi_complete());
    EXPECT_EQ(b.deliver_rx(1, 100), 1u);
    EXPECT_EQ(b.rx_call.consume(), 1u) << "re-armed by napi_complete";
    EXPECT_EQ(qp.busy_poll_rx(kNapiBudget, drop_all, 0), 1u);
    EXPECT_EQ(qp.stats().busy_poll_hits.get(), 1u) << "a plain poll is no busy-poll hit";
}

TEST(Counters, KicksSentAndSuppressedComeFromTheDriverQueues) {
    Bench b(config(TxMode::Napi, 64));
    QueuePair& qp = b.qp();
    Flow flow(1u << 20);
    ASSERT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    qp.tx_flush();
    ASSERT_EQ(b.send(flow, 100, 0), XmitStatus::Ok);
    qp.tx_flush();  // the device has not caught up: avail_event says no kick
    EXPECT_EQ(qp.stats().tx_kicks.get(), 1u);
    EXPECT_EQ(qp.tx_kicks_suppressed(), 1u);
    EXPECT_EQ(qp.rx_kicks_suppressed(), 0u);
}

}  // namespace
}  // namespace pvnet::frontend
