// SplitDriverQueue's notification suppression (VIRTIO 1.2 2.7.7 / 2.7.10):
// the kick decision against avail_event or USED_F_NO_NOTIFY, and interrupt
// enable/disable through used_event or AVAIL_F_NO_INTERRUPT, read back raw
// (split_fixture.h).
#include <gtest/gtest.h>

#include "split_fixture.h"

namespace pvnet::ring::driver_fixture {
namespace {

// ---------------------------------------------------------------- kick

TEST_P(DriverQueueTest, KickPrepareReturnsFalseWhenNothingNewIsPublished) {
    make(8);
    const Buf out[] = {buf(0, 8)};
    device_wants_kick_after(0);
    ASSERT_EQ(drv_->add(out, {}, 0), AddStatus::Ok);
    EXPECT_TRUE(drv_->kick_prepare());
    EXPECT_FALSE(drv_->kick_prepare());
    drv_->publish();
    EXPECT_FALSE(drv_->kick_prepare());
    // Published by publish() alone is still new to the next kick decision.
    device_wants_kick_after(1);
    ASSERT_EQ(drv_->add(out, {}, 1), AddStatus::Ok);
    drv_->publish();
    EXPECT_TRUE(drv_->kick_prepare());
    EXPECT_FALSE(drv_->kick_prepare());
    EXPECT_EQ(drv_->stats().kicks_needed.get(), 2u);
}

TEST_P(DriverQueueFlagsTest, KickPrepareHonoursUsedNoNotify) {
    make(8);
    const Buf out[] = {buf(0, 8)};
    guest_->set_avail_event(1000);  // ignored without EVENT_IDX
    ASSERT_EQ(drv_->add(out, {}, 0), AddStatus::Ok);
    EXPECT_TRUE(drv_->kick_prepare());
    guest_->set_used_flags(VIRTQ_USED_F_NO_NOTIFY);
    ASSERT_EQ(drv_->add(out, {}, 1), AddStatus::Ok);
    EXPECT_FALSE(drv_->kick_prepare());
    EXPECT_EQ(guest_->avail_idx(), 2);  // suppressed, still published
    guest_->set_used_flags(0);
    ASSERT_EQ(drv_->add(out, {}, 2), AddStatus::Ok);
    EXPECT_TRUE(drv_->kick_prepare());
    EXPECT_EQ(drv_->stats().kicks_needed.get(), 2u);
    EXPECT_EQ(drv_->stats().kicks_suppressed.get(), 1u);
}

TEST_P(DriverQueueEventIdxTest, KickPrepareKicksExactlyWhenAvailIdxCrossesAvailEvent) {
    // One chain per kick decision: a kick exactly on the step idx goes E -> E+1.
    for (uint16_t event = 0; event < 7; ++event) {
        make(8);
        guest_->set_avail_event(event);
        guest_->set_used_flags(VIRTQ_USED_F_NO_NOTIFY);  // ignored with EVENT_IDX
        const Buf out[] = {buf(0, 8)};
        for (uint16_t step = 1; step <= 6; ++step) {
            ASSERT_EQ(drv_->add(out, {}, step), AddStatus::Ok);
            EXPECT_EQ(drv_->kick_prepare(), step - 1 == event)
                << "avail_event " << event << " idx " << step - 1 << "->" << step;
        }
    }
    // Batches: 0 -> 3 -> 6 kicks iff avail_event lies in the batch's [old, new).
    for (uint16_t event = 0; event < 7; ++event) {
        make(8);
        guest_->set_avail_event(event);
        const Buf out[] = {buf(0, 8)};
        for (uint16_t batch = 0; batch < 2; ++batch) {
            for (int k = 0; k < 3; ++k) ASSERT_EQ(drv_->add(out, {}, 0), AddStatus::Ok);
            const bool want = event >= 3 * batch && event < 3 * batch + 3;
            EXPECT_EQ(drv_->kick_prepare(), want) << "avail_event " << event << " batch " << batch;
        }
    }
}

/// Cycles `n` one-buffer chains through the ring (add, publish, the device
/// pops and uses it, reap) without a kick decision: a caller that publishes
/// and never kicks because the device is seen to keep up.
void cycle_without_kick(SplitDriverQueue& drv, SplitDeviceQueue& dev, DescChain& chain,
                        uint32_t n) {
    const Buf out[] = {buf(0, 8)};
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(drv.add(out, {}, i), AddStatus::Ok) << i;
        drv.publish();
        ASSERT_EQ(dev.pop(chain), PopStatus::Ok) << i;
        ASSERT_TRUE(dev.push_used(chain.head, 0).has_value()) << i;
        UsedBuf u;
        ASSERT_TRUE(drv.get_used(u)) << i;
    }
}

// need_event's [old, new) window holds at most 2^16 - 1 indices, so Linux's
// virtqueue_add_split runs a kick decision before num_added reaches 2^16.
// pvnet's add() has no doorbell: after 2^16 or more chains published with no
// kick decision, the next kick_prepare kicks whatever avail_event says (and,
// without EVENT_IDX, does not take "avail.idx is back where it was" for
// "nothing new"). Otherwise a device asleep on an avail_event crossed a lap
// ago never wakes.
TEST_P(DriverQueueTest, KickPrepareKicksAfterTwoToTheSixteenChainsWithoutADecision) {
    for (const uint32_t extra : {0u, 1u, 50u}) {
        SCOPED_TRACE(extra);
        make(8);
        device_wants_kick_after(100);  // crossed in the first lap
        SplitDeviceQueue& dev = device();
        cycle_without_kick(*drv_, dev, *chain_, 65536u + extra);
        EXPECT_TRUE(drv_->kick_prepare());
        EXPECT_FALSE(drv_->kick_prepare()) << "nothing new since";
        // Counting starts again from the decision: back to need_event.
        device_wants_kick_after(static_cast<uint16_t>(65536u + extra + 5u));
        cycle_without_kick(*drv_, dev, *chain_, 2);
        EXPECT_EQ(drv_->kick_prepare(), !GetParam().event_idx);
    }
}

// Below the limit the decision stays exact: 65534 chains, avail_event at the
// new avail.idx (reached, not passed) is no kick.
TEST_P(DriverQueueEventIdxTest, KickPrepareStaysExactBelowTheAddLimit) {
    make(8);
    device_wants_kick_after(65534);
    SplitDeviceQueue& dev = device();
    cycle_without_kick(*drv_, dev, *chain_, 65534);
    EXPECT_FALSE(drv_->kick_prepare());
    EXPECT_EQ(drv_->stats().kicks_suppressed.get(), 1u);
}

// ---------------------------------------------------------------- interrupts

TEST_P(DriverQueueTest, EnableCbReturnsFalseWhileUsedEntriesArePending) {
    make(8);
    const Buf in[] = {buf(0, 64)};
    ASSERT_EQ(drv_->add({}, in, 1), AddStatus::Ok);
    ASSERT_EQ(drv_->add({}, in, 2), AddStatus::Ok);
    (void)drv_->kick_prepare();
    const uint16_t h1 = pop_head();
    const uint16_t h2 = pop_head();

    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb());  // nothing used yet: safe to sleep
    ASSERT_TRUE(device().push_used(h1, 64));
    drv_->disable_cb();
    EXPECT_FALSE(drv_->enable_cb());  // one pending: keep polling
    EXPECT_EQ(drv_->stats().cb_rechecks.get(), 1u);
    UsedBuf u;
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 1u);
    EXPECT_TRUE(drv_->enable_cb());

    // enable_cb_prepare + poll: the split form of the same decision.
    const RingIdx at = drv_->enable_cb_prepare();
    EXPECT_EQ(at, RingIdx(1));
    EXPECT_FALSE(drv_->poll(at));
    ASSERT_TRUE(device().push_used(h2, 3));
    EXPECT_TRUE(drv_->poll(at));
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 2u);
    EXPECT_FALSE(drv_->poll(drv_->enable_cb_prepare()));
}

TEST_P(DriverQueueTest, EnableCbDelayedReturnsFalseOnceThreeQuartersAreUsed) {
    make(8);
    const Buf in[] = {buf(0, 64)};
    for (uint64_t t = 0; t < 8; ++t) ASSERT_EQ(drv_->add({}, in, t), AddStatus::Ok);
    (void)drv_->kick_prepare();
    uint16_t heads[8];
    for (uint16_t& h : heads) h = pop_head();

    // 8 in flight: arm for 6 used.
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    for (int k = 0; k < 6; ++k) ASSERT_TRUE(device().push_used(heads[k], 1));
    EXPECT_TRUE(drv_->enable_cb_delayed());  // 6 used: the device has not passed used_event
    ASSERT_TRUE(device().push_used(heads[6], 1));
    EXPECT_FALSE(drv_->enable_cb_delayed());  // 7 used: it has
    EXPECT_EQ(drv_->stats().cb_rechecks.get(), 1u);

    // Reap 4: 4 in flight, 3 used beyond last_used -> arm for 3: not passed yet.
    UsedBuf u;
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(drv_->get_used(u));
    EXPECT_TRUE(drv_->enable_cb_delayed());
    ASSERT_TRUE(device().push_used(heads[7], 1));
    EXPECT_FALSE(drv_->enable_cb_delayed());
}

TEST_P(DriverQueueFlagsTest, DisableCbSetsNoInterruptAndEveryEnableClearsIt) {
    make(8);
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    EXPECT_EQ(guest_->avail_flags(), VIRTQ_AVAIL_F_NO_INTERRUPT);
    EXPECT_TRUE(drv_->enable_cb());
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    (void)drv_->enable_cb_prepare();
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->avail_flags(), 0);
}

TEST_P(DriverQueueEventIdxTest, EnableCbWritesUsedEventAtLastUsedIdx) {
    make(8);
    const Buf in[] = {buf(0, 64)};
    for (uint64_t t = 0; t < 6; ++t) ASSERT_EQ(drv_->add({}, in, t), AddStatus::Ok);
    (void)drv_->kick_prepare();
    for (int k = 0; k < 6; ++k) ASSERT_TRUE(device().push_used(pop_head(), 1));
    UsedBuf u;
    drv_->disable_cb();
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(guest_->used_event(), 0);  // disarmed: reaping does not move it

    EXPECT_FALSE(drv_->enable_cb());  // 3 still pending
    EXPECT_EQ(guest_->used_event(), 3);
    drv_->disable_cb();
    EXPECT_EQ(drv_->enable_cb_prepare(), RingIdx(3));
    EXPECT_EQ(guest_->used_event(), 3);
    // Armed: each reap moves used_event along to the new last_used_idx.
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(guest_->used_event(), 4);
    ASSERT_TRUE(drv_->get_used(u));
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(guest_->used_event(), 6);
    EXPECT_TRUE(drv_->enable_cb());
    EXPECT_EQ(guest_->used_event(), 6);
}

TEST_P(DriverQueueEventIdxTest, EnableCbDelayedSetsUsedEventThreeQuartersOfInFlightAhead) {
    make(16);
    const Buf in[] = {buf(0, 64)};
    for (uint64_t t = 0; t < 12; ++t) ASSERT_EQ(drv_->add({}, in, t), AddStatus::Ok);
    (void)drv_->kick_prepare();
    uint16_t heads[12];
    for (uint16_t& h : heads) h = pop_head();
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->used_event(), 9);  // 0 + 12 * 3 / 4

    for (int k = 0; k < 4; ++k) ASSERT_TRUE(device().push_used(heads[k], 1));
    UsedBuf u;
    drv_->disable_cb();
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(drv_->get_used(u));
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->used_event(), 10);  // 4 + 8 * 3 / 4
}

// VIRTIO 1.2 2.7.10.1: "if the VIRTIO_F_EVENT_IDX feature bit is negotiated:
// The driver MUST set flags to 0." Suppression goes through used_event only.
TEST_P(DriverQueueEventIdxTest, AvailFlagsStayZeroAcrossDisableAndEnableCb) {
    make(8);
    drv_->disable_cb();
    EXPECT_EQ(guest_->avail_flags(), 0);
    EXPECT_TRUE(drv_->enable_cb());
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->avail_flags(), 0);
}

INSTANTIATE_TEST_SUITE_P(All, DriverQueueTest, ::testing::ValuesIn(kAll), feature_name);
INSTANTIATE_TEST_SUITE_P(NoEventIdx, DriverQueueFlagsTest,
                         ::testing::Values(Features{false, false}, Features{false, true}),
                         feature_name);
INSTANTIATE_TEST_SUITE_P(EventIdx, DriverQueueEventIdxTest,
                         ::testing::Values(Features{true, false}, Features{true, true}),
                         feature_name);

}  // namespace
}  // namespace pvnet::ring::driver_fixture
