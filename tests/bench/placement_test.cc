// The placement probe (bench::probe_placement): it measures something for
// two CPUs and classifies by kFarRoundTripNs; it refuses what it cannot
// measure instead of hanging. No assertion on the time itself beyond its
// being a positive finite number: the machine decides that.
#include "pvnet/bench/placement.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>

namespace pvnet::bench {
namespace {

TEST(Placement, ClassFollowsTheThreshold) {
    EXPECT_EQ(classify_round_trip(1), Placement::Near);
    EXPECT_EQ(classify_round_trip(kFarRoundTripNs - 0.5), Placement::Near);
    EXPECT_EQ(classify_round_trip(kFarRoundTripNs), Placement::Far);
    EXPECT_EQ(classify_round_trip(10 * kFarRoundTripNs), Placement::Far);
}

TEST(Placement, NoValueIsUnknown) {
    for (double ns : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                      std::numeric_limits<double>::infinity()}) {
        EXPECT_EQ(classify_round_trip(ns), Placement::Unknown) << ns;
    }
    EXPECT_STREQ(to_string(Placement::Unknown), "unknown");
    EXPECT_STREQ(to_string(Placement::Near), "near");
    EXPECT_STREQ(to_string(Placement::Far), "far");
}

TEST(Placement, ProbeOfTwoCpusMeasuresAndClassifies) {
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int cpus[2], n = 0;
    for (std::size_t c = 0; c < CPU_SETSIZE && n < 2; ++c) {
        if (CPU_ISSET(c, &allowed)) cpus[n++] = static_cast<int>(c);
    }
    if (n < 2) GTEST_SKIP() << "fewer than two CPUs allowed";
    const PlacementProbe p = probe_placement(cpus[0], cpus[1]);
    ASSERT_TRUE(p.ok) << p.error;
    std::printf("[placement] CPU %d <-> %d: %.1f ns, %s\n", p.cpu_a, p.cpu_b, p.round_trip_ns,
                to_string(p.placement));
    EXPECT_EQ(p.cpu_a, cpus[0]);
    EXPECT_EQ(p.cpu_b, cpus[1]);
    EXPECT_TRUE(std::isfinite(p.round_trip_ns));
    EXPECT_GT(p.round_trip_ns, 0);
    EXPECT_EQ(p.placement, classify_round_trip(p.round_trip_ns));
    EXPECT_NE(p.placement, Placement::Unknown);
}

TEST(Placement, ProbeRefusesWhatItCannotMeasure) {
    for (auto [a, b] : {std::pair{0, 0}, std::pair{-1, 1}, std::pair{0, CPU_SETSIZE - 1}}) {
        const PlacementProbe p = probe_placement(a, b);
        EXPECT_FALSE(p.ok) << a << " " << b;
        EXPECT_FALSE(p.error.empty()) << a << " " << b;
        EXPECT_EQ(p.placement, Placement::Unknown) << a << " " << b;
    }
}

}  // namespace
}  // namespace pvnet::bench
