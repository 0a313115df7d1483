// SplitDeviceQueue's notification decisions with a well-behaved driver
// (VIRTIO 1.2 2.7.7 "Used Buffer Notification Suppression", 2.7.10
// "Available Buffer Notification Suppression"; Linux vhost_notify /
// vhost_enable_notify): should_signal with and without EVENT_IDX and
// NOTIFY_ON_EMPTY, and disable/enable_notify, on a RingBuilder ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_ring.h"
#include "ring_builder.h"

namespace pvnet::ring {
namespace {

using test::QueueFeatures;
using test::RingBuilder;
using virtio::VIRTQ_AVAIL_F_NO_INTERRUPT;
using virtio::VIRTQ_USED_F_NO_NOTIFY;

// ---- should_signal --------------------------------------------------------------

struct SignalRig {
    explicit SignalRig(QueueFeatures f, uint16_t size = 8) : rb(size), q(rb.make_device(f)) {}

    /// Makes `n` one-buffer chains available, pops them, returns heads.
    std::vector<uint16_t> pop_n(uint16_t n) {
        std::vector<uint16_t> heads;
        for (uint16_t i = 0; i < n; ++i) rb.add_chain({}, {buf});
        for (uint16_t i = 0; i < n; ++i) {
            EXPECT_EQ(q->pop(*chain), PopStatus::Ok);
            heads.push_back(chain->head);
        }
        return heads;
    }
    void push_all(const std::vector<uint16_t>& heads) {
        std::vector<UsedElem> e;
        for (uint16_t h : heads) e.push_back(UsedElem{h, 0});
        EXPECT_TRUE(q->push_used_batch(e).has_value());
    }

    RingBuilder rb;
    std::unique_ptr<SplitDeviceQueue> q;
    std::unique_ptr<DescChain> chain = std::make_unique<DescChain>();
    Buf buf = rb.alloc_buf(64);
};

TEST(DeviceQueueSignal, WithoutEventIdxHonoursNoInterrupt) {
    SignalRig r(QueueFeatures{});
    r.push_all(r.pop_n(1));
    EXPECT_TRUE(r.q->should_signal());
    r.rb.set_avail_flags(VIRTQ_AVAIL_F_NO_INTERRUPT);
    r.push_all(r.pop_n(1));
    EXPECT_FALSE(r.q->should_signal());
    r.rb.set_avail_flags(0);
    r.push_all(r.pop_n(2));
    EXPECT_TRUE(r.q->should_signal());
    // used_event means nothing without EVENT_IDX.
    r.rb.set_used_event(1000);
    r.push_all(r.pop_n(1));
    EXPECT_TRUE(r.q->should_signal());
    EXPECT_EQ(r.q->stats().signals_needed.get(), 3u);
    EXPECT_EQ(r.q->stats().signals_suppressed.get(), 1u);
}

// Against a brute-force model: signal iff some used.idx value in
// [old, new) equals used_event, for bursts of 1..4 and used_event placed
// from 3 behind to 5 ahead, over more than one 16-bit wrap. NO_INTERRUPT
// is set throughout and must be ignored.
TEST(DeviceQueueSignal, WithEventIdxSignalsExactlyWhenUsedIdxCrossesUsedEvent) {
    SignalRig r(QueueFeatures{.event_idx = true});
    r.rb.set_avail_flags(VIRTQ_AVAIL_F_NO_INTERRUPT);
    r.rb.set_used_event(0);
    r.push_all(r.pop_n(1));
    EXPECT_TRUE(r.q->should_signal());  // nothing signalled yet: always
    uint16_t used = 1;
    uint32_t rounds = 0;
    uint64_t yes = 0;
    uint64_t no = 0;
    for (uint32_t total = 1; total < 70000; ++rounds) {
        const auto n = static_cast<uint16_t>(1 + rounds % 4);
        const int delta = static_cast<int>(rounds % 9) - 3;
        const auto event = static_cast<uint16_t>(used + delta);
        r.rb.set_used_event(event);
        r.push_all(r.pop_n(n));
        bool model = false;
        for (uint16_t k = 0; k < n; ++k) model |= static_cast<uint16_t>(used + k) == event;
        used = static_cast<uint16_t>(used + n);
        total += n;
        ASSERT_EQ(r.q->should_signal(), model) << "used " << used << " event " << event;
        (model ? yes : no) += 1;
        // Asking again with nothing new published: no second interrupt.
        if (rounds % 5 == 0) {
            ASSERT_FALSE(r.q->should_signal());
        }
    }
    EXPECT_GT(yes, 1000u);
    EXPECT_GT(no, 1000u);
}

/// Pops and uses `total` chains in bursts of up to 8 with no signal decision
/// (coalescing deferring it); `at_200` runs once 200 are used.
template <typename F>
void push_without_decision(SignalRig& r, uint32_t total, F&& at_200) {
    for (uint32_t pushed = 0; pushed < total;) {
        const auto n = static_cast<uint16_t>(std::min<uint32_t>(8, total - pushed));
        r.push_all(r.pop_n(n));
        pushed += n;
        if (pushed == 200) at_200();
    }
}

// A deferred decision after used.idx moved 2^16 or more since the last one:
// the record (signalled_used) names an index the ring has passed again, and
// need_event's [old, new) window, at most 2^16 - 1 wide, no longer shows
// that used_event was crossed. The device forgets the record as
// vhost_add_used_n does, so the decision signals; otherwise a driver that
// re-armed during the burst and went to sleep waits forever.
TEST(DeviceQueueSignal, SignalsAfterUsedIdxMovesTwoToTheSixteenWithoutADecision) {
    for (const uint32_t extra : {0u, 1u, 100u}) {
        SCOPED_TRACE(extra);
        SignalRig r(QueueFeatures{.event_idx = true});
        r.push_all(r.pop_n(1));
        ASSERT_TRUE(r.q->should_signal());  // the record: used.idx 1
        // The driver reaps 200 entries, re-arms used_event there, sleeps.
        push_without_decision(r, 65536u + extra, [&] { r.rb.set_used_event(201); });
        EXPECT_TRUE(r.q->should_signal());
        EXPECT_FALSE(r.q->should_signal()) << "a fresh record: nothing new since";
    }
}

// ... but not sooner: 65535 entries keep the record, and a used_event the
// window does not hold (reached, not passed) is still no interrupt.
TEST(DeviceQueueSignal, KeepsTheRecordWhileUsedIdxMovesLessThanTwoToTheSixteen) {
    SignalRig r(QueueFeatures{.event_idx = true});
    r.push_all(r.pop_n(1));
    ASSERT_TRUE(r.q->should_signal());
    r.rb.set_used_event(0);  // 1 + 65535 = 0 mod 2^16: reached at the end, not passed
    push_without_decision(r, 65535, [] {});
    EXPECT_EQ(r.q->used_idx(), RingIdx(0));
    EXPECT_FALSE(r.q->should_signal());
}

TEST(DeviceQueueSignal, NotifyOnEmptyForcesSignalWhenRingRunsDry) {
    SignalRig r(QueueFeatures{.notify_on_empty = true});
    r.rb.set_avail_flags(VIRTQ_AVAIL_F_NO_INTERRUPT);
    r.rb.add_chain({}, {r.buf});
    r.rb.add_chain({}, {r.buf});
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    r.push_all({r.chain->head});
    EXPECT_FALSE(r.q->should_signal()) << "one chain still available";
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    r.push_all({r.chain->head});
    EXPECT_TRUE(r.q->should_signal()) << "ran dry: NOTIFY_ON_EMPTY overrides NO_INTERRUPT";
}

TEST(DeviceQueueSignal, NotifyOnEmptyOverridesUsedEventWithEventIdx) {
    SignalRig r(QueueFeatures{.event_idx = true, .notify_on_empty = true});
    r.push_all(r.pop_n(1));
    EXPECT_TRUE(r.q->should_signal());
    r.rb.set_used_event(1000);  // far ahead: no interrupt wanted yet
    r.rb.add_chain({}, {r.buf});
    r.rb.add_chain({}, {r.buf});
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    r.push_all({r.chain->head});
    EXPECT_FALSE(r.q->should_signal());
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    r.push_all({r.chain->head});
    EXPECT_TRUE(r.q->should_signal());
}

TEST(DeviceQueueSignal, WithoutNotifyOnEmptyADryRingStaysSuppressed) {
    SignalRig r(QueueFeatures{});
    r.rb.set_avail_flags(VIRTQ_AVAIL_F_NO_INTERRUPT);
    r.push_all(r.pop_n(2));
    EXPECT_FALSE(r.q->should_signal());
}

// ---- disable_notify / enable_notify ---------------------------------------------

TEST(DeviceQueueNotify, DisableSetsNoNotifyWithoutEventIdx) {
    SignalRig r(QueueFeatures{});
    EXPECT_EQ(r.rb.used_flags(), 0);
    r.q->disable_notify();
    EXPECT_EQ(r.rb.used_flags(), VIRTQ_USED_F_NO_NOTIFY);
}

TEST(DeviceQueueNotify, DisableLeavesFlagsAndAvailEventWithEventIdx) {
    SignalRig r(QueueFeatures{.event_idx = true});
    r.pop_n(3);
    EXPECT_FALSE(r.q->enable_notify());
    ASSERT_EQ(r.rb.avail_event(), 3);
    r.q->disable_notify();
    EXPECT_EQ(r.rb.used_flags(), 0);
    EXPECT_EQ(r.rb.avail_event(), 3);
}

TEST(DeviceQueueNotify, EnableClearsNoNotifyAndReportsNothingNew) {
    SignalRig r(QueueFeatures{});
    r.pop_n(2);
    r.q->disable_notify();
    EXPECT_FALSE(r.q->enable_notify());
    EXPECT_EQ(r.rb.used_flags(), 0);
    EXPECT_EQ(r.q->stats().notify_rechecks.get(), 0u);
}

TEST(DeviceQueueNotify, EnableWritesAvailEventAtLastAvailIdxWithEventIdx) {
    SignalRig r(QueueFeatures{.event_idx = true});
    r.rb.set_avail_event(0xbeef);
    EXPECT_FALSE(r.q->enable_notify());
    EXPECT_EQ(r.rb.avail_event(), 0);
    r.pop_n(5);
    EXPECT_FALSE(r.q->enable_notify());
    EXPECT_EQ(r.rb.avail_event(), 5);
    EXPECT_EQ(r.rb.used_flags(), 0);
    // Seen but not yet popped: avail_event stays at the first unpopped
    // index (not the observed avail.idx), and there is work to do.
    r.rb.add_chain({}, {r.buf});
    r.rb.add_chain({}, {r.buf});
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    EXPECT_TRUE(r.q->enable_notify());
    EXPECT_EQ(r.rb.avail_event(), 6);
}

// The driver publishes after the device's last empty pop but before it
// re-arms: enable_notify must notice, or the buffer waits for a kick the
// driver suppressed.
TEST(DeviceQueueNotify, EnableReportsBufferSlippedInWithoutEventIdx) {
    SignalRig r(QueueFeatures{});
    r.pop_n(1);
    r.q->disable_notify();
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Empty);
    r.rb.add_chain({}, {r.buf});
    EXPECT_TRUE(r.q->enable_notify());
    EXPECT_EQ(r.rb.used_flags(), 0);
    EXPECT_EQ(r.q->stats().notify_rechecks.get(), 1u);
    EXPECT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    EXPECT_FALSE(r.q->enable_notify());
}

TEST(DeviceQueueNotify, EnableReportsBufferSlippedInWithEventIdx) {
    SignalRig r(QueueFeatures{.event_idx = true});
    r.pop_n(2);
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Empty);
    r.rb.add_chain({}, {r.buf});
    EXPECT_TRUE(r.q->enable_notify());
    EXPECT_EQ(r.rb.avail_event(), 2);
    EXPECT_EQ(r.q->stats().notify_rechecks.get(), 1u);
    ASSERT_EQ(r.q->pop(*r.chain), PopStatus::Ok);
    EXPECT_FALSE(r.q->enable_notify());
    EXPECT_EQ(r.rb.avail_event(), 3);
}

}  // namespace
}  // namespace pvnet::ring
