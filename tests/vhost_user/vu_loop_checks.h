// What the VuLoop tests (two_process_test, testpmd_test) assert of a healthy loop.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "pvnet/bench/vu_loop.h"

namespace pvnet::bench {

/// Every one of `frames` sent came back once, in order and intact.
inline void expect_every_frame_back(const VuLoopResult& r, uint64_t frames) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.sent, frames);
    EXPECT_EQ(r.sink.sink_pkts, frames);
    EXPECT_EQ(r.sink.sink_lost, 0u);
    EXPECT_EQ(r.sink.sink_reordered, 0u);
    EXPECT_EQ(r.sink.sink_duplicates, 0u);
    EXPECT_EQ(r.sink.sink_drop_corrupt, 0u);
}

}  // namespace pvnet::bench
