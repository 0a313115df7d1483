// Root: the namespace bed goes away with its object, also when making it
// fails half-way; a hugepage reservation leaves nr_hugepages and the
// hugetlbfs mounts as it found them.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "pvnet/lab/child.h"
#include "pvnet/lab/hugepages.h"
#include "pvnet/lab/netns_bed.h"
#include "pvnet/port/netns.h"

namespace pvnet::lab {
namespace {

bool netns_exists(const std::string& name) {
    struct stat st {};
    return ::stat(("/var/run/netns/" + name).c_str(), &st) == 0;
}

std::string tag() {
    std::string t = "l";  // appended: g++ 12 -O3 warns falsely (-Wrestrict) on "l" + to_string
    t += std::to_string(::getpid());
    return t;
}

TEST(NetnsBed, CreatesTwoNamespacesAndDeletesThem) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root";
    std::string a, b;
    {
        auto bed = NetnsBed::create("pvnet-labtest-", tag() + "-0");
        ASSERT_TRUE(bed.has_value()) << bed.error();
        a = bed->ns_a();
        b = bed->ns_b();
        EXPECT_TRUE(netns_exists(a));
        EXPECT_TRUE(netns_exists(b));
        auto lo = run_ok(in_netns(a, {"cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6"}),
                         std::chrono::seconds(5));
        ASSERT_TRUE(lo.has_value()) << lo.error();
        EXPECT_EQ(*lo, "1\n");
    }
    EXPECT_FALSE(netns_exists(a));
    EXPECT_FALSE(netns_exists(b));
}

TEST(NetnsBed, FailureHalfWayLeavesNothing) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root";
    const std::string t = tag() + "-1";
    // B's name is taken: A is made, then B fails, and A must go again.
    auto taken = port::ScopedNetns::create("pvnet-labtest-" + t + "-b");
    ASSERT_TRUE(taken.has_value());
    auto bed = NetnsBed::create("pvnet-labtest-", t);
    EXPECT_FALSE(bed.has_value());
    EXPECT_FALSE(netns_exists("pvnet-labtest-" + t + "-a"));
}

TEST(HugepageReservation, RestoresThePoolAndMounts) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root";
    auto before = hugepage_state();
    ASSERT_TRUE(before.has_value()) << before.error();
    {
        // More than are free now: the pool has to grow.
        auto r = HugepageReservation::reserve(before->free_hugepages + 4);
        ASSERT_TRUE(r.has_value()) << r.error();
        auto during = hugepage_state();
        ASSERT_TRUE(during.has_value());
        EXPECT_GE(during->free_hugepages, before->free_hugepages + 4);
        EXPECT_FALSE(during->hugetlbfs_dirs.empty());
        EXPECT_FALSE(r->dir().empty());
    }
    auto after = hugepage_state();
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->nr_hugepages, before->nr_hugepages);
    EXPECT_EQ(after->hugetlbfs_dirs, before->hugetlbfs_dirs);
}

}  // namespace
}  // namespace pvnet::lab
