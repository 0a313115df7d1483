// SplitDriverQueue against a hostile device: raw used ring writes naming bad
// ids, lengths and indexes, each breaking the queue for good with one count
// (split_fixture.h).
#include <gtest/gtest.h>

#include "split_fixture.h"

namespace pvnet::ring::driver_fixture {
namespace {

// ---------------------------------------------------------------- hostile device

class HostileDeviceTest : public DriverQueueTest {
protected:
    /// Size 8; one chain (1 readable, 2 writable: 100 + 28 bytes) published, token 7.
    void SetUp() override {
        make(8);
        const Buf out[] = {buf(0, 10)};
        const Buf in[] = {buf(0x100, 100), buf(0x200, 28)};
        ASSERT_EQ(drv_->add(out, in, 7), AddStatus::Ok);
        drv_->publish();
        head_ = guest_->avail_slot(0);
    }

    /// get_used refuses, the queue is broken for `e` with one count, and
    /// stays broken even once the used ring looks sane again.
    void expect_broken(RingError e) {
        UsedBuf u{0xdead, 0xbeef};
        EXPECT_FALSE(drv_->get_used(u));
        EXPECT_EQ(u.token, 0xdeadu);  // nothing handed out
        EXPECT_TRUE(drv_->broken());
        EXPECT_EQ(drv_->broken_reason(), e) << to_string(drv_->broken_reason());
        EXPECT_EQ(drv_->stats().errors.get(e), 1u);
        EXPECT_EQ(drv_->stats().errors.total(), 1u);
        EXPECT_EQ(drv_->stats().reaps.get(), 0u);

        guest_->set_used_elem(0, head_, 0);
        guest_->set_used_idx(1);
        EXPECT_FALSE(drv_->get_used(u));
        const Buf out[] = {buf(0, 1)};
        EXPECT_EQ(drv_->add(out, {}, 8), AddStatus::Broken);
        EXPECT_FALSE(drv_->kick_prepare());
        EXPECT_EQ(drv_->stats().errors.get(e), 1u);
        EXPECT_EQ(drv_->stats().errors.total(), 1u);
        EXPECT_TRUE(drv_->broken());
    }

    uint16_t head_ = 0;
};

TEST_P(HostileDeviceTest, RejectsUsedIdEqualToQueueSize) {
    guest_->set_used_elem(0, 8, 0);
    guest_->set_used_idx(1);
    expect_broken(RingError::UsedIdOutOfRange);
}

TEST_P(HostileDeviceTest, RejectsUsedIdWhoseLow16BitsNameAnInflightHead) {
    guest_->set_used_elem(0, 0x10000u + head_, 0);
    guest_->set_used_idx(1);
    expect_broken(RingError::UsedIdOutOfRange);
}

TEST_P(HostileDeviceTest, RejectsUsedIdNeverMadeAvailable) {
    const auto other = static_cast<uint16_t>((head_ + 5) % 8);
    guest_->set_used_elem(0, other, 0);
    guest_->set_used_idx(1);
    expect_broken(RingError::UsedIdNotInflight);
}

TEST_P(HostileDeviceTest, RejectsUsedIdThatIsNotAChainHead) {
    // Direct: the chain's second descriptor; indirect: a free ring descriptor.
    const auto second = static_cast<uint16_t>((head_ + 1) % 8);
    guest_->set_used_elem(0, second, 0);
    guest_->set_used_idx(1);
    expect_broken(RingError::UsedIdNotInflight);
}

TEST_P(HostileDeviceTest, RejectsUsedIdCompletedTwice) {
    const Buf out[] = {buf(0, 10)};
    ASSERT_EQ(drv_->add(out, {}, 9), AddStatus::Ok);
    drv_->publish();
    guest_->set_used_elem(0, head_, 1);
    guest_->set_used_elem(1, head_, 1);
    guest_->set_used_idx(2);
    UsedBuf u;
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 7u);
    EXPECT_FALSE(drv_->get_used(u));
    EXPECT_TRUE(drv_->broken());
    EXPECT_EQ(drv_->broken_reason(), RingError::UsedIdNotInflight);
    EXPECT_EQ(drv_->stats().errors.get(RingError::UsedIdNotInflight), 1u);
    EXPECT_EQ(drv_->stats().errors.total(), 1u);
    EXPECT_FALSE(drv_->get_used(u));
    EXPECT_EQ(drv_->stats().errors.total(), 1u);
}

TEST_P(HostileDeviceTest, RejectsUsedLenAboveWritableBytesPosted) {
    guest_->set_used_elem(0, head_, 129);  // 100 + 28 posted
    guest_->set_used_idx(1);
    expect_broken(RingError::UsedLenTooLong);
}

TEST_P(HostileDeviceTest, RejectsNonZeroUsedLenForReadOnlyChain) {
    // Complete the first chain, then a readable-only chain comes back with len 1.
    guest_->set_used_elem(0, head_, 0);
    guest_->set_used_idx(1);
    UsedBuf u;
    ASSERT_TRUE(drv_->get_used(u));
    const Buf out[] = {buf(0, 10), buf(0x40, 10)};
    ASSERT_EQ(drv_->add(out, {}, 8), AddStatus::Ok);
    drv_->publish();
    const uint16_t h = guest_->avail_slot(1);
    guest_->set_used_elem(1, h, 1);
    guest_->set_used_idx(2);
    EXPECT_FALSE(drv_->get_used(u));
    EXPECT_TRUE(drv_->broken());
    EXPECT_EQ(drv_->broken_reason(), RingError::UsedLenTooLong);
    EXPECT_EQ(drv_->stats().errors.get(RingError::UsedLenTooLong), 1u);
    EXPECT_EQ(drv_->stats().errors.total(), 1u);
}

TEST_P(HostileDeviceTest, RejectsUsedIdxPastWhatWasPublished) {
    guest_->set_used_elem(0, head_, 0);
    guest_->set_used_idx(2);  // one published
    expect_broken(RingError::UsedIdxJump);
}

TEST_P(HostileDeviceTest, RejectsUsedIdxCoveringAddedButUnpublishedChains) {
    const Buf out[] = {buf(0, 10)};
    ASSERT_EQ(drv_->add(out, {}, 8), AddStatus::Ok);  // in flight, not published
    guest_->set_used_elem(0, head_, 0);
    guest_->set_used_idx(2);
    expect_broken(RingError::UsedIdxJump);
}

TEST_P(HostileDeviceTest, RejectsUsedIdxMovingBackwards) {
    guest_->set_used_idx(0xffff);
    expect_broken(RingError::UsedIdxJump);
}

INSTANTIATE_TEST_SUITE_P(All, HostileDeviceTest, ::testing::ValuesIn(kAll), feature_name);

}  // namespace
}  // namespace pvnet::ring::driver_fixture
