// SplitDriverQueue adding, publishing and reaping (VIRTIO 1.2 2.7.13
// "Supplying Buffers to The Device", 2.7.14 "Receiving Used Buffers"):
// descriptors and ring fields read back raw, the device a SplitDeviceQueue
// on the same memory or raw used entries (split_fixture.h).
#include <gtest/gtest.h>

#include "split_fixture.h"

namespace pvnet::ring::driver_fixture {
namespace {

// ---------------------------------------------------------------- add / publish

TEST_P(DriverQueueTest, AddWritesReadableThenWritableDescriptorsChainedByNext) {
    make(8);
    const Buf out[] = {buf(0x100, 100), buf(0x200, 200)};
    const Buf in[] = {buf(0x400, 300)};
    ASSERT_EQ(drv_->add(out, in, 1), AddStatus::Ok);
    drv_->publish();
    const uint16_t head = guest_->avail_slot(0);
    ASSERT_LT(head, 8);

    const virtq_desc top = guest_->desc(head);
    if (GetParam().indirect) {
        // One ring descriptor naming this head's slice of the indirect area.
        EXPECT_EQ(top.flags.get(), VIRTQ_DESC_F_INDIRECT);
        EXPECT_EQ(top.addr.get(), kIndirectGpa + uint64_t{head} * kIndirectMax * 16u);
        EXPECT_EQ(top.len.get(), 3u * 16u);
    } else {
        EXPECT_EQ(top.flags.get() & VIRTQ_DESC_F_INDIRECT, 0);
    }
    const std::vector<RawDesc> c = read_chain(head);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].addr, kDataGpa + 0x100);
    EXPECT_EQ(c[0].len, 100u);
    EXPECT_EQ(c[0].flags, VIRTQ_DESC_F_NEXT);
    EXPECT_EQ(c[1].addr, kDataGpa + 0x200);
    EXPECT_EQ(c[1].len, 200u);
    EXPECT_EQ(c[1].flags, VIRTQ_DESC_F_NEXT);
    EXPECT_EQ(c[2].addr, kDataGpa + 0x400);
    EXPECT_EQ(c[2].len, 300u);
    EXPECT_EQ(c[2].flags, VIRTQ_DESC_F_WRITE);
    EXPECT_EQ(drv_->num_free(), 8 - descs_for(3));
    EXPECT_EQ(drv_->stats().adds.get(), 1u);
}

TEST_P(DriverQueueTest, AddOfOneBufferUsesOneDirectDescriptor) {
    make(8);
    const Buf out[] = {buf(0x100, 64)};
    const Buf in[] = {buf(0x800, 1500)};
    ASSERT_EQ(drv_->add(out, {}, 1), AddStatus::Ok);
    ASSERT_EQ(drv_->add({}, in, 2), AddStatus::Ok);
    drv_->publish();

    const virtq_desc a = guest_->desc(guest_->avail_slot(0));
    EXPECT_EQ(a.addr.get(), kDataGpa + 0x100);
    EXPECT_EQ(a.len.get(), 64u);
    EXPECT_EQ(a.flags.get(), 0);
    const virtq_desc b = guest_->desc(guest_->avail_slot(1));
    EXPECT_EQ(b.addr.get(), kDataGpa + 0x800);
    EXPECT_EQ(b.len.get(), 1500u);
    EXPECT_EQ(b.flags.get(), VIRTQ_DESC_F_WRITE);
    EXPECT_NE(guest_->avail_slot(0), guest_->avail_slot(1));
    EXPECT_EQ(drv_->num_free(), 6);
}

TEST_P(DriverQueueTest, AddOfChainOfIndirectMaxBuffersTakesOneSlotWithIndirect) {
    make(16);
    std::vector<Buf> out, in;
    for (uint32_t k = 0; k < 4; ++k) out.push_back(buf(0x100u * k, 10 + k));
    for (uint32_t k = 0; k < 4; ++k) in.push_back(buf(0x1000u + 0x100u * k, 20 + k));
    ASSERT_EQ(drv_->add(out, in, 1), AddStatus::Ok);
    drv_->publish();
    const uint16_t head = guest_->avail_slot(0);
    EXPECT_EQ((guest_->desc(head).flags.get() & VIRTQ_DESC_F_INDIRECT) != 0, GetParam().indirect);
    const std::vector<RawDesc> c = read_chain(head);
    ASSERT_EQ(c.size(), 8u);
    for (std::size_t k = 0; k < 8; ++k) {
        const Buf& b = k < 4 ? out[k] : in[k - 4];
        EXPECT_EQ(c[k].addr, b.gpa.value) << k;
        EXPECT_EQ(c[k].len, b.len) << k;
    }
    EXPECT_EQ(drv_->num_free(), GetParam().indirect ? 15 : 8);
}

TEST_P(DriverQueueTest, AddOfChainLongerThanIndirectMaxUsesDirectDescriptors) {
    make(16);
    std::vector<Buf> out, in;
    for (uint32_t k = 0; k < 5; ++k) out.push_back(buf(0x100u * k, 10 + k));
    for (uint32_t k = 0; k < 4; ++k) in.push_back(buf(0x1000u + 0x100u * k, 20 + k));
    ASSERT_EQ(drv_->add(out, in, 1), AddStatus::Ok);
    drv_->publish();

    const uint16_t head = guest_->avail_slot(0);
    EXPECT_EQ(guest_->desc(head).flags.get() & VIRTQ_DESC_F_INDIRECT, 0);
    const std::vector<RawDesc> c = read_chain(head);
    ASSERT_EQ(c.size(), 9u);
    for (std::size_t k = 0; k < 9; ++k) {
        const Buf& b = k < 5 ? out[k] : in[k - 5];
        EXPECT_EQ(c[k].addr, b.gpa.value) << k;
        EXPECT_EQ(c[k].len, b.len) << k;
        const uint16_t want = static_cast<uint16_t>((k < 5 ? 0 : VIRTQ_DESC_F_WRITE) |
                                                    (k + 1 < 9 ? VIRTQ_DESC_F_NEXT : 0));
        EXPECT_EQ(c[k].flags, want) << k;
    }
    EXPECT_EQ(drv_->num_free(), 16 - 9);
}

TEST_P(DriverQueueTest, AvailIdxMovesOnlyOnPublishAndSlotsNameTheAddedChains) {
    make(8);
    for (uint32_t k = 0; k < 3; ++k) {
        const Buf out[] = {buf(0x100u * k, 40 + k)};
        const Buf in[] = {buf(0x1000u + 0x100u * k, 60 + k)};
        ASSERT_EQ(drv_->add(out, in, k), AddStatus::Ok);
    }
    // Added, not published: the device sees nothing yet.
    EXPECT_EQ(guest_->avail_idx(), 0);
    EXPECT_EQ(device().pending(), 0);

    drv_->publish();
    EXPECT_EQ(guest_->avail_idx(), 3);
    EXPECT_EQ(device().pending(), 3);
    for (uint16_t s = 0; s < 3; ++s) {
        const std::vector<RawDesc> c = read_chain(guest_->avail_slot(s));
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].addr, kDataGpa + 0x100u * s);
        EXPECT_EQ(c[0].len, 40u + s);
        EXPECT_EQ(c[1].addr, kDataGpa + 0x1000u + 0x100u * s);
        EXPECT_EQ(c[1].len, 60u + s);
    }
    // A second publish with nothing new leaves idx alone; kick_prepare publishes too.
    drv_->publish();
    EXPECT_EQ(guest_->avail_idx(), 3);
    const Buf one[] = {buf(0x3000, 1)};
    ASSERT_EQ(drv_->add(one, {}, 3), AddStatus::Ok);
    EXPECT_EQ(guest_->avail_idx(), 3);
    (void)drv_->kick_prepare();
    EXPECT_EQ(guest_->avail_idx(), 4);
    EXPECT_EQ(drv_->in_flight(), 4);
}

TEST_P(DriverQueueTest, AddReturnsNoSpaceWhenDescriptorsRunOut) {
    make(8);
    const Buf out[] = {buf(0, 14)};
    const Buf in[] = {buf(0x100, 100), buf(0x200, 100)};
    // Three buffers: three descriptors direct, one slot indirect.
    const int fits = GetParam().indirect ? 8 : 2;
    int added = 0;
    while (drv_->add(out, in, static_cast<uint64_t>(added)) == AddStatus::Ok) {
        ++added;
        ASSERT_LE(added, 8);
    }
    EXPECT_EQ(added, fits);
    EXPECT_EQ(drv_->stats().add_no_space.get(), 1u);
    EXPECT_EQ(drv_->num_free(), GetParam().indirect ? 0 : 2);
    if (!GetParam().indirect) {
        // Two descriptors left: a two-buffer chain still fits, then nothing does.
        EXPECT_EQ(drv_->add(out, std::span<const Buf>(in, 1), 99), AddStatus::Ok);
        ++added;
    }
    EXPECT_EQ(drv_->add(out, {}, 100), AddStatus::NoSpace);
    EXPECT_EQ(drv_->num_free(), 0);
    drv_->publish();
    EXPECT_EQ(guest_->avail_idx(), added);
    EXPECT_FALSE(drv_->broken());
}

// ---------------------------------------------------------------- reap

TEST_P(DriverQueueTest, GetUsedReturnsTokensAndLengthsInDevicePushOrder) {
    make(8);
    for (uint64_t t = 100; t < 103; ++t) {
        const Buf out[] = {buf(0x100 * t, 32)};
        const Buf in[] = {buf(0x2000 + 0x100 * t, 500)};
        ASSERT_EQ(drv_->add(out, in, t), AddStatus::Ok);
    }
    (void)drv_->kick_prepare();
    const uint16_t h0 = pop_head();
    EXPECT_EQ(chain_->out_bytes, 32u);
    EXPECT_EQ(chain_->in_bytes, 500u);
    const uint16_t h1 = pop_head();
    const uint16_t h2 = pop_head();

    UsedBuf u;
    EXPECT_FALSE(drv_->get_used(u));  // popped is not used
    ASSERT_TRUE(device().add_used(h2, 7));
    ASSERT_TRUE(device().add_used(h0, 0));
    EXPECT_FALSE(drv_->get_used(u));  // staged is not published
    device().flush_used();
    ASSERT_TRUE(device().push_used(h1, 500));

    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 102u);
    EXPECT_EQ(u.len, 7u);
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 100u);
    EXPECT_EQ(u.len, 0u);
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 101u);
    EXPECT_EQ(u.len, 500u);
    EXPECT_FALSE(drv_->get_used(u));
    EXPECT_EQ(drv_->num_free(), 8);
    EXPECT_EQ(drv_->in_flight(), 0);
    EXPECT_EQ(drv_->last_used_idx(), RingIdx(3));
    EXPECT_EQ(drv_->stats().reaps.get(), 3u);
    EXPECT_FALSE(drv_->broken());
}

TEST_P(DriverQueueTest, GetUsedAcceptsRawUsedEntriesWithinPostedLength) {
    make(4);
    const Buf out[] = {buf(0, 10)};
    const Buf in[] = {buf(0x100, 100), buf(0x200, 28)};
    ASSERT_EQ(drv_->add(out, in, 0xabcdef), AddStatus::Ok);
    drv_->publish();
    const uint16_t head = guest_->avail_slot(0);
    guest_->set_used_elem(0, head, 128);  // exactly the writable bytes posted
    guest_->set_used_idx(1);
    UsedBuf u;
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 0xabcdefu);
    EXPECT_EQ(u.len, 128u);
    EXPECT_EQ(drv_->num_free(), 4);
    EXPECT_FALSE(drv_->get_used(u));
}

TEST_P(DriverQueueTest, FreedDescriptorsAreReusedRoundAfterRound) {
    make(4);
    uint64_t token = 0;
    for (int round = 0; round < 300; ++round) {
        // Chains of 1..3 buffers, until the ring is full.
        const auto n = static_cast<std::size_t>(1 + round % 3);
        const Buf bufs[] = {buf(0, 8), buf(0x100, 16), buf(0x200, 24)};
        std::vector<uint64_t> added;
        while (drv_->add(std::span<const Buf>(bufs, 1), std::span<const Buf>(bufs + 1, n - 1),
                         token) == AddStatus::Ok) {
            added.push_back(token++);
        }
        ASSERT_FALSE(added.empty());
        (void)drv_->kick_prepare();
        std::vector<uint16_t> heads;
        for (std::size_t k = 0; k < added.size(); ++k) heads.push_back(pop_head());
        for (uint16_t h : heads) ASSERT_TRUE(device().add_used(h, 0));
        device().flush_used();
        for (uint64_t want : added) {
            UsedBuf u;
            ASSERT_TRUE(drv_->get_used(u));
            EXPECT_EQ(u.token, want);
        }
        ASSERT_EQ(drv_->num_free(), 4) << "round " << round;
    }
    EXPECT_FALSE(drv_->broken());
    EXPECT_FALSE(device().broken());
}

INSTANTIATE_TEST_SUITE_P(All, DriverQueueTest, ::testing::ValuesIn(kAll), feature_name);

}  // namespace
}  // namespace pvnet::ring::driver_fixture
