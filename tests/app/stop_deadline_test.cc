// serve's StopDeadline (issue 23): a stop that does not finish in time ends
// the process anyway (status 1, after `last`), one that does leaves it be.
// Death tests: each case runs in a child process.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "stop_signals.h"

namespace pvnet::app {
namespace {

using namespace std::chrono_literals;

TEST(StopDeadlineDeathTest, AWedgedStopEndsTheProcessAfterLast) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            const StopDeadline d(100ms, [] { std::fprintf(stderr, "last ran\n"); });
            std::this_thread::sleep_for(30s);  // wedged (a hang check bounds it)
            std::exit(0);
        },
        ::testing::ExitedWithCode(1), "did not finish in 100 ms.*\n.*last ran");
}

TEST(StopDeadlineDeathTest, AStopInTimeLeavesTheProcessBe) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            {
                const StopDeadline d(10s, [] { std::fprintf(stderr, "last ran\n"); });
            }
            std::fprintf(stderr, "stopped in time\n");
            std::exit(0);
        },
        ::testing::ExitedWithCode(0), "^stopped in time\n$");
}

}  // namespace
}  // namespace pvnet::app
