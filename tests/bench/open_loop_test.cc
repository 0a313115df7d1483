// The open-loop schedule and the outstanding-request table, by arithmetic.
#include "pvnet/bench/open_loop.h"

#include <gtest/gtest.h>

namespace pvnet::bench {
namespace {

TEST(OpenLoopSchedule, PlansEveryRequestFromTheStart) {
    OpenLoopSchedule s(1000, 5'000);  // 1 ms apart from t = 5 us
    EXPECT_EQ(s.planned(0), 5'000u);
    EXPECT_EQ(s.planned(3), 3'005'000u);
    EXPECT_FALSE(s.due(4'999));
    EXPECT_TRUE(s.due(5'000));
    // Nothing sent for 10.5 ms: 11 requests are due, none skipped.
    EXPECT_EQ(s.backlog(10'505'000), 11u);
    EXPECT_EQ(s.take(), 5'000u);
    EXPECT_EQ(s.take(), 1'005'000u);
    EXPECT_EQ(s.backlog(10'505'000), 9u);
    EXPECT_EQ(s.next(), 2u);
    EXPECT_EQ(s.backlog(0), 0u);
}

TEST(OpenLoopSchedule, NonIntegralIntervalsDoNotDrift) {
    OpenLoopSchedule s(3, 0);  // 333,333,333.3 ns apart
    EXPECT_EQ(s.planned(3), 1'000'000'000u);
    EXPECT_EQ(s.planned(3'000'000), 1'000'000'000'000'000u);
}

TEST(OutstandingRequests, MatchesResponsesBySequence) {
    OutstandingRequests o(4);
    o.add(0, 100);
    o.add(1, 200);
    o.add(2, 300);
    EXPECT_EQ(o.count(), 3u);
    uint64_t t = 0;
    EXPECT_TRUE(o.complete(1, t));
    EXPECT_EQ(t, 200u);
    EXPECT_FALSE(o.complete(1, t)) << "a duplicate response";
    EXPECT_FALSE(o.complete(3, t)) << "never sent";
    EXPECT_FALSE(o.complete(1'000'000, t)) << "forged";
    EXPECT_TRUE(o.complete(0, t));
    EXPECT_EQ(t, 100u);
    EXPECT_EQ(o.count(), 1u);
    EXPECT_EQ(o.abandoned(), 0u);
}

TEST(OutstandingRequests, ALostRequestIsAbandonedWhenItsSlotComesRound) {
    OutstandingRequests o(4);
    for (uint64_t s = 0; s < 4; ++s) o.add(s, s);
    EXPECT_TRUE(o.full());
    uint64_t t;
    for (uint64_t s = 1; s < 4; ++s) ASSERT_TRUE(o.complete(s, t));
    o.add(4, 40);  // request 0 was never answered
    EXPECT_EQ(o.abandoned(), 1u);
    EXPECT_EQ(o.count(), 1u);
    EXPECT_FALSE(o.complete(0, t)) << "its late response is refused";
    EXPECT_TRUE(o.complete(4, t));
    EXPECT_EQ(t, 40u);
    EXPECT_EQ(o.count(), 0u);
}

}  // namespace
}  // namespace pvnet::bench
