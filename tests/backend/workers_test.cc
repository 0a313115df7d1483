// One worker per queue pair (VhostNetOptions::workers = 0, Linux's vhost-net
// device per pair): pairs on their own threads with their own epoll sets,
// traffic on both, a control queue on worker 0 whose NOTF_COAL commands
// reach the other worker's pairs, and control calls while both run. Every
// wait is bounded; no assertion on time.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <stdexcept>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/pair/guest_pair.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using harness::wait_until;
using Dev = VhostNet<harness::FakePort>;

class TwoPairs {
public:
    TwoPairs(uint16_t workers, uint64_t rx_frames) {
        frontend::VirtioNetConfig fc;
        fc.queue_pairs = 2;
        fc.ctrl_vq = true;
        if (auto err = tb_.setup(fc)) throw std::runtime_error(*err);
        for (auto& p : ports_) p.rx_left = rx_frames;  // before start: the worker's from then on
        const std::array<harness::FakePort*, 2> ptrs{&ports_[0], &ports_[1]};
        VhostNetOptions opt;
        opt.workers = workers;
        auto d = Dev::create(opt, std::span<harness::FakePort* const>(ptrs));
        if (!d || !(*d)->configure(tb_.device_setup())) throw std::runtime_error("device");
        dev_ = std::move(*d);
    }
    ~TwoPairs() { dev_->stop(); }

    /// `n` 64-byte packets on pair q's tx ring, then waits until the backend moved them.
    bool send(uint16_t q, uint32_t n) {
        frontend::QueuePair& qp = tb_.qp(q);
        const uint64_t before = dev_->stats(q).tx_pkts.get();
        qp.free_old_xmit();  // the last burst's descriptors, before the ring fills
        if (!harness::xmit_packets(qp, seq_, n)) return false;
        return wait_until([&] { return dev_->stats(q).tx_pkts.get() >= before + n; });
    }

    pair::GuestPair& tb() { return tb_; }
    Dev& dev() { return *dev_; }

private:
    pair::GuestPair tb_;
    std::array<harness::FakePort, 2> ports_;
    std::unique_ptr<Dev> dev_;
    uint64_t seq_ = 0;
};

TEST(Workers, OnePerPairServesEachPairOnItsOwnThread) {
    TwoPairs t(/*workers=*/0, /*rx_frames=*/100);
    Dev& d = t.dev();
    ASSERT_EQ(d.workers(), 2u);
    EXPECT_EQ(d.worker_of(0), 0u);
    EXPECT_EQ(d.worker_of(1), 1u);
    for (uint16_t q = 0; q < 2; ++q) t.tb().qp(q).try_fill_recv();
    d.start();
    // With a control queue the device starts on pair 0 alone (VQ_PAIRS_SET widens it).
    ASSERT_TRUE(t.tb().fe().set_queue_pairs(2).has_value());
    EXPECT_NE(d.native_handle(0), d.native_handle(1));
    for (int round = 0; round < 20; ++round) {
        ASSERT_TRUE(t.send(0, 16));
        ASSERT_TRUE(t.send(1, 16));
    }
    // The ports' frames reached both rx rings, each through its own worker.
    for (uint16_t q = 0; q < 2; ++q) {
        EXPECT_TRUE(wait_until([&] { return d.stats(q).rx_pkts.get() == 100; })) << "pair " << q;
        EXPECT_EQ(d.stats(q).tx_pkts.get(), 320u);
    }
    d.stop();
    EXPECT_FALSE(t.tb().any_broken(d));
}

TEST(Workers, OneWorkerServesBothPairsByDefault) {
    TwoPairs t(/*workers=*/1, 0);
    EXPECT_EQ(t.dev().workers(), 1u);
    EXPECT_EQ(t.dev().worker_of(1), 0u);
    t.dev().start();
    ASSERT_TRUE(t.send(1, 8));
}

// The control queue is worker 0's; pair 1 is worker 1's: the command takes
// worker 1's mutex to reach pair 1's coalescers.
TEST(Workers, CoalescingCommandReachesThePairsOfTheOtherWorker) {
    TwoPairs t(/*workers=*/0, 0);
    Dev& d = t.dev();
    d.start();
    ASSERT_TRUE(t.send(1, 8));  // worker 1 busy once, then asleep: the command must wake it
    const auto st = t.tb().fe().set_coalesce({8, 0}, {16, 50});
    ASSERT_TRUE(st.has_value()) << static_cast<int>(st.error());
    EXPECT_EQ(d.device_stats().coalesce_updates.get(), 2u);
    d.stop();
    for (uint16_t q = 0; q < 2; ++q) {
        EXPECT_EQ(d.rx_coalescer(q).params(), (notify::CoalesceParams{8, 0})) << "pair " << q;
        EXPECT_EQ(d.tx_coalescer(q).params(), (notify::CoalesceParams{16, 50})) << "pair " << q;
    }
}

TEST(Workers, MailboxCoalescingReachesEveryWorker) {
    TwoPairs t(/*workers=*/0, 0);
    Dev& d = t.dev();
    d.start();
    d.set_coalesce({4, 10}, {32, 20});
    // Each worker takes the message at the top of its loop; a send through
    // each pair proves its worker has gone round since.
    ASSERT_TRUE(t.send(0, 1));
    ASSERT_TRUE(t.send(1, 1));
    d.stop();
    EXPECT_EQ(d.device_stats().coalesce_updates.get(), 1u);
    for (uint16_t q = 0; q < 2; ++q) {
        EXPECT_EQ(d.tx_coalescer(q).params(), (notify::CoalesceParams{32, 20})) << "pair " << q;
    }
}

// Control calls take both workers' mutexes while both run traffic: stop and
// restart pair 1's tx vring many times, pair 0 sending throughout.
TEST(Workers, ControlCallsWhileBothWorkersRun) {
    TwoPairs t(/*workers=*/0, 0);
    Dev& d = t.dev();
    d.start();
    for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE(t.send(0, 4));
        const auto base = d.stop_vring(tx_vring(1));
        ASSERT_TRUE(base.has_value());
        EXPECT_FALSE(d.vring_started(tx_vring(1)));
        ASSERT_TRUE(d.start_vring(tx_vring(1)).has_value());
        ASSERT_TRUE(t.send(1, 4));
    }
    EXPECT_GE(d.device_stats().control_ops.get(), 100u);
}

}  // namespace
}  // namespace pvnet::backend
