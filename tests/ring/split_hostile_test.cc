// A hostile driver against SplitDeviceQueue: one test per ring rule of
// STYLE.md §6. Each rejection must give the right RingError, count it once,
// break the queue for good (nothing more is popped, even a well-formed
// chain made available afterwards) and leave the used ring untouched.
// Caller errors on push (PushIdNotInflight, PushLenTooLong) are counted but
// leave the queue working.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/virtio/virtio_ring.h"
#include "ring_builder.h"

namespace pvnet::ring {
namespace {

using mem::GuestAddr;
using test::QueueFeatures;
using test::RawDesc;
using test::RingBuilder;
using virtio::VIRTQ_DESC_F_INDIRECT;
using virtio::VIRTQ_DESC_F_NEXT;
using virtio::VIRTQ_DESC_F_WRITE;

constexpr uint16_t kNext = VIRTQ_DESC_F_NEXT;
constexpr uint16_t kWrite = VIRTQ_DESC_F_WRITE;
constexpr uint16_t kIndirect = VIRTQ_DESC_F_INDIRECT;
/// A guest address far from every region the tests map.
constexpr uint64_t kUnmappedGpa = 0x10'0000'0000;

class DeviceQueuePop : public ::testing::Test {
protected:
    void SetUp() override { init(8, QueueFeatures{.indirect = true}); }

    void init(uint16_t size, QueueFeatures f) {
        q_.reset();
        rb_ = std::make_unique<RingBuilder>(size);
        q_ = rb_->make_device(f);
        snapshot_used();
    }
    /// Records the used ring as the test expects it to stay.
    void snapshot_used() { used_before_ = rb_->used_ring_bytes(); }

    uint16_t size() const { return rb_->size(); }
    /// A mapped, readable and writable buffer address.
    uint64_t buf(uint32_t len = 64) { return rb_->alloc_buf(len, 1).gpa.value; }
    /// Makes `head` available at the next avail slot and publishes.
    void avail(uint16_t head) { rb_->make_available(head); }
    PopStatus pop() { return q_->pop(*chain_); }

    /// The queue must reject the next chain with `e`, and then stay broken.
    void expect_breaks(RingError e) {
        const uint64_t pops_before = q_->stats().pops.get();
        const RingIdx last_before = q_->last_avail_idx();

        EXPECT_EQ(pop(), PopStatus::Broken);
        EXPECT_TRUE(q_->broken());
        EXPECT_EQ(q_->broken_reason(), e) << to_string(q_->broken_reason());
        EXPECT_EQ(q_->stats().errors.get(e), 1u);
        EXPECT_EQ(q_->stats().errors.total(), 1u);
        EXPECT_EQ(rb_->used_ring_bytes(), used_before_);

        // Sticky: a well-formed chain (at a head not in flight), published
        // where the bad one was, is not popped.
        rb_->set_next_avail(q_->last_avail_idx());
        rb_->add_chain_at(static_cast<uint16_t>(size() - 1), {Buf{GuestAddr(buf()), 64}}, {});
        EXPECT_EQ(pop(), PopStatus::Broken);
        EXPECT_EQ(pop(), PopStatus::Broken);
        EXPECT_EQ(q_->stats().pops.get(), pops_before);
        EXPECT_EQ(q_->last_avail_idx(), last_before);
        EXPECT_EQ(q_->pending(), 0);

        // Every other entry point leaves the ring alone on a broken queue.
        q_->disable_notify();
        EXPECT_FALSE(q_->enable_notify());
        EXPECT_FALSE(q_->should_signal());
        q_->flush_used();
        EXPECT_EQ(rb_->used_ring_bytes(), used_before_);
        EXPECT_EQ(q_->used_idx(), RingIdx(0));

        // Still counted once, still the first reason.
        EXPECT_EQ(q_->stats().errors.get(e), 1u);
        EXPECT_EQ(q_->stats().errors.total(), 1u);
        EXPECT_EQ(q_->broken_reason(), e);
    }

    std::unique_ptr<RingBuilder> rb_;
    std::unique_ptr<SplitDeviceQueue> q_;
    std::unique_ptr<DescChain> chain_ = std::make_unique<DescChain>();
    std::vector<std::byte> used_before_;
};

// ---- avail ring -------------------------------------------------------------

TEST_F(DeviceQueuePop, RejectsHeadOutOfRange) {
    rb_->set_avail_slot(0, size());  // first index past the table
    rb_->set_avail_idx(1);
    expect_breaks(RingError::HeadOutOfRange);
}

TEST_F(DeviceQueuePop, RejectsHeadFarOutOfRange) {
    rb_->set_avail_slot(0, 0xffff);
    rb_->set_avail_idx(1);
    expect_breaks(RingError::HeadOutOfRange);
}

TEST_F(DeviceQueuePop, RejectsAvailIdxJumpFromStart) {
    rb_->write_desc(0, buf(), 64, 0, 0);
    rb_->set_avail_idx(static_cast<uint16_t>(size() + 1));
    expect_breaks(RingError::AvailIdxJump);
}

TEST_F(DeviceQueuePop, RejectsAvailIdxJumpAfterProgress) {
    for (int i = 0; i < 3; ++i) {
        const uint16_t head = rb_->add_chain({Buf{GuestAddr(buf()), 64}}, {});
        ASSERT_EQ(pop(), PopStatus::Ok);
        ASSERT_TRUE(q_->push_used(head, 0).has_value());
    }
    // last_avail_idx = 3: avail.idx 3 + size + 1 claims size + 1 new chains.
    rb_->set_avail_idx(static_cast<uint16_t>(3 + size() + 1));
    const uint64_t pops = q_->stats().pops.get();
    EXPECT_EQ(pop(), PopStatus::Broken);
    EXPECT_EQ(q_->broken_reason(), RingError::AvailIdxJump);
    EXPECT_EQ(q_->stats().errors.get(RingError::AvailIdxJump), 1u);
    EXPECT_EQ(q_->stats().pops.get(), pops);
    EXPECT_EQ(rb_->used_idx(), 3);
    rb_->set_avail_idx(4);  // back to a sane value: still broken
    EXPECT_EQ(pop(), PopStatus::Broken);
    EXPECT_EQ(rb_->used_idx(), 3);
}

TEST_F(DeviceQueuePop, AcceptsAvailIdxExactlyQueueSizeAhead) {
    for (uint16_t i = 0; i < size(); ++i) rb_->add_chain({Buf{GuestAddr(buf()), 64}}, {});
    EXPECT_EQ(q_->pending(), size());
    for (uint16_t i = 0; i < size(); ++i) EXPECT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(pop(), PopStatus::Empty);
    EXPECT_FALSE(q_->broken());
}

TEST_F(DeviceQueuePop, RejectsHeadMadeAvailableTwiceWhileInFlight) {
    rb_->write_desc(0, buf(), 64, 0, 0);
    avail(0);
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->head, 0);
    expect_breaks(RingError::HeadInflight);
}

// ---- descriptor links and loops ---------------------------------------------

TEST_F(DeviceQueuePop, RejectsNextOutOfRange) {
    rb_->write_desc(0, buf(), 64, kNext, size());  // first index past the table
    avail(0);
    expect_breaks(RingError::NextOutOfRange);
}

// `next` is bounded by the indirect table's own length, not the queue size.
TEST_F(DeviceQueuePop, RejectsNextOutOfRangeInsideIndirectTable) {
    // Three well-formed entries, but the table is declared two long: entry 2
    // exists in memory and must still not be reached.
    const GuestAddr t = rb_->alloc_indirect_table({
        RawDesc{buf(), 64, 0, 0},
        RawDesc{buf(), 64, kNext, 2},
        RawDesc{buf(), 64, 0, 0},
    });
    rb_->write_indirect_table(t, {RawDesc{buf(), 64, kNext, 1}});
    rb_->write_desc(0, t.value, 32, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::NextOutOfRange);
}

TEST_F(DeviceQueuePop, RejectsTwoDescriptorLoop) {
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, buf(), 64, kNext, 0);
    avail(0);
    expect_breaks(RingError::ChainTooLong);
}

TEST_F(DeviceQueuePop, RejectsSelfLoop) {
    rb_->write_desc(3, buf(), 64, kNext, 3);
    avail(3);
    expect_breaks(RingError::ChainTooLong);
}

TEST_F(DeviceQueuePop, RejectsLoopInsideIndirectTable) {
    const GuestAddr t = rb_->alloc_indirect_table({
        RawDesc{buf(), 64, kNext, 1},
        RawDesc{buf(), 64, kNext, 0},
    });
    rb_->write_desc(0, t.value, 32, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::ChainTooLong);
}

TEST_F(DeviceQueuePop, AcceptsChainOfExactlyQueueSizeDescriptors) {
    for (uint16_t i = 0; i < size(); ++i) {
        const bool last = i + 1 == size();
        rb_->write_desc(i, buf(), 64, last ? 0 : kNext, static_cast<uint16_t>(i + 1));
    }
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->out_num, size());
    EXPECT_EQ(chain_->out_bytes, 64u * size());
    EXPECT_FALSE(q_->broken());
}

// The same chain with the last descriptor linked back to the first: the
// (size + 1)th descriptor is the first that can only be a loop.
TEST_F(DeviceQueuePop, RejectsQueueSizePlusOneDescriptorsViaLoop) {
    for (uint16_t i = 0; i < size(); ++i) {
        rb_->write_desc(i, buf(), 64, kNext, static_cast<uint16_t>((i + 1) % size()));
    }
    avail(0);
    expect_breaks(RingError::ChainTooLong);
}

// One counter across the direct part and the indirect table (it is not
// reset on entering the table): 1 direct + size indirect > size.
TEST_F(DeviceQueuePop, CountsDirectAndIndirectDescriptorsTogether) {
    std::vector<RawDesc> t;
    for (uint16_t i = 0; i < size(); ++i) {
        const bool last = i + 1 == size();
        t.push_back(RawDesc{buf(), 64, last ? uint16_t{0} : kNext, static_cast<uint16_t>(i + 1)});
    }
    const GuestAddr table = rb_->alloc_indirect_table(t);
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, table.value, 16u * size(), kIndirect, 0);
    avail(0);
    expect_breaks(RingError::ChainTooLong);
}

TEST_F(DeviceQueuePop, AcceptsDirectDescriptorsFollowedByIndirectTable) {
    const GuestAddr table = rb_->alloc_indirect_table({RawDesc{buf(), 64, 0, 0}});
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, table.value, 16, kIndirect, 0);
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->out_num, 2);
}

// ---- indirect descriptors ---------------------------------------------------

TEST_F(DeviceQueuePop, RejectsIndirectInsideIndirectTable) {
    const GuestAddr inner = rb_->alloc_indirect_table({RawDesc{buf(), 64, 0, 0}});
    const GuestAddr outer = rb_->alloc_indirect_table({
        RawDesc{buf(), 64, kNext, 1},
        RawDesc{inner.value, 16, kIndirect, 0},
    });
    rb_->write_desc(0, outer.value, 32, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::NestedIndirect);
}

TEST_F(DeviceQueuePop, RejectsIndirectWithNext) {
    const GuestAddr t = rb_->alloc_indirect_table({RawDesc{buf(), 64, 0, 0}});
    rb_->write_desc(0, t.value, 16, kIndirect | kNext, 1);
    rb_->write_desc(1, buf(), 64, 0, 0);
    avail(0);
    expect_breaks(RingError::IndirectWithNext);
}

TEST_F(DeviceQueuePop, RejectsIndirectWhenNotNegotiated) {
    init(8, QueueFeatures{.indirect = false});
    const GuestAddr t = rb_->alloc_indirect_table({RawDesc{buf(), 64, 0, 0}});
    rb_->write_desc(0, t.value, 16, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::IndirectNotNegotiated);
}

TEST_F(DeviceQueuePop, RejectsIndirectTableOfZeroLength) {
    const GuestAddr t = rb_->alloc_indirect_table({RawDesc{buf(), 64, 0, 0}});
    rb_->write_desc(0, t.value, 0, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::IndirectBadLen);
}

TEST_F(DeviceQueuePop, RejectsIndirectTableLengthNotMultipleOf16) {
    // One whole, well-formed entry and a stray byte.
    const GuestAddr t = rb_->alloc_indirect_table({RawDesc{buf(), 64, 0, 0}, RawDesc{}});
    rb_->write_desc(0, t.value, 17, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::IndirectBadLen);
}

// A table of size + 1 entries whose first entry alone is a complete chain:
// only the length rule can reject it.
TEST_F(DeviceQueuePop, RejectsIndirectTableLongerThanQueueSize) {
    std::vector<RawDesc> t(size() + 1u, RawDesc{buf(), 64, 0, 0});
    const GuestAddr table = rb_->alloc_indirect_table(t);
    rb_->write_desc(0, table.value, 16u * (size() + 1u), kIndirect, 0);
    avail(0);
    expect_breaks(RingError::IndirectBadLen);
}

TEST_F(DeviceQueuePop, AcceptsIndirectTableOfQueueSizeEntries) {
    std::vector<RawDesc> t;
    for (uint16_t i = 0; i < size(); ++i) {
        const bool last = i + 1 == size();
        t.push_back(RawDesc{buf(), 64, last ? uint16_t{0} : kNext, static_cast<uint16_t>(i + 1)});
    }
    const GuestAddr table = rb_->alloc_indirect_table(t);
    rb_->write_desc(0, table.value, 16u * size(), kIndirect, 0);
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->out_num, size());
}

TEST_F(DeviceQueuePop, RejectsIndirectTableOutsideMemory) {
    rb_->write_desc(0, kUnmappedGpa, 32, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::IndirectUnmapped);
}

TEST_F(DeviceQueuePop, RejectsIndirectTableStraddlingRegionEnd) {
    const uint64_t t = rb_->main_end().value - 16;
    rb_->write_indirect_table(GuestAddr(t), {RawDesc{buf(), 64, 0, 0}});
    rb_->write_desc(0, t, 32, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::IndirectUnmapped);
}

TEST_F(DeviceQueuePop, RejectsIndirectTableAddressOverflow) {
    rb_->write_desc(0, ~uint64_t{0} - 15, 32, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::AddrOverflow);
}

// ---- buffer addresses and lengths --------------------------------------------

TEST_F(DeviceQueuePop, RejectsBufferOutsideAnyRegion) {
    rb_->write_desc(0, kUnmappedGpa, 64, 0, 0);
    avail(0);
    expect_breaks(RingError::AddrUnmapped);
}

// Guest address 0 is below the region at 0x10000: not a host null either.
TEST_F(DeviceQueuePop, RejectsBufferBelowFirstRegion) {
    rb_->write_desc(0, 0x1000, 64, 0, 0);
    avail(0);
    expect_breaks(RingError::AddrUnmapped);
}

TEST_F(DeviceQueuePop, RejectsBufferStraddlingRegionEnd) {
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, rb_->main_end().value - 8, 16, 0, 0);
    avail(0);
    expect_breaks(RingError::AddrUnmapped);
}

TEST_F(DeviceQueuePop, RejectsAddrPlusLenWrapping) {
    rb_->write_desc(0, 0xffff'ffff'ffff'fff0, 0x20, 0, 0);
    avail(0);
    expect_breaks(RingError::AddrOverflow);
}

// [2^64 - 16, 2^64) does not wrap: it is merely unmapped.
TEST_F(DeviceQueuePop, TreatsRangeEndingAtTopOfAddressSpaceAsUnmapped) {
    rb_->write_desc(0, 0xffff'ffff'ffff'fff0, 0x10, 0, 0);
    avail(0);
    expect_breaks(RingError::AddrUnmapped);
}

TEST_F(DeviceQueuePop, RejectsZeroLengthDescriptor) {
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, buf(), 0, 0, 0);
    avail(0);
    expect_breaks(RingError::ZeroLength);
}

TEST_F(DeviceQueuePop, RejectsZeroLengthDescriptorInsideIndirectTable) {
    const GuestAddr t = rb_->alloc_indirect_table({RawDesc{buf(), 0, 0, 0}});
    rb_->write_desc(0, t.value, 16, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::ZeroLength);
}

TEST_F(DeviceQueuePop, RejectsReadableAfterWritable) {
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, buf(), 64, kWrite | kNext, 2);
    rb_->write_desc(2, buf(), 64, 0, 0);
    avail(0);
    expect_breaks(RingError::ReadableAfterWritable);
}

TEST_F(DeviceQueuePop, RejectsDeviceWriteIntoReadOnlyMemory) {
    const GuestAddr ro(0x2000'0000);
    rb_->add_region(ro, 1 << 16, mem::Access::Read);
    rb_->write_desc(0, buf(), 64, kNext, 1);
    rb_->write_desc(1, ro.value + 128, 64, kWrite, 0);
    avail(0);
    expect_breaks(RingError::AddrAccessDenied);
}

TEST_F(DeviceQueuePop, AcceptsDeviceReadFromReadOnlyMemory) {
    const GuestAddr ro(0x2000'0000);
    rb_->add_region(ro, 1 << 16, mem::Access::Read);
    rb_->write_desc(0, ro.value + 128, 64, 0, 0);
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    ASSERT_EQ(chain_->out_num, 1);
    EXPECT_EQ(chain_->iov[0].iov_base, rb_->host(GuestAddr(ro.value + 128)));
}

// The 4 GiB total is checked before the descriptor is translated, so a
// length no region could hold still reports ChainOver4GiB, not AddrUnmapped.
TEST_F(DeviceQueuePop, RejectsChainOver4GiBBeforeTranslating) {
    rb_->write_desc(0, buf(), 16, kNext, 1);
    rb_->write_desc(1, buf(), 0xffff'fff0, 0, 0);  // 16 + 0xfffffff0 = 2^32
    avail(0);
    expect_breaks(RingError::ChainOver4GiB);
}

// Two 2 GiB descriptors inside mapped memory (a sparse memfd: no page is
// touched) add up to 2^32.
TEST_F(DeviceQueuePop, RejectsChainOver4GiBOfMappedBuffers) {
    const GuestAddr big(0x1'0000'0000);
    rb_->add_region(big, std::size_t{1} << 31);
    rb_->write_desc(0, big.value, 0x8000'0000, kNext, 1);
    rb_->write_desc(1, big.value, 0x8000'0000, kWrite, 0);
    avail(0);
    expect_breaks(RingError::ChainOver4GiB);
}

TEST_F(DeviceQueuePop, AcceptsChainOfExactly4GiBMinusOne) {
    const GuestAddr big(0x1'0000'0000);
    rb_->add_region(big, std::size_t{1} << 31);
    rb_->write_desc(0, big.value, 0x8000'0000, kNext, 1);
    rb_->write_desc(1, big.value, 0x7fff'ffff, kWrite, 0);
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->out_bytes, 0x8000'0000u);
    EXPECT_EQ(chain_->in_bytes, 0x7fff'ffffu);
}

// ---- iovec capacity -----------------------------------------------------------

class DeviceQueuePopIovs : public DeviceQueuePop {
protected:
    void SetUp() override { init(2048, QueueFeatures{.indirect = true}); }
    static constexpr uint16_t kDescs = kMaxIov + 1;
};

TEST_F(DeviceQueuePopIovs, RejectsDirectChainOfMoreThanMaxIovPieces) {
    const uint64_t data = rb_->alloc(kDescs).value;
    for (uint16_t i = 0; i < kDescs; ++i) {
        const bool last = i + 1 == kDescs;
        rb_->write_desc(i, data + i, 1, last ? 0 : kNext, static_cast<uint16_t>(i + 1));
    }
    avail(0);
    expect_breaks(RingError::TooManyIovs);
}

TEST_F(DeviceQueuePopIovs, RejectsIndirectChainOfMoreThanMaxIovPieces) {
    const uint64_t data = rb_->alloc(kDescs).value;
    std::vector<RawDesc> t;
    for (uint16_t i = 0; i < kDescs; ++i) {
        const bool last = i + 1 == kDescs;
        t.push_back(RawDesc{data + i, 1, last ? uint16_t{0} : kNext, static_cast<uint16_t>(i + 1)});
    }
    const GuestAddr table = rb_->alloc_indirect_table(t);
    rb_->write_desc(0, table.value, 16u * kDescs, kIndirect, 0);
    avail(0);
    expect_breaks(RingError::TooManyIovs);
}

TEST_F(DeviceQueuePopIovs, AcceptsChainOfExactlyMaxIovPieces) {
    const uint64_t data = rb_->alloc(kMaxIov).value;
    for (uint16_t i = 0; i < kMaxIov; ++i) {
        const bool last = i + 1 == kMaxIov;
        rb_->write_desc(i, data + i, 1, last ? 0 : kNext, static_cast<uint16_t>(i + 1));
    }
    avail(0);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->out_num, kMaxIov);
}

// ---- push: the caller's errors, not the driver's -----------------------------

class DeviceQueuePush : public DeviceQueuePop {};

TEST_F(DeviceQueuePush, RejectsIdNotInFlightWithoutBreaking) {
    const uint16_t head = rb_->add_chain({}, {rb_->alloc_buf(100)});
    ASSERT_EQ(pop(), PopStatus::Ok);

    for (uint16_t bad : {uint16_t(head + 1), size(), uint16_t{0xffff}}) {
        SCOPED_TRACE(bad);
        auto s = q_->push_used(bad, 0);
        ASSERT_FALSE(s.has_value());
        EXPECT_EQ(s.error(), RingError::PushIdNotInflight);
    }
    EXPECT_EQ(q_->stats().errors.get(RingError::PushIdNotInflight), 3u);
    EXPECT_FALSE(q_->broken());
    EXPECT_EQ(rb_->used_ring_bytes(), used_before_);
    EXPECT_EQ(q_->stats().used_publishes.get(), 0u);

    // The queue still works, and a pushed id is no longer in flight.
    ASSERT_TRUE(q_->push_used(head, 100).has_value());
    EXPECT_EQ(rb_->used_idx(), 1);
    auto again = q_->push_used(head, 0);
    ASSERT_FALSE(again.has_value());
    EXPECT_EQ(again.error(), RingError::PushIdNotInflight);
    EXPECT_EQ(rb_->used_idx(), 1);
    EXPECT_EQ(q_->stats().errors.get(RingError::PushIdNotInflight), 4u);
    EXPECT_FALSE(q_->broken());
}

TEST_F(DeviceQueuePush, RejectsLenAboveWritableBytesWithoutBreaking) {
    const uint16_t head =
        rb_->add_chain({rb_->alloc_buf(500)}, {rb_->alloc_buf(100), rb_->alloc_buf(50)});
    ASSERT_EQ(pop(), PopStatus::Ok);
    ASSERT_EQ(chain_->in_bytes, 150u);

    auto s = q_->push_used(head, 151);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error(), RingError::PushLenTooLong);
    EXPECT_EQ(q_->stats().errors.get(RingError::PushLenTooLong), 1u);
    EXPECT_FALSE(q_->broken());
    EXPECT_EQ(rb_->used_ring_bytes(), used_before_);

    // Still in flight: the exact writable length is accepted.
    ASSERT_TRUE(q_->push_used(head, 150).has_value());
    EXPECT_EQ(rb_->used_idx(), 1);
    EXPECT_EQ(rb_->used_elem(0), (test::RawUsed{head, 150}));
}

TEST_F(DeviceQueuePush, RejectsAnyLenForReadOnlyChain) {
    const uint16_t head = rb_->add_chain({rb_->alloc_buf(500)}, {});
    ASSERT_EQ(pop(), PopStatus::Ok);
    auto s = q_->push_used(head, 1);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error(), RingError::PushLenTooLong);
    ASSERT_TRUE(q_->push_used(head, 0).has_value());
    EXPECT_FALSE(q_->broken());
}

// ---- reset ------------------------------------------------------------------

TEST_F(DeviceQueuePop, ResetClearsBrokenState) {
    rb_->set_avail_slot(0, size());
    rb_->set_avail_idx(1);
    ASSERT_EQ(pop(), PopStatus::Broken);
    ASSERT_TRUE(q_->broken());

    q_->reset();
    EXPECT_FALSE(q_->broken());
    EXPECT_EQ(q_->last_avail_idx(), RingIdx(0));
    EXPECT_EQ(q_->used_idx(), RingIdx(0));
    // The driver re-initialises its ring; the queue works again.
    rb_->clear_ring();
    const uint16_t head = rb_->add_chain({}, {rb_->alloc_buf(64)});
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->head, head);
    ASSERT_TRUE(q_->push_used(head, 64).has_value());
    EXPECT_EQ(rb_->used_idx(), 1);
    // The counter is history: reset does not erase why the queue broke.
    EXPECT_EQ(q_->stats().errors.get(RingError::HeadOutOfRange), 1u);
}

// Chains popped before the break are dropped, not completed: pushing them
// afterwards publishes nothing.
TEST_F(DeviceQueuePop, PublishesNothingForChainsPoppedBeforeBreaking) {
    const uint16_t head = rb_->add_chain({}, {rb_->alloc_buf(64)});
    ASSERT_EQ(pop(), PopStatus::Ok);
    rb_->set_avail_slot(rb_->next_avail().slot(size()), size());
    rb_->set_avail_idx(static_cast<uint16_t>(rb_->next_avail().value() + 1));
    ASSERT_EQ(pop(), PopStatus::Broken);
    (void)q_->push_used(head, 64);
    EXPECT_EQ(rb_->used_idx(), 0);
    EXPECT_EQ(rb_->used_ring_bytes(), used_before_);
    EXPECT_EQ(q_->stats().used_publishes.get(), 0u);
}

// Used entries staged before the break are not published by a later flush:
// a broken queue stops writing the ring.
TEST_F(DeviceQueuePop, DropsStagedUsedEntriesWhenBroken) {
    const uint16_t head = rb_->add_chain({}, {rb_->alloc_buf(64)});
    ASSERT_EQ(pop(), PopStatus::Ok);
    ASSERT_TRUE(q_->add_used(head, 64).has_value());
    const auto staged = rb_->used_ring_bytes();  // the elem is written, idx is not
    rb_->set_avail_slot(rb_->next_avail().slot(size()), size());
    rb_->set_avail_idx(static_cast<uint16_t>(rb_->next_avail().value() + 1));
    ASSERT_EQ(pop(), PopStatus::Broken);
    q_->flush_used();
    EXPECT_EQ(rb_->used_idx(), 0);
    EXPECT_EQ(rb_->used_ring_bytes(), staged);
    EXPECT_EQ(q_->stats().used_publishes.get(), 0u);
}

}  // namespace
}  // namespace pvnet::ring
