// need_event (VIRTIO 1.2 2.7.7.2 / 2.7.10.1, Linux vring_need_event) against
// a brute-force model that walks the index one step at a time, for every
// 16-bit new_idx; and SignalledUsed's bookkeeping on top of it.
#include "pvnet/ring/event_idx.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "pvnet/ring/ring_idx.h"

namespace pvnet::ring {
namespace {

// Walks the index from old_idx to new_idx one step at a time (mod 2^16) and
// reports whether it reached event + 1, i.e. moved past `event`.
bool model_crossed(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
    const uint16_t target = static_cast<uint16_t>(event + 1);
    for (uint16_t i = old_idx; i != new_idx;) {
        i = static_cast<uint16_t>(i + 1);
        if (i == target) return true;
    }
    return false;
}

std::vector<std::pair<uint16_t, uint16_t>> old_event_pairs() {
    std::vector<std::pair<uint16_t, uint16_t>> v = {
        {0, 0},         {0, 1},         {0, 65535},     {1, 0},         {65535, 65535},
        {65535, 0},     {65535, 65534}, {65534, 65535}, {65530, 3},     {3, 65530},
        {100, 99},      {100, 100},     {100, 101},     {100, 355},     {32768, 0},
        {0, 32768},     {32767, 32768}, {65535, 32767}, {32768, 32767}, {1000, 999},
        {65280, 65535}, {65535, 255},   {12345, 54321}, {54321, 12345},
    };
    std::mt19937 rng(20240601);
    std::uniform_int_distribution<uint32_t> any(0, 0xffff);
    std::uniform_int_distribution<uint32_t> near(0, 600);
    for (int i = 0; i < 40; ++i) {
        const auto old_idx = static_cast<uint16_t>(any(rng));
        v.emplace_back(old_idx, static_cast<uint16_t>(any(rng)));
        // Events just before or after old, where wrap mistakes show up.
        v.emplace_back(old_idx, static_cast<uint16_t>(old_idx + near(rng) - 300));
    }
    return v;
}

TEST(NeedEvent, ModelItselfCrossesOnlyWhenEventIsPassed) {
    EXPECT_FALSE(model_crossed(5, 5, 5));
    EXPECT_FALSE(model_crossed(5, 5, 4));  // reached event, did not pass it
    EXPECT_TRUE(model_crossed(5, 6, 5));
    EXPECT_TRUE(model_crossed(65535, 0, 65535));
    EXPECT_TRUE(model_crossed(65535, 3, 65530));
    EXPECT_FALSE(model_crossed(4, 3, 65530));
}

TEST(NeedEvent, MatchesStepByStepModelForEveryNewIdx) {
    for (const auto& [old_idx, event] : old_event_pairs()) {
        SCOPED_TRACE(testing::Message() << "old=" << old_idx << " event=" << event);
        // Walk new_idx over all 2^16 values starting at old_idx, keeping the
        // model's walk incremental: crossed turns true when new_idx reaches
        // event + 1 and stays true for the rest of the turn.
        bool crossed = false;
        uint16_t new_idx = old_idx;
        for (uint32_t k = 0; k <= 0xffff; ++k) {
            if (k > 0) {
                new_idx = static_cast<uint16_t>(new_idx + 1);
                if (new_idx == static_cast<uint16_t>(event + 1)) crossed = true;
            }
            ASSERT_EQ(need_event(event, RingIdx(new_idx), RingIdx(old_idx)), crossed)
                << "new=" << new_idx;
        }
    }
}

TEST(NeedEvent, IncrementalModelAgreesWithDirectWalkOnSamples) {
    // Guards the incremental model above against being wrong in the same way
    // as the code: spot-check it with the direct step-by-step walk.
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> any(0, 0xffff);
    std::uniform_int_distribution<uint32_t> small(0, 700);
    for (int i = 0; i < 3000; ++i) {
        const auto old_idx = static_cast<uint16_t>(any(rng));
        const auto event = static_cast<uint16_t>(old_idx + small(rng) - 350);
        const auto new_idx = static_cast<uint16_t>(old_idx + small(rng));
        ASSERT_EQ(need_event(event, RingIdx(new_idx), RingIdx(old_idx)),
                  model_crossed(event, new_idx, old_idx))
            << old_idx << " " << event << " " << new_idx;
    }
}

TEST(NeedEvent, NoProgressNeverNeedsEvent) {
    for (uint32_t v = 0; v <= 0xffff; v += 13) {
        const RingIdx i(static_cast<uint16_t>(v));
        EXPECT_FALSE(need_event(static_cast<uint16_t>(v), i, i));
        EXPECT_FALSE(need_event(static_cast<uint16_t>(v - 1), i, i));
    }
}

TEST(NeedEvent, EventEqualToOldIsCrossedByOneStep) {
    // The driver sets used_event = last seen idx: the next entry must signal.
    EXPECT_TRUE(need_event(10, RingIdx(11), RingIdx(10)));
    EXPECT_TRUE(need_event(65535, RingIdx(0), RingIdx(65535)));
    // event == new_idx has been reached but not passed.
    EXPECT_FALSE(need_event(11, RingIdx(11), RingIdx(10)));
    EXPECT_FALSE(need_event(0, RingIdx(0), RingIdx(65535)));
}

TEST(NeedEvent, WrapAroundBatchCrossingEvent) {
    EXPECT_TRUE(need_event(65534, RingIdx(5), RingIdx(65530)));
    EXPECT_TRUE(need_event(2, RingIdx(5), RingIdx(65530)));
    EXPECT_FALSE(need_event(5, RingIdx(5), RingIdx(65530)));
    EXPECT_FALSE(need_event(65529, RingIdx(5), RingIdx(65530)));
}

// ---------------------------------------------------------------------------
// SignalledUsed

TEST(SignalledUsed, StartsInvalid) {
    const SignalledUsed s;
    EXPECT_FALSE(s.valid);
}

TEST(SignalledUsed, FirstDecisionAlwaysSignals) {
    // Whatever the driver's used_event says, nothing is known about the last
    // signal, so the first decision signals (vhost's signalled_used_valid).
    const uint16_t values[] = {0, 1, 100, 32768, 65534, 65535};
    for (uint16_t used_event : values) {
        for (uint16_t new_used : values) {
            SignalledUsed s;
            EXPECT_TRUE(s.need(used_event, RingIdx(new_used)))
                << used_event << " " << new_used;
            EXPECT_TRUE(s.valid);
            EXPECT_EQ(s.idx, RingIdx(new_used));
        }
    }
}

TEST(SignalledUsed, SecondDecisionFollowsNeedEventFromTheFirst) {
    SignalledUsed s;
    ASSERT_TRUE(s.need(0, RingIdx(10)));
    // used_event 20 not passed by 10 -> 15.
    EXPECT_FALSE(s.need(20, RingIdx(15)));
    EXPECT_EQ(s.idx, RingIdx(15));
    // 15 -> 21 passes 20.
    EXPECT_TRUE(s.need(20, RingIdx(21)));
    // No progress: no signal.
    EXPECT_FALSE(s.need(20, RingIdx(21)));
    EXPECT_FALSE(s.need(21, RingIdx(21)));
}

TEST(SignalledUsed, InvalidatingMakesTheNextDecisionSignalAgain) {
    SignalledUsed s;
    ASSERT_TRUE(s.need(0, RingIdx(5)));
    EXPECT_FALSE(s.need(100, RingIdx(6)));
    s.valid = false;  // e.g. after the driver changed used_event under reset
    EXPECT_TRUE(s.need(100, RingIdx(7)));
    EXPECT_FALSE(s.need(100, RingIdx(8)));
}

TEST(SignalledUsed, RandomSequencesFollowTheModelAcrossWraps) {
    std::mt19937 rng(99);
    std::uniform_int_distribution<uint32_t> any(0, 0xffff);
    std::uniform_int_distribution<uint32_t> burst(0, 300);
    std::uniform_int_distribution<uint32_t> lag(0, 400);
    int signals = 0;
    int suppressed = 0;
    for (int run = 0; run < 20; ++run) {
        SignalledUsed s;
        uint16_t last = static_cast<uint16_t>(any(rng));
        bool have_last = false;  // the first decision has nothing to compare with
        for (int step = 0; step < 2000; ++step) {
            const uint16_t next = static_cast<uint16_t>(last + burst(rng));
            // The driver's used_event trails or leads the device a little.
            const uint16_t used_event = static_cast<uint16_t>(last + lag(rng) - 200);
            const bool want = !have_last || model_crossed(used_event, next, last);
            ASSERT_EQ(s.need(used_event, RingIdx(next)), want)
                << "run " << run << " step " << step << " last=" << last << " next=" << next
                << " event=" << used_event;
            ASSERT_TRUE(s.valid);
            ASSERT_EQ(s.idx, RingIdx(next));
            (want ? signals : suppressed) += 1;
            last = next;
            have_last = true;
        }
    }
    // Both outcomes must be exercised for the comparison to mean anything.
    EXPECT_GT(signals, 1000);
    EXPECT_GT(suppressed, 1000);
}

// Publishes since the last decision, one published() per burst as the
// device makes them: the record is forgotten by the burst that reaches or
// passes it again, 2^16 entries on (vhost_add_used_n), and not before.
TEST(SignalledUsed, ForgetsTheRecordOnceUsedIdxMovesTwoToTheSixteenPastIt) {
    for (const uint16_t start : {uint16_t{0}, uint16_t{1}, uint16_t{65000}, uint16_t{65535}}) {
        for (const uint16_t burst : {uint16_t{1}, uint16_t{3}, uint16_t{256}, uint16_t{32768}}) {
            SCOPED_TRACE(testing::Message() << "start " << start << " burst " << burst);
            SignalledUsed s;
            ASSERT_TRUE(s.need(0, RingIdx(start)));
            RingIdx used(start);
            uint32_t moved = 0;
            while (moved + burst < 65536u) {
                used += burst;
                moved += burst;
                s.published(used, burst);
                ASSERT_TRUE(s.valid) << "moved " << moved;
            }
            // The burst that makes it 2^16 or more.
            used += burst;
            s.published(used, burst);
            EXPECT_FALSE(s.valid);
            EXPECT_TRUE(s.need(static_cast<uint16_t>(start - 1), used))
                << "forgotten: the next decision signals";
        }
    }
}

TEST(SignalledUsed, AnInvalidRecordStaysInvalidAcrossPublishes) {
    SignalledUsed s;
    s.published(RingIdx(5), 5);
    EXPECT_FALSE(s.valid);
    s.published(RingIdx(6), 1);
    EXPECT_FALSE(s.valid);
}

TEST(SignalledUsed, UsableInConstantExpressions) {
    constexpr bool second = [] {
        SignalledUsed s;
        (void)s.need(0, RingIdx(1));
        return s.need(5, RingIdx(4));
    }();
    static_assert(!second);
    EXPECT_FALSE(second);
}

}  // namespace
}  // namespace pvnet::ring
