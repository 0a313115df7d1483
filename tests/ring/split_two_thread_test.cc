// Driver and device of one split virtqueue on two threads, sharing one
// MemoryRegion, with real eventfd kicks and calls (STYLE.md §11
// "Concurrency"); the harness is two_thread_harness.h. Millions of buffers
// wrap the 16-bit indices many times; every byte crossing the ring is checked
// on both sides; every sleep is bounded, and a sleeper that times out while
// the peer has published work for it is a LOST WAKEUP. The lost-wakeup test
// races "device disables, driver publishes one buffer, device re-arms" across
// threads, after the idea of test_no_lost_kicks in rust-vmm/vhost
// vhost-user-backend handler.rs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "ring_builder.h"
#include "two_thread_harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PVNET_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PVNET_TEST_SANITIZED 1
#endif
#endif

namespace pvnet::ring::two_thread {
namespace {

/// Buffers for the bulk test: >= 10M in optimised builds, 1M under
/// -O0, 250k under ASan or TSan. PVNET_TWO_THREAD_BUFFERS overrides (development).
uint64_t bulk_buffers() {
    if (const char* s = std::getenv("PVNET_TWO_THREAD_BUFFERS")) {
        return std::strtoull(s, nullptr, 10);
    }
#if defined(PVNET_TEST_SANITIZED)
    return 250'000;  // still ~1000 ring wraps per variant
#elif !defined(NDEBUG)
    return 1'000'000;
#else
    return 10'000'000;
#endif
}

uint64_t lost_wakeup_iterations() {
#if defined(PVNET_TEST_SANITIZED) || !defined(NDEBUG)
    return 20'000;
#else
    return 100'000;
#endif
}

std::string param_name(const testing::TestParamInfo<Params>& info) {
    return std::string(info.param.event_idx ? "EventIdx" : "NoEventIdx") +
           (info.param.indirect ? "Indirect" : "Direct");
}

double pct(uint64_t part, uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// ---------------------------------------------------------------------------
// Bulk: millions of buffers, both sides batching, real notifications.
// ---------------------------------------------------------------------------
class SplitTwoThread : public testing::TestWithParam<Params> {};

TEST_P(SplitTwoThread, DeliversEveryBufferWithCheckedBytesAndFewNotifications) {
    const Params p = GetParam();
    SharedRing ring(p);
    const std::string err = ring.setup();
    ASSERT_EQ(err, "");
    const uint64_t total = bulk_buffers();
    ASSERT_GT(total, 0u);

    Device device(ring, total, 0);
    Driver driver(ring, total, kRingSize, 0);
    const auto t0 = Clock::now();
    std::thread dev_thread([&] { device.run(); });
    driver.run();
    dev_thread.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

    const DriverCounts& dc = driver.counts();
    const DeviceCounts& vc = device.counts();
    std::printf("[ two-thread ] event_idx=%d indirect=%d buffers=%" PRIu64 " (%.2f s, %.0f ns/buf)"
                " kicks=%" PRIu64 " (%.3f%%) interrupts=%" PRIu64 " (%.3f%%)\n"
                "[ two-thread ]   device sleeps=%" PRIu64 " rechecks=%" PRIu64
                " idle_timeouts=%" PRIu64 " | driver sleeps=%" PRIu64 " rechecks=%" PRIu64
                " idle_timeouts=%" PRIu64 " | kicks_suppressed=%" PRIu64
                " signals_suppressed=%" PRIu64 " index wraps=%" PRIu64 "\n",
                p.event_idx, p.indirect, dc.reaped, secs,
                secs * 1e9 / static_cast<double>(dc.reaped ? dc.reaped : 1), dc.kicks,
                pct(dc.kicks, dc.reaped), vc.interrupts, pct(vc.interrupts, dc.reaped), vc.sleeps,
                vc.rechecks, vc.idle_timeouts, dc.sleeps, dc.rechecks, dc.idle_timeouts,
                ring.driver_->stats().kicks_suppressed.get(),
                ring.device_->stats().signals_suppressed.get(), dc.reaped >> 16);
    std::fflush(stdout);
    RecordProperty("buffers", std::to_string(dc.reaped));
    RecordProperty("kicks", std::to_string(dc.kicks));
    RecordProperty("interrupts", std::to_string(vc.interrupts));

    ASSERT_FALSE(ring.failure_.failed()) << ring.failure_.message();
    EXPECT_EQ(dc.added, total);
    EXPECT_EQ(dc.reaped, total);
    EXPECT_EQ(vc.buffers, total);
    EXPECT_FALSE(ring.driver_->broken());
    EXPECT_FALSE(ring.device_->broken());
    EXPECT_EQ(ring.driver_->stats().errors.total(), 0u);
    EXPECT_EQ(ring.device_->stats().errors.total(), 0u);
    EXPECT_EQ(ring.driver_->in_flight(), 0u);
    EXPECT_EQ(ring.driver_->num_free(), kRingSize);
    if (p.event_idx) {
        // EVENT_IDX: the peer is notified at most once per pass over its
        // event index, so notifications are a small fraction of buffers.
        EXPECT_LT(dc.kicks * 10, total) << "kicks not suppressed by EVENT_IDX";
        EXPECT_LT(vc.interrupts * 10, total) << "interrupts not suppressed by EVENT_IDX";
    }
}

INSTANTIATE_TEST_SUITE_P(Split, SplitTwoThread,
                         testing::Values(Params{false, false}, Params{true, false},
                                         Params{false, true}, Params{true, true}),
                         param_name);

// ---------------------------------------------------------------------------
// Lost wakeups: one buffer at a time, published exactly while the device
// goes from "notifications disabled" to "re-armed", over and over.
// ---------------------------------------------------------------------------
class SplitLostWakeup : public testing::TestWithParam<Params> {};

TEST_P(SplitLostWakeup, DisablePublishEnableNeverLosesAKick) {
    const Params p = GetParam();
    SharedRing ring(p);
    const std::string err = ring.setup();
    ASSERT_EQ(err, "");
    const uint64_t iters = lost_wakeup_iterations();

    // Each iteration: the device disables notifications and announces it;
    // the driver, spinning on that announcement, publishes one buffer after a
    // random skew while the device, after its own random delay, re-arms
    // (enable_notify) and either finds the buffer in the recheck or sleeps
    // on the kick fd. The publish lands before the device's first pop, inside
    // the re-arm window, or after it; in no case may the kick be lost.
    std::atomic<uint64_t> device_disabled{0};
    Device device(ring, iters, 8192);
    Driver driver(ring, iters, 1, 8192);
    Jitter skew(0x5EED, 2048);
    Jitter long_budget(0xB0D6E7, 1u << 16);  // driver mostly polls: races the device's re-arm
    Jitter short_budget(0x5B0D6E, 1u << 8);   // driver soon re-arms: races the device's push
    uint64_t found_at_first_pop = 0;

    std::thread dev_thread([&] {
        SplitDeviceQueue& q = device.queue();
        for (uint64_t i = 0; i < iters; ++i) {
            q.disable_notify();
            device_disabled.store(i + 1, std::memory_order_release);
            PopStatus st = q.pop(device.chain());
            if (st == PopStatus::Ok) ++found_at_first_pop;
            while (st == PopStatus::Empty) {
                if (!device.idle()) return;  // re-arm, recheck, maybe sleep
                st = q.pop(device.chain());
            }
            if (st == PopStatus::Broken) return device.fail_broken();
            if (!device.serve()) return;
            q.flush_used();
            if (q.should_signal()) device.signal_call();
        }
    });

    for (uint64_t i = 0; i < iters && !ring.failure_.failed(); ++i) {
        // Spin (bounded) until the device has disabled notifications.
        for (uint32_t n = 0; device_disabled.load(std::memory_order_acquire) <= i; ++n) {
            if (n % 4096 == 4095) {
                if (ring.failure_.failed()) break;
                if (Clock::now() > ring.deadline_) {
                    driver.fail("driver: deadline waiting for the device");
                    break;
                }
                std::this_thread::yield();
            }
        }
        if (ring.failure_.failed()) break;
        skew();
        if (driver.add_burst() != 1) {
            driver.fail(fmt("driver: could not add buffer %" PRIu64, i));
            break;
        }
        // Wait for it: poll a random while, then re-arm and sleep on the call
        // fd. A long poll keeps the driver on-CPU, ready to publish inside the
        // device's re-arm window; a short one puts the driver's own re-arm
        // (enable_cb) where the device's push and signal decision can race it.
        const uint64_t budget = (i % 2 == 0 ? long_budget : short_budget).next();
        for (uint64_t n = 0; driver.counts().reaped <= i && !ring.failure_.failed(); ++n) {
            if (driver.reap() > 0) break;
            if (n >= budget && !driver.idle()) break;
        }
    }
    dev_thread.join();

    const DriverCounts& dc = driver.counts();
    const DeviceCounts& vc = device.counts();
    std::printf("[ lost-wakeup ] event_idx=%d iterations=%" PRIu64 " | device: found at first "
                "pop=%" PRIu64 " found by re-arm recheck=%" PRIu64 " slept=%" PRIu64
                " kicks=%" PRIu64 " | driver: rechecks=%" PRIu64 " slept=%" PRIu64
                " interrupts=%" PRIu64 "\n",
                p.event_idx, iters, found_at_first_pop, vc.rechecks, vc.sleeps, dc.kicks,
                dc.rechecks, dc.sleeps, vc.interrupts);
    std::fflush(stdout);
    RecordProperty("device_sleeps", std::to_string(vc.sleeps));
    RecordProperty("device_rechecks", std::to_string(vc.rechecks));

    ASSERT_FALSE(ring.failure_.failed()) << ring.failure_.message();
    EXPECT_EQ(dc.reaped, iters);
    EXPECT_EQ(vc.buffers, iters);
    EXPECT_FALSE(ring.driver_->broken());
    EXPECT_FALSE(ring.device_->broken());
    EXPECT_EQ(ring.device_->stats().errors.total(), 0u);
    EXPECT_EQ(ring.driver_->stats().errors.total(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Split, SplitLostWakeup,
                         testing::Values(Params{false, false}, Params{true, false}), param_name);

// ---------------------------------------------------------------------------
// The same windows, forced in one thread: a publish between disable and
// re-arm is found by the recheck, on both sides.
// ---------------------------------------------------------------------------
class SplitRearm : public testing::TestWithParam<Params> {};

TEST_P(SplitRearm, RecheckFindsWorkPublishedWhileDisabled) {
    SharedRing ring(GetParam());
    const std::string err = ring.setup();
    ASSERT_EQ(err, "");
    SplitDriverQueue& drv = *ring.driver_;
    SplitDeviceQueue& dev = *ring.device_;
    auto chain = std::make_unique<DescChain>();
    const Buf out[1] = {{SharedRing::gpa(kDataOff), kReqBytes}};
    const Buf in[1] = {{SharedRing::gpa(kDataOff + kReqBytes), kRespBytes}};

    // Armed device: the first buffer is kicked.
    EXPECT_FALSE(dev.enable_notify());
    ASSERT_EQ(drv.add(out, in, 1), AddStatus::Ok);
    EXPECT_TRUE(drv.kick_prepare());
    ASSERT_EQ(dev.pop(*chain), PopStatus::Ok);
    ASSERT_TRUE(dev.push_used(chain->head, 0));
    EXPECT_EQ(dev.pop(*chain), PopStatus::Empty);

    // Device disables; driver publishes without a kick; re-arm must see it.
    dev.disable_notify();
    ASSERT_EQ(drv.add(out, in, 2), AddStatus::Ok);
    EXPECT_FALSE(drv.kick_prepare());
    EXPECT_TRUE(dev.enable_notify()) << "buffer published while disabled was missed";
    ASSERT_EQ(dev.pop(*chain), PopStatus::Ok);

    // Driver side: armed driver is interrupted; disabled is not; re-arm sees it.
    UsedBuf u;
    ASSERT_TRUE(drv.get_used(u));
    EXPECT_EQ(u.token, 1u);
    EXPECT_TRUE(drv.enable_cb());
    ASSERT_TRUE(dev.push_used(chain->head, 0));
    EXPECT_TRUE(dev.should_signal());
    ASSERT_TRUE(drv.get_used(u));
    EXPECT_EQ(u.token, 2u);

    // Disabled: without EVENT_IDX no interrupt at all; with it, at most the
    // one for crossing the used_event left behind (as disable_cb documents).
    drv.disable_cb();
    const Buf out2[1] = {{SharedRing::gpa(kDataOff + kSlotBytes), kReqBytes}};
    const Buf in2[1] = {{SharedRing::gpa(kDataOff + kSlotBytes + kReqBytes), kRespBytes}};
    ASSERT_EQ(drv.add(out, in, 3), AddStatus::Ok);
    ASSERT_EQ(drv.add(out2, in2, 4), AddStatus::Ok);
    drv.kick_prepare();
    auto chain2 = std::make_unique<DescChain>();
    ASSERT_EQ(dev.pop(*chain), PopStatus::Ok);
    ASSERT_EQ(dev.pop(*chain2), PopStatus::Ok);
    ASSERT_TRUE(dev.push_used(chain->head, 0));
    const bool first = dev.should_signal();
    if (!GetParam().event_idx) {
        EXPECT_FALSE(first) << "interrupt sent with NO_INTERRUPT set";
    }
    ASSERT_TRUE(dev.push_used(chain2->head, 0));
    EXPECT_FALSE(dev.should_signal()) << "interrupt sent while the driver disabled them";
    EXPECT_FALSE(drv.enable_cb()) << "used entries published while disabled were missed";
    ASSERT_TRUE(drv.get_used(u));
    EXPECT_EQ(u.token, 3u);
    ASSERT_TRUE(drv.get_used(u));
    EXPECT_EQ(u.token, 4u);
}

INSTANTIATE_TEST_SUITE_P(Split, SplitRearm,
                         testing::Values(Params{false, false}, Params{true, false}), param_name);

// ---------------------------------------------------------------------------
// A stats thread reads broken() / broken_reason() while the owner breaks and
// resets its queues: one relaxed atomic per queue, so no data race (TSan
// reports one if the state goes back to plain fields) and never "broken"
// without its reason.
// ---------------------------------------------------------------------------
TEST(SplitBrokenState, ReadableFromAnotherThreadWhileTheOwnerChangesIt) {
    test::RingBuilder dev_ring(8);
    test::RingBuilder drv_ring(8);
    auto dev = dev_ring.make_device();
    auto drv = drv_ring.make_driver();
    auto chain = std::make_unique<DescChain>();
    const Buf b = dev_ring.alloc_buf(64);

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> seen_broken{0};
    std::atomic<uint64_t> inconsistent{0};
    std::thread stats([&] {
        while (!stop.load(std::memory_order_acquire)) {
            const RingError d = dev->broken_reason();
            if (dev->broken()) seen_broken.fetch_add(1, std::memory_order_relaxed);
            if (d != RingError::Count && d != RingError::HeadOutOfRange) {
                inconsistent.fetch_add(1, std::memory_order_relaxed);
            }
            const RingError r = drv->broken_reason();
            if (r != RingError::Count && r != RingError::UsedIdxJump) {
                inconsistent.fetch_add(1, std::memory_order_relaxed);
            }
            (void)drv->broken();
        }
    });

    constexpr int kRounds = 2000;
    for (int i = 0; i < kRounds; ++i) {
        const uint16_t head = dev_ring.add_chain({}, {b});
        ASSERT_EQ(dev->pop(*chain), PopStatus::Ok);
        ASSERT_TRUE(dev->push_used(head, 0).has_value());
        // A head out of range breaks the queue; the driver's reset clears it.
        dev_ring.set_avail_slot(dev_ring.next_avail().slot(8), 8);
        dev_ring.set_avail_idx(static_cast<uint16_t>(dev_ring.next_avail().value() + 1));
        ASSERT_EQ(dev->pop(*chain), PopStatus::Broken);
        ASSERT_EQ(dev->broken_reason(), RingError::HeadOutOfRange);
        dev->reset();
        dev_ring.clear_ring();
    }
    // The driver side breaks once: used.idx past what was published.
    const Buf out[] = {drv_ring.alloc_buf(16)};
    ASSERT_EQ(drv->add(out, {}, 1), AddStatus::Ok);
    drv->publish();
    drv_ring.set_used_idx(5);
    UsedBuf u;
    EXPECT_FALSE(drv->get_used(u));
    EXPECT_EQ(drv->broken_reason(), RingError::UsedIdxJump);

    stop.store(true, std::memory_order_release);
    stats.join();
    EXPECT_EQ(inconsistent.load(), 0u);
    EXPECT_FALSE(dev->broken());
    EXPECT_TRUE(drv->broken());
    std::printf("stats thread saw the device queue broken %" PRIu64 " times in %d rounds\n",
                seen_broken.load(), kRounds);
}

}  // namespace
}  // namespace pvnet::ring::two_thread
