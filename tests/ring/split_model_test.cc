// Randomized property test: a SplitDriverQueue and a SplitDeviceQueue on one
// split ring, driven by one thread through random interleavings of every
// operation of both sides, checked after each step against a reference model
// (queues of outstanding chains). Fixed seeds; sizes 1, 2, 8, 256; EVENT_IDX
// and indirect on and off; a size-2 run long enough to wrap every 16-bit index.
//
// Lost wakeups, single-thread form (VIRTIO 1.2 2.7.7 / 2.7.10; Linux
// virtqueue_kick_prepare / vhost_enable_notify): once the device's
// enable_notify() said "nothing pending, sleep", the driver's next kick
// decision covering a new chain must kick; once the driver's enable_cb() said
// "sleep", the device's next signal decision covering a new used entry must
// signal.
#include <gtest/gtest.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "split_model.h"

namespace pvnet::ring::model_test {
namespace {

class SplitModelTest : public ::testing::TestWithParam<ModelParam> {};

TEST_P(SplitModelTest, DriverAndDeviceAgreeWithReferenceModel) {
    Model m(GetParam());
    m.run();
    if (HasFailure()) return;
    EXPECT_GE(m.reaped(), GetParam().min_reaped);
    EXPECT_GT(m.reaped(), 0u);
    // The lost-wakeup properties were exercised, not vacuously true.
    EXPECT_GT(m.kick_checks(), 0u);
    EXPECT_GT(m.signal_checks(), 0u);
}

std::vector<ModelParam> model_params() {
    std::vector<ModelParam> v;
    uint64_t seed = 0x5eed0000;
    for (uint16_t size : {uint16_t{1}, uint16_t{2}, uint16_t{8}, uint16_t{256}}) {
        for (bool ei : {false, true}) {
            for (bool ind : {false, true}) {
                v.push_back(ModelParam{size, ei, ind, ++seed, 6000, 0});
            }
        }
    }
    // 16-bit wrap of avail.idx, used.idx, last_used_idx and the event indices.
    for (bool ei : {false, true}) {
        for (bool ind : {false, true}) {
            v.push_back(ModelParam{2, ei, ind, ++seed, 0, 66000});
        }
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Split, SplitModelTest, ::testing::ValuesIn(model_params()), param_name);

}  // namespace
}  // namespace pvnet::ring::model_test
