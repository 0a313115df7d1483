// The direct path (seed 002): a small batch that would need a kick is sent
// by the frontend's own thread through VhostNet::process_tx_now, with the
// worker running; the control plane stopping the ring, and the worker
// waiting for a full port, while a direct run goes on (issue 23 item 10);
// and a readable port fd with no guest rx buffers does not spin the worker. A VirtioNet QueuePair (the in-process pairing,
// pair::GuestPair) against VhostNet, checked by counters and by which thread
// sent what.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/port/port.h"
#include "pvnet/util/iov.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using harness::check_packet;
using harness::wait_until;
using harness::write_packet;

constexpr uint32_t kLen = 64;  ///< hdr + frame of every test packet

/// The world behind the backend on tx. send() is serialized by the
/// pair's tx_mu, so its records need no lock of their own; the test
/// reads them once `sent` (release in send) says they are there.
struct DirectPort {
    std::vector<uint64_t> seqs;
    std::vector<std::thread::id> threads;  ///< who sent each packet
    uint64_t bad = 0;
    std::atomic<uint64_t> sent{0};
    std::atomic<bool> hold{false};     ///< send() waits (bounded) while set
    std::atomic<bool> holding{false};  ///< ... and says so
    uint32_t retry_every = 0;          ///< every n-th send() says Retry (0: never)
    uint64_t sends = 0;
    std::optional<notify::EventFd> writable;  ///< tx_fd(), always writable; none: -1

    int tx_fd() const noexcept { return writable ? writable->fd() : -1; }
    bool rx_pending() noexcept { return false; }
    uint32_t recv(std::span<const iovec>) noexcept { return 0; }
    port::SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        if (retry_every != 0 && ++sends % retry_every == 0) return port::SendResult::Retry;
        if (hold.load(std::memory_order_acquire)) {
            holding.store(true, std::memory_order_release);
            (void)wait_until([this] { return !hold.load(std::memory_order_acquire); });
        }
        std::vector<std::byte> pkt;
        for (const iovec& v : src) {
            const auto* b = static_cast<const std::byte*>(v.iov_base);
            pkt.insert(pkt.end(), b, b + v.iov_len);
        }
        const auto seq = pkt.size() == len ? check_packet(pkt.data(), len) : std::nullopt;
        if (seq) {
            seqs.push_back(*seq);
        } else {
            ++bad;
        }
        threads.push_back(std::this_thread::get_id());
        sent.fetch_add(1, std::memory_order_release);
        return seq ? port::SendResult::Sent : port::SendResult::Dropped;
    }
};
static_assert(port::Port<DirectPort> && port::HasTxFd<DirectPort>);

using Dev = VhostNet<DirectPort>;

/// process_tx_now behind DirectTx's function pointer.
bool run_direct(void* ctx) noexcept { return static_cast<Dev*>(ctx)->process_tx_now(); }

struct PairOptions {
    Weight tx_weight{};
    bool event_idx = false;
    frontend::TxMode tx_mode = frontend::TxMode::Napi;
    uint32_t retry_every = 0;  ///< DirectPort::retry_every, with a tx fd
};

/// A guest (QueuePair) and VhostNet<DirectPort> on one GuestPair.
class DirectPair {
public:
    explicit DirectPair(const PairOptions& o = {}) {
        frontend::VirtioNetConfig fc;
        fc.rx_size = fc.tx_size = 256;
        fc.event_idx = o.event_idx;
        fc.tx_mode = o.tx_mode;
        if (auto err = tb_.setup(fc)) throw std::runtime_error(*err);
        if (o.retry_every != 0) {
            auto e = notify::EventFd::create();
            if (!e) throw std::runtime_error("EventFd::create");
            port.writable.emplace(std::move(*e));
            port.retry_every = o.retry_every;
        }
        VhostNetOptions opt;
        opt.tx_weight = o.tx_weight;
        auto d = Dev::create(tb_.device_setup(), opt, port);
        if (!d) throw std::runtime_error("VhostNet::create");
        dev_ = std::move(*d);
    }

    Dev& dev() { return *dev_; }
    frontend::QueuePair& qp() { return tb_.qp(); }
    const VhostNetStats& stats() const { return dev_->stats(); }
    const notify::EventFd& tx_kick() const { return tb_.tx_kick(); }

    /// Starts the worker and waits until it has served its first tx run
    /// (its rx run starts after tx_mu is released): idle, notifications on.
    void start_idle() {
        dev_->start();
        ASSERT_TRUE(wait_until([&] { return stats().rx_runs.get() >= 1; }));
    }
    void direct_on(uint32_t max_batch = 4) {
        qp().set_direct_tx(frontend::DirectTx{&run_direct, dev_.get(), max_batch});
    }
    /// Queues packets [first, first + n) and flushes once.
    void send(uint64_t first, uint32_t n) {
        for (uint64_t s = first; s < first + n; ++s) queue(s);
        qp().tx_flush();
    }
    void queue(uint64_t seq) {
        uint32_t id = 0;
        ASSERT_TRUE(qp().alloc_buf(id));
        write_packet(qp().buf_host(id), seq, kLen);
        ASSERT_TRUE(qp().xmit(id, kLen));
    }
    /// Waits until the port has `n` packets; true if it did.
    bool wait_sent(uint64_t n) {
        return wait_until([&] { return port.sent.load(std::memory_order_acquire) >= n; });
    }
    /// Reaps tx completions (Napi: on the tx interrupt) until `n` in all.
    bool wait_completions(uint64_t n) {
        return wait_until([&] {
            qp().tx_interrupt();
            return qp().stats().tx_completions.get() >= n;
        });
    }

    DirectPort port;

private:
    pair::GuestPair tb_;
    std::unique_ptr<Dev> dev_;  ///< destroyed first: the worker stops before the rest goes
};

/// What the frontend's tx_flush calls did: doorbells and direct runs.
void expect_flushes(DirectPair& t, uint64_t kicks, uint64_t direct) {
    EXPECT_EQ(t.qp().stats().tx_kicks.get(), kicks);
    EXPECT_EQ(t.qp().stats().tx_direct.get(), direct);
}

void expect_in_order(const DirectPort& p, uint64_t n) {
    ASSERT_EQ(p.seqs.size(), n);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(p.seqs[i], i) << "at " << i;
    EXPECT_EQ(p.bad, 0u);
}

TEST(DirectPath, SmallBatchIsSentByTheCallersThread) {
    DirectPair t;
    t.start_idle();
    t.direct_on();
    const auto me = std::this_thread::get_id();
    for (uint32_t round = 0; round < 2; ++round) {
        t.send(uint64_t{round} * 4, 4);
        // Synchronous: delivered before tx_flush returned, by this thread.
        ASSERT_EQ(t.port.sent.load(std::memory_order_acquire), (round + 1) * 4u);
        EXPECT_EQ(t.stats().direct_runs.get(), round + 1u);  // re-armed for the next batch
    }
    expect_in_order(t.port, 8);
    for (const auto& id : t.port.threads) EXPECT_EQ(id, me);
    expect_flushes(t, 0, 2);
    EXPECT_EQ(t.stats().tx_kicks.get(), 0u);
    EXPECT_EQ(t.stats().direct_pkts.get(), 8u);
    EXPECT_EQ(t.stats().direct_busy.get(), 0u);
    // The completions go the usual way: used entries, the interrupt decision.
    EXPECT_GE(t.stats().tx_calls.get() + t.stats().tx_signals_suppressed_event_idx.get(), 1u);
    ASSERT_TRUE(t.wait_completions(8));
    EXPECT_EQ(t.qp().free_bufs(), t.qp().total_bufs());
}

TEST(DirectPath, BatchAboveMaxKicks) {
    DirectPair t;
    t.start_idle();
    t.direct_on();
    t.send(0, 5);
    expect_flushes(t, 1, 0);
    ASSERT_TRUE(t.wait_sent(5));
    expect_in_order(t.port, 5);
    for (const auto& id : t.port.threads) EXPECT_NE(id, std::this_thread::get_id());
    EXPECT_EQ(t.stats().direct_runs.get(), 0u);
    ASSERT_TRUE(t.wait_completions(5));
}

TEST(DirectPath, OffKicks) {
    DirectPair t;
    t.start_idle();
    t.direct_on();
    t.qp().set_direct_tx(frontend::DirectTx{});
    t.send(0, 2);
    expect_flushes(t, 1, 0);
    ASSERT_TRUE(t.wait_sent(2));
    expect_in_order(t.port, 2);
    EXPECT_NE(t.port.threads[0], std::this_thread::get_id());
    EXPECT_EQ(t.stats().direct_runs.get() + t.stats().direct_busy.get(), 0u);
}

bool decline(void* ctx) noexcept {
    static_cast<std::atomic<int>*>(ctx)->fetch_add(1, std::memory_order_relaxed);
    return false;
}

TEST(DirectPath, DeclinedRunKicks) {
    DirectPair t;
    t.start_idle();
    std::atomic<int> calls{0};
    t.qp().set_direct_tx(frontend::DirectTx{&decline, &calls, 4});
    t.send(0, 3);
    EXPECT_EQ(calls.load(), 1);
    expect_flushes(t, 1, 0);
    ASSERT_TRUE(t.wait_sent(3));
    expect_in_order(t.port, 3);
}

TEST(DirectPath, BusyLockReturnsFalseAndTheKickLosesNothing) {
    DirectPair t;
    t.start_idle();
    t.port.hold.store(true, std::memory_order_release);
    t.send(0, 1);  // kicks: the worker takes tx_mu and waits inside send()
    ASSERT_TRUE(wait_until([&] { return t.port.holding.load(std::memory_order_acquire); }));
    t.direct_on();
    t.send(1, 2);  // the worker's run has notifications off: no kick, no direct run
    expect_flushes(t, 1, 0);  // only the first batch kicked
    // The caller's side of a busy lock: false, counted; then it kicks.
    EXPECT_FALSE(t.dev().process_tx_now());
    EXPECT_EQ(t.stats().direct_busy.get(), 1u);
    EXPECT_EQ(t.stats().direct_runs.get(), 0u);
    t.tx_kick().signal();
    t.port.hold.store(false, std::memory_order_release);
    ASSERT_TRUE(t.wait_sent(3));
    expect_in_order(t.port, 3);
    for (const auto& id : t.port.threads) EXPECT_NE(id, std::this_thread::get_id());
    ASSERT_TRUE(t.wait_completions(3));
}

TEST(DirectPath, WeightExceededLeavesTheRestToTheWorker) {
    PairOptions o;
    o.tx_weight = Weight{2, 0};
    DirectPair t(o);
    t.start_idle();
    t.direct_on();
    t.send(0, 4);
    expect_flushes(t, 0, 1);
    ASSERT_TRUE(t.wait_sent(4));
    // Let the worker's run end; nothing more may arrive.
    ASSERT_TRUE(t.wait_completions(4));
    expect_in_order(t.port, 4);
    const auto me = std::this_thread::get_id();
    EXPECT_EQ(t.port.threads[0], me);
    EXPECT_EQ(t.port.threads[1], me);
    EXPECT_NE(t.port.threads[2], me);
    EXPECT_NE(t.port.threads[3], me);
    EXPECT_EQ(t.stats().direct_pkts.get(), 2u);
    EXPECT_GE(t.stats().tx_weight_requeue.get(), 1u);
    EXPECT_EQ(t.stats().tx_kicks.get(), 1u);  // the direct run's hand-over
    EXPECT_EQ(t.port.sent.load(std::memory_order_acquire), 4u);
}

TEST(PortRetry, TheWorkerResumesWhenThePortBecomesWritable) {
    // Every 2nd send says Retry; the port's tx fd is writable at once. The
    // worker's run stops with notifications off, so only EPOLLOUT on that fd
    // resumes it: the wait must be in the epoll set.
    PairOptions o;
    o.retry_every = 2;
    DirectPair t(o);
    t.start_idle();
    t.send(0, 4);
    ASSERT_TRUE(t.wait_sent(4)) << "tx stalled after the port said Retry";
    ASSERT_TRUE(t.wait_completions(4));
    expect_in_order(t.port, 4);
    EXPECT_EQ(t.stats().tx_retry.get(), 3u);  // packets 1, 2 and 3 once each
    EXPECT_EQ(t.stats().tx_pkts.get(), 4u);
}

TEST(DirectPath, StopVringWaitsForARunInProgress) {
    // The control plane stops the tx ring (GET_VRING_BASE) while the
    // guest's thread is inside a direct run: the flush of coalesced entries
    // and the base must wait for the run's end, or the base misses the
    // chains it pops meanwhile (a restart sends them twice) and the
    // coalescer and signal path are shared unguarded.
    harness::Options o;
    o.tx_coalesce = {64, 10'000'000};  // used entries wait: the stop flushes them
    harness::Harness h(o);
    auto& dev = h.dev();  // no worker: the test's threads are the direct path and the control plane
    h.add_tx_burst(0, 1, kLen);
    ASSERT_TRUE(dev.process_tx_now());
    ASSERT_EQ(h.tx_call().consume(), 0u) << "coalesced";
    std::atomic<bool> in_send{false}, release{false};
    h.port.on_send = [&] {  // the direct path's thread, in its second run's first send
        if (h.port.sent_lens.size() != 2) return;
        in_send.store(true);
        (void)wait_until([&] { return release.load(); });
    };
    h.add_tx_burst(1, 3, kLen);
    std::thread direct([&] { (void)dev.process_tx_now(); });
    ASSERT_TRUE(wait_until([&] { return in_send.load(); }));
    std::optional<VringBase> base;
    std::thread stopper([&] {
        if (auto b = dev.stop_vring(tx_vring(0))) base = *b;
    });
    // The stop's flush signals the guest: never while the run it waits for goes on.
    const bool early = h.tx_call().wait(300'000);
    release.store(true);
    direct.join();
    stopper.join();
    EXPECT_FALSE(early) << "stop_vring used the tx signal path while a direct run was in it";
    ASSERT_TRUE(base.has_value());
    EXPECT_EQ(base->last_avail_idx, 4u) << "the base counts every chain the run popped";
    EXPECT_EQ(h.used_idx(h.tx_addrs()), 4u);
    EXPECT_EQ(h.port.sent_lens.size(), 4u);
    EXPECT_EQ(h.tx_call().consume(), 1u) << "what was coalesced is signalled at the stop";
    EXPECT_FALSE(dev.process_tx_now()) << "stopped";
}

/// Two threads (this one as the guest, the worker) over `frames` frames
/// with batches of 1..8: every frame exactly once, in order, whether the
/// caller or the worker sent it. `extra_direct`: the guest's thread also
/// calls process_tx_now after each batch, whatever the worker is doing.
void stress(DirectPair& t, uint64_t frames, bool extra_direct) {
    t.start_idle();
    t.direct_on();
    frontend::QueuePair& qp = t.qp();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    // Frees room until `ok()`; false if that took past `end`.
    auto reap_until = [&](auto ok) {
        while (!ok()) {
            qp.free_old_xmit();
            if (std::chrono::steady_clock::now() > end) return false;
            std::this_thread::yield();
        }
        return true;
    };
    uint32_t rng = 12345;
    uint64_t seq = 0;
    while (seq < frames) {
        rng = rng * 1103515245u + 12345u;
        const uint32_t batch = 1 + (rng >> 16) % 8;
        for (uint32_t k = 0; k < batch && seq < frames; ++k, ++seq) {
            if (qp.tx_queue().num_free() == 0) qp.tx_flush();  // publish before waiting
            ASSERT_TRUE(reap_until([&] { return qp.tx_queue().num_free() != 0; }));
            ASSERT_TRUE(reap_until([&] { return qp.free_bufs() != 0; }));
            t.queue(seq);
        }
        qp.tx_flush();
        if (extra_direct) (void)t.dev().process_tx_now();
        qp.free_old_xmit();
        // Now and then let the worker drain and go idle, so the next batch
        // finds "kick needed": small ones then go direct, racing the
        // worker's last moments with tx_mu (direct_busy).
        if ((rng >> 8) % 4 == 0) {
            ASSERT_TRUE(reap_until([&] { return qp.free_bufs() == qp.total_bufs(); }));
        }
    }
    ASSERT_TRUE(t.wait_sent(frames));
    expect_in_order(t.port, frames);
    ASSERT_TRUE(reap_until([&] { return qp.free_bufs() == qp.total_bufs(); }));
    EXPECT_EQ(t.port.sent.load(std::memory_order_acquire), frames);
    EXPECT_GT(t.stats().direct_pkts.get(), 0u);
    EXPECT_GT(t.qp().stats().tx_kicks.get(), 0u);
    EXPECT_EQ(t.qp().stats().tx_drop_ring_full.get(), 0u);
    std::printf("direct runs %llu (%llu pkts), busy %llu, kicks %llu\n",
                static_cast<unsigned long long>(t.stats().direct_runs.get()),
                static_cast<unsigned long long>(t.stats().direct_pkts.get()),
                static_cast<unsigned long long>(t.stats().direct_busy.get()),
                static_cast<unsigned long long>(t.qp().stats().tx_kicks.get()));
}

// Run under TSan too (make test-tsan).
TEST(DirectPathStress, EveryFrameOnceInOrder) {
    PairOptions o;
    o.event_idx = true;
    o.tx_mode = frontend::TxMode::FreeOnXmit;
    DirectPair t(o);
    stress(t, 200'000, false);
}

// A port that fills up (Retry every 5th send, then writable at once): the
// worker's wait for EPOLLOUT (tx_wait_writable) begins and ends while the
// guest's thread runs the direct path, which reads it. Run under TSan too.
TEST(DirectPathStress, APortThatFillsUpWhileTheDirectPathRunsLosesNothing) {
    PairOptions o;
    o.event_idx = true;
    o.tx_mode = frontend::TxMode::FreeOnXmit;
    o.retry_every = 5;
    DirectPair t(o);
    stress(t, 50'000, true);
    EXPECT_GT(t.stats().tx_retry.get(), 0u);
}

/// rx: `left` packets behind an eventfd that stays readable until the last
/// one is taken, as a socket's fd does.
struct RxFdPort {
    explicit RxFdPort(uint64_t n) : left(n) {
        auto e = notify::EventFd::create();
        if (!e) throw std::runtime_error("EventFd::create");
        fd.emplace(std::move(*e));
        fd->signal();
    }
    std::optional<notify::EventFd> fd;
    std::atomic<uint64_t> left;
    uint64_t seq = 0;  ///< worker only

    int rx_fd() const noexcept { return fd->fd(); }
    bool rx_pending() noexcept { return left.load(std::memory_order_relaxed) != 0; }
    uint32_t recv(std::span<const iovec> dst) noexcept {
        std::array<std::byte, kLen> pkt;
        write_packet(pkt.data(), seq++, kLen);
        (void)copy_to_iov(dst, 0, pkt);
        if (left.fetch_sub(1, std::memory_order_relaxed) == 1) (void)fd->consume();
        return kLen;
    }
    port::SendResult send(std::span<const iovec>, uint32_t) noexcept {
        sent.fetch_add(1, std::memory_order_release);
        return port::SendResult::Sent;
    }
    std::atomic<uint64_t> sent{0};
};
static_assert(port::Port<RxFdPort> && port::HasRxFd<RxFdPort>);

TEST(RxPortFd, ReadablePortWithoutGuestBuffersDoesNotSpinTheWorker) {
    constexpr uint64_t kPkts = 8;
    pair::GuestPair tb;
    ASSERT_FALSE(tb.setup(256, false));
    RxFdPort port(kPkts);
    auto d = VhostNet<RxFdPort>::create(tb.device_setup(), VhostNetOptions{}, port);
    ASSERT_TRUE(d);
    VhostNet<RxFdPort>& dev = **d;
    dev.start();
    // The first round (tx and rx pending from start) ends with the rx ring empty.
    const DeviceStats& ds = dev.device_stats();
    ASSERT_TRUE(wait_until([&] { return ds.rounds.get() >= 1; }));
    EXPECT_EQ(dev.stats().rx_ring_empty.get(), 1u);
    EXPECT_EQ(dev.stats().rx_port_unwatched.get(), 1u);

    // Wake the worker kKicks times for something else, each kick's packet
    // sent before the next. A port fd still watched would be reported
    // readable by each of those waits (level-triggered), and by every wait
    // in between: rx runs and rounds beyond the kicks'. Synchronised on the
    // port's count, not on time.
    constexpr uint64_t kKicks = 3;
    const uint64_t rounds0 = ds.rounds.get();
    const uint64_t wakeups0 = ds.wakeups.get();
    frontend::QueuePair& qp = tb.qp();
    for (uint64_t k = 1; k <= kKicks; ++k) {
        uint32_t id = 0;
        ASSERT_TRUE(qp.alloc_buf(id));
        write_packet(qp.buf_host(id), k, kLen);
        ASSERT_TRUE(qp.xmit(id, kLen));
        qp.tx_flush();
        ASSERT_TRUE(wait_until([&] { return port.sent.load(std::memory_order_acquire) == k; }));
        // The round ends (rx would run after tx in it) before the next kick.
        ASSERT_TRUE(wait_until([&] { return ds.rounds.get() >= rounds0 + k; }));
    }
    EXPECT_EQ(dev.stats().tx_kicks.get(), kKicks);
    EXPECT_GE(ds.wakeups.get() - wakeups0, kKicks) << "the worker slept between kicks";
    EXPECT_EQ(ds.rounds.get(), rounds0 + kKicks) << "a round per kick, none for the port";
    EXPECT_EQ(dev.stats().rx_ring_empty.get(), 1u) << "no rx run without guest buffers";
    EXPECT_EQ(dev.stats().rx_port_unwatched.get(), 1u);
    EXPECT_EQ(port.left.load(), kPkts);

    ASSERT_GT(qp.try_fill_recv(), 0u);  // the refill kicks the waiting device
    uint64_t got = 0;
    bool bad = false;
    ASSERT_TRUE(wait_until([&] {
        qp.poll_rx(64, [&](uint32_t, const std::byte* p, uint32_t len) {
            const auto s = check_packet(p, len);
            bad = bad || !s || *s != got;
            ++got;
            return false;
        });
        return got >= kPkts;
    }));
    EXPECT_FALSE(bad);
    EXPECT_EQ(got, kPkts);
    EXPECT_GE(dev.stats().rx_kicks.get(), 1u);
    dev.stop();
}

}  // namespace
}  // namespace pvnet::backend
