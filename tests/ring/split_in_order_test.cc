// SplitDeviceQueue with VIRTIO_F_IN_ORDER (VIRTIO 1.2 2.7.9: the device uses
// buffers in the order they were made available): pushes of the oldest chain
// in flight pass, unpop keeps the order, any other push breaks the queue
// (PushOutOfOrder, before anything reaches the used ring); without the
// feature the same push is legal. An inflight log is recovered only when the
// heads it holds are the avail ring's next ones in its pop order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "pvnet/mem/memory_region.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/inflight.h"
#include "pvnet/virtio/inflight.h"
#include "ring_builder.h"

namespace pvnet::ring {
namespace {

using test::QueueFeatures;
using test::RawUsed;
using test::RingBuilder;

constexpr uint16_t kSize = 16;

class InOrder : public ::testing::Test {
protected:
    InOrder() : rb_(kSize), buf_(rb_.alloc_buf(64)) {}

    /// A one-buffer rx-like chain at descriptor `head`: ids out of table order,
    /// so a used entry's id says which chain it was.
    void add_at(int head) { rb_.add_chain_at(static_cast<uint16_t>(head), {}, {buf_}); }
    uint16_t pop(SplitDeviceQueue& q) {
        EXPECT_EQ(q.pop(chain_), PopStatus::Ok);
        return chain_.head;
    }

    RingBuilder rb_;
    Buf buf_;
    DescChain chain_;
};

TEST_F(InOrder, PushesInPopOrderAcrossUnpopAndBurstsPass) {
    auto q = rb_.make_device(QueueFeatures{.in_order = true});
    for (const int h : {9, 2, 7, 4}) add_at(h);
    EXPECT_EQ(pop(*q), 9);
    EXPECT_EQ(pop(*q), 2);
    EXPECT_EQ(pop(*q), 7);
    q->unpop(1);  // 7 goes back: the oldest in flight is still 9
    ASSERT_TRUE(q->add_used(9, 64));
    q->flush_used();
    EXPECT_EQ(pop(*q), 7);
    EXPECT_EQ(pop(*q), 4);
    ASSERT_TRUE(q->add_used(2, 0));  // a dropped chain keeps its place
    ASSERT_TRUE(q->add_used(7, 64));
    ASSERT_TRUE(q->add_used(4, 64));
    q->flush_used();
    EXPECT_FALSE(q->broken());
    EXPECT_EQ(q->stats().errors.get(RingError::PushOutOfOrder), 0u);
    ASSERT_EQ(rb_.used_idx(), 4);
    EXPECT_EQ(rb_.used_elem(0), (RawUsed{9, 64}));
    EXPECT_EQ(rb_.used_elem(1), (RawUsed{2, 0}));
    EXPECT_EQ(rb_.used_elem(2), (RawUsed{7, 64}));
    EXPECT_EQ(rb_.used_elem(3), (RawUsed{4, 64}));
}

TEST_F(InOrder, OrderHoldsAcrossTheIndexWrap) {
    auto q = rb_.make_device(QueueFeatures{.in_order = true});
    // 70 000 chains through a 16-entry ring: avail and used idx wrap 2^16.
    for (uint32_t n = 0; n < 70000; n += 3) {
        for (uint32_t k = 0; k < 3; ++k) add_at(static_cast<int>((n + k) % kSize));
        uint16_t heads[3];
        for (uint16_t& h : heads) h = pop(*q);
        q->unpop(1);
        heads[2] = pop(*q);
        const UsedElem done[] = {{heads[0], 1}, {heads[1], 1}, {heads[2], 1}};
        ASSERT_TRUE(q->push_used_batch(done)) << n;
    }
    EXPECT_FALSE(q->broken());
}

TEST_F(InOrder, PushOfANewerChainBreaksTheQueueBeforeTheUsedRing) {
    auto q = rb_.make_device(QueueFeatures{.in_order = true});
    for (const int h : {9, 2}) add_at(h);
    (void)pop(*q);
    (void)pop(*q);
    const auto s = q->add_used(2, 64);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error(), RingError::PushOutOfOrder);
    EXPECT_TRUE(q->broken());
    EXPECT_EQ(q->broken_reason(), RingError::PushOutOfOrder);
    EXPECT_EQ(q->stats().errors.get(RingError::PushOutOfOrder), 1u);
    EXPECT_TRUE(breaks_queue(RingError::PushOutOfOrder));
    q->flush_used();
    EXPECT_EQ(rb_.used_idx(), 0) << "nothing published";
    EXPECT_EQ(rb_.used_elem(0), (RawUsed{0, 0})) << "nothing written";
}

TEST_F(InOrder, WithoutTheFeatureAnyInflightOrderIsLegal) {
    auto q = rb_.make_device();
    for (const int h : {9, 2}) add_at(h);
    (void)pop(*q);
    (void)pop(*q);
    ASSERT_TRUE(q->add_used(2, 64));
    ASSERT_TRUE(q->add_used(9, 64));
    q->flush_used();
    EXPECT_FALSE(q->broken());
    EXPECT_EQ(rb_.used_elem(0), (RawUsed{2, 64}));
}

TEST_F(InOrder, ResetStartsTheOrderAfresh) {
    auto q = rb_.make_device(QueueFeatures{.in_order = true});
    add_at(5);
    add_at(6);
    (void)pop(*q);
    (void)pop(*q);
    ASSERT_TRUE(q->push_used(5, 64));
    q->reset();
    rb_.clear_ring();  // the driver starts over
    add_at(3);
    EXPECT_EQ(pop(*q), 3);
    ASSERT_TRUE(q->push_used(3, 64));
    EXPECT_FALSE(q->broken());
}

// ---- with an inflight log ---------------------------------------------------

class InOrderInflight : public InOrder {
protected:
    InOrderInflight()
        : log_region_(mem::MemoryRegion::create(virtio::inflight_queue_bytes(kSize), "inflight")
                          .value()) {
        EXPECT_TRUE(init_split_inflight(log(), kSize));
    }
    std::span<std::byte> log() { return {log_region_.host(), virtio::inflight_queue_bytes(kSize)}; }
    Result<std::unique_ptr<SplitDeviceQueue>, RingError> create() {
        DeviceQueueConfig c = rb_.device_config(QueueFeatures{.in_order = true});
        c.inflight = log();
        return SplitDeviceQueue::create(rb_.table(), c);
    }
    uint64_t counter(uint16_t head) {
        virtio::DescStateSplit d;
        std::memcpy(&d, log().data() + virtio::kInflightQueueHeader + 16u * head, sizeof d);
        return d.counter;
    }
    void set_counter(uint16_t head, uint64_t c) {
        virtio::DescStateSplit d;
        std::byte* p = log().data() + virtio::kInflightQueueHeader + 16u * head;
        std::memcpy(&d, p, sizeof d);
        d.counter = c;
        std::memcpy(p, &d, sizeof d);
    }
    /// A queue popped 9 2 7 4, used 9 and died: 2 7 4 left in flight.
    void abandon() {
        for (const int h : {9, 2, 7, 4}) add_at(h);
        auto q = create();
        ASSERT_TRUE(q);
        for (int i = 0; i < 4; ++i) (void)pop(**q);
        ASSERT_TRUE((*q)->push_used(9, 64));
    }

    mem::MemoryRegion log_region_;
};

TEST_F(InOrderInflight, HeadsLeftByAnInOrderDeviceAreReturnedInAvailOrder) {
    abandon();
    auto q = create();
    ASSERT_TRUE(q) << to_string(q.error());
    EXPECT_EQ((*q)->stats().inflight_dropped.get(), 3u);
    ASSERT_EQ(rb_.used_idx(), 4);
    EXPECT_EQ(rb_.used_elem(1), (RawUsed{2, 0}));
    EXPECT_EQ(rb_.used_elem(2), (RawUsed{7, 0}));
    EXPECT_EQ(rb_.used_elem(3), (RawUsed{4, 0}));
    // The order goes on after them.
    add_at(11);
    add_at(1);
    EXPECT_EQ(pop(**q), 11);
    EXPECT_EQ(pop(**q), 1);
    ASSERT_TRUE((*q)->add_used(11, 64));
    ASSERT_TRUE((*q)->add_used(1, 64));
    (*q)->flush_used();
    EXPECT_FALSE((*q)->broken());
}

TEST_F(InOrderInflight, ALogWhosePopOrderIsNotTheAvailOrderIsRefused) {
    abandon();
    // Swap 2 and 7: returned in that order, the driver would take 7's buffer for 2's.
    const uint64_t c2 = counter(2), c7 = counter(7);
    set_counter(2, c7);
    set_counter(7, c2);
    std::vector<std::byte> before(log().begin(), log().end());
    auto q = create();
    ASSERT_FALSE(q);
    EXPECT_EQ(q.error(), RingError::InflightNotInOrder);
    EXPECT_EQ(rb_.used_idx(), 1) << "the ring is left as it was";
    EXPECT_TRUE(std::equal(before.begin(), before.end(), log().begin())) << "and the log";
}

}  // namespace
}  // namespace pvnet::ring
