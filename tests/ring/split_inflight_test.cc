// SplitDeviceQueue with an inflight log (vhost-user "Inflight I/O tracking"):
// what pop, unpop and flush_used record, and the recovery a new queue runs
// over a log a dead device left — abandoned queues (the destructor writes
// nothing to the log, so dropping a queue is what SIGKILL leaves), a crash
// between the used publish and the log's clear, and hostile logs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "pvnet/mem/memory_region.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/inflight.h"
#include "pvnet/virtio/inflight.h"
#include "ring_builder.h"

namespace pvnet::ring {
namespace {

using test::RawUsed;
using test::RingBuilder;
using virtio::DescStateSplit;
using virtio::QueueRegionSplit;

constexpr uint16_t kSize = 16;

/// A ring and its log (in a memfd, as the vhost-user buffer is).
class Inflight : public ::testing::Test {
protected:
    Inflight()
        : rb_(kSize),
          log_region_(mem::MemoryRegion::create(virtio::inflight_queue_bytes(kSize), "inflight")
                          .value()) {
        EXPECT_TRUE(init_split_inflight(log(), kSize));
    }

    std::span<std::byte> log() { return {log_region_.host(), virtio::inflight_queue_bytes(kSize)}; }
    std::vector<std::byte> log_copy() { return {log().begin(), log().end()}; }
    void restore_log(const std::vector<std::byte>& b) { std::memcpy(log().data(), b.data(), b.size()); }

    QueueRegionSplit header() {
        QueueRegionSplit h;
        std::memcpy(&h, log().data(), sizeof h);
        return h;
    }
    DescStateSplit entry(uint16_t head) {
        DescStateSplit d;
        std::memcpy(&d, log().data() + virtio::kInflightQueueHeader + 16u * head, sizeof d);
        return d;
    }
    void set_entry(uint16_t head, uint8_t inflight, uint64_t counter) {
        DescStateSplit d{};
        d.inflight = inflight;
        d.counter = counter;
        std::memcpy(log().data() + virtio::kInflightQueueHeader + 16u * head, &d, sizeof d);
    }
    template <typename T>
    void poke(std::size_t off, T v) {
        std::memcpy(log().data() + off, &v, sizeof v);
    }
    std::vector<uint16_t> inflight_heads() {
        std::vector<uint16_t> v;
        for (uint16_t h = 0; h < kSize; ++h) {
            if (entry(h).inflight != 0) v.push_back(h);
        }
        return v;
    }

    Result<std::unique_ptr<SplitDeviceQueue>, RingError> create(RingIdx base = {},
                                                                std::span<std::byte> l = {}) {
        DeviceQueueConfig c = rb_.device_config({}, base);
        c.inflight = l.empty() ? log() : l;
        return SplitDeviceQueue::create(rb_.table(), c);
    }
    std::unique_ptr<SplitDeviceQueue> make(RingIdx base = {}) {
        auto q = create(base);
        EXPECT_TRUE(q) << (q ? "" : to_string(q.error()));
        return q ? std::move(*q) : nullptr;
    }
    /// A one-buffer rx-like chain at descriptor `head`.
    void add_at(int head) { rb_.add_chain_at(static_cast<uint16_t>(head), {}, {rb_.alloc_buf(64)}); }
    uint16_t pop(SplitDeviceQueue& q) {
        EXPECT_EQ(q.pop(chain_), PopStatus::Ok);
        return chain_.head;
    }

    RingBuilder rb_;
    mem::MemoryRegion log_region_;
    DescChain chain_;
};

TEST_F(Inflight, FreshLogHeaderIsVersionOneForTheRingSize) {
    const QueueRegionSplit h = header();
    EXPECT_EQ(h.version, 1);
    EXPECT_EQ(h.desc_num, kSize);
    EXPECT_EQ(h.used_idx, 0);
    EXPECT_TRUE(inflight_heads().empty());
    std::vector<std::byte> small(virtio::inflight_queue_bytes(kSize) - 1);
    EXPECT_FALSE(init_split_inflight(small, kSize));
}

TEST_F(Inflight, PopRecordsInCounterOrderUnpopForgetsPublishClears) {
    auto q = make();
    for (const int h : {9, 2, 7}) add_at(h);
    EXPECT_EQ(pop(*q), 9);
    EXPECT_EQ(pop(*q), 2);
    EXPECT_EQ(pop(*q), 7);
    EXPECT_EQ(inflight_heads(), (std::vector<uint16_t>{2, 7, 9}));
    EXPECT_LT(entry(9).counter, entry(2).counter);
    EXPECT_LT(entry(2).counter, entry(7).counter);
    q->unpop(1);
    EXPECT_EQ(entry(7).inflight, 0);
    // Staged is not used: still in flight until the publish.
    ASSERT_TRUE(q->add_used(2, 10));
    EXPECT_EQ(entry(2).inflight, 1);
    EXPECT_EQ(header().used_idx, 0);
    q->flush_used();
    EXPECT_EQ(entry(2).inflight, 0);
    EXPECT_EQ(header().used_idx, 1);
    EXPECT_EQ(header().last_batch_head, 2);
    EXPECT_EQ(inflight_heads(), (std::vector<uint16_t>{9}));
    EXPECT_EQ(q->stats().inflight_dropped.get(), 0u);
}

// SIGKILL: the queue goes without anything returned. Its successor returns
// the heads in flight used with length 0, in pop (counter) order, resumes
// after them, and never pops them again.
TEST_F(Inflight, AbandonedQueueIsRecoveredInCounterOrderAndNothingPoppedTwice) {
    for (const int h : {9, 2, 7, 4, 0, 11}) add_at(h);
    {
        auto q = make();
        for (int i = 0; i < 5; ++i) (void)pop(*q);  // 9 2 7 4 0
        const UsedElem done[] = {{2, 64}, {4, 0}};
        ASSERT_TRUE(q->push_used_batch(done));
        const auto before = log_copy();
        q.reset();  // no stop, no unpop: what a dead process leaves
        EXPECT_EQ(log_copy(), before) << "the destructor writes nothing to the log";
    }
    auto q = make(RingIdx(1234));  // SET_VRING_BASE's value is ignored with a log
    EXPECT_EQ(q->stats().inflight_dropped.get(), 3u);
    EXPECT_EQ(rb_.used_idx(), 5);
    EXPECT_EQ(rb_.used_elem(2), (RawUsed{9, 0}));
    EXPECT_EQ(rb_.used_elem(3), (RawUsed{7, 0}));
    EXPECT_EQ(rb_.used_elem(4), (RawUsed{0, 0}));
    EXPECT_EQ(q->last_avail_idx(), RingIdx(5));
    EXPECT_EQ(q->used_idx(), RingIdx(5));
    EXPECT_TRUE(inflight_heads().empty());
    EXPECT_EQ(header().used_idx, 5);
    EXPECT_EQ(header().last_batch_head, 0);
    // Only the chain never popped comes next.
    EXPECT_EQ(pop(*q), 11);
    EXPECT_EQ(q->pop(chain_), PopStatus::Empty);
    // The recovered heads are free: the driver may post them again.
    add_at(9);
    EXPECT_EQ(pop(*q), 9);
}

// The dead device published used.idx but never cleared that batch from the
// log: its heads are in the used ring past the log's used_idx, so they are
// not returned a second time.
TEST_F(Inflight, CrashBetweenUsedPublishAndLogClearReturnsOnlyTheRest) {
    for (const int h : {3, 5, 8, 1}) add_at(h);
    {
        auto q = make();
        for (int i = 0; i < 4; ++i) (void)pop(*q);
        const auto before_publish = log_copy();
        const UsedElem done[] = {{5, 64}, {1, 64}};
        ASSERT_TRUE(q->push_used_batch(done));
        ASSERT_EQ(rb_.used_idx(), 2);
        restore_log(before_publish);  // used.idx stored, nothing after it
        q.reset();
    }
    ASSERT_EQ(header().used_idx, 0);
    ASSERT_EQ(inflight_heads().size(), 4u);
    auto q = make();
    EXPECT_EQ(q->stats().inflight_dropped.get(), 2u);
    EXPECT_EQ(rb_.used_idx(), 4);
    EXPECT_EQ(rb_.used_elem(2), (RawUsed{3, 0}));
    EXPECT_EQ(rb_.used_elem(3), (RawUsed{8, 0}));
    EXPECT_EQ(q->last_avail_idx(), RingIdx(4));
    EXPECT_TRUE(inflight_heads().empty());
    EXPECT_EQ(header().used_idx, 4);
}

// A crash after the clears but before the log's used_idx: nothing marked, the
// log's used_idx only catches up.
TEST_F(Inflight, CrashBeforeLogUsedIdxOnlyCatchesUp) {
    for (const int h : {3, 5}) add_at(h);
    {
        auto q = make();
        (void)pop(*q);
        (void)pop(*q);
        const UsedElem done[] = {{3, 64}, {5, 64}};
        ASSERT_TRUE(q->push_used_batch(done));
        poke<uint16_t>(offsetof(QueueRegionSplit, used_idx), 0);
    }
    auto q = make();
    EXPECT_EQ(q->stats().inflight_dropped.get(), 0u);
    EXPECT_EQ(rb_.used_idx(), 2);
    EXPECT_EQ(header().used_idx, 2);
    EXPECT_EQ(q->last_avail_idx(), RingIdx(2));
}

// A clean stop (every popped chain used or unpopped) leaves nothing to recover.
TEST_F(Inflight, CleanStopLeavesNothingInFlight) {
    for (const int h : {3, 5, 6}) add_at(h);
    {
        auto q = make();
        for (int i = 0; i < 3; ++i) (void)pop(*q);
        q->unpop(1);
        const UsedElem done[] = {{3, 64}, {5, 64}};
        ASSERT_TRUE(q->push_used_batch(done));
        EXPECT_EQ(q->last_avail_idx(), q->used_idx());
    }
    EXPECT_TRUE(inflight_heads().empty());
    auto q = make(RingIdx(2));
    EXPECT_EQ(q->stats().inflight_dropped.get(), 0u);
    EXPECT_EQ(q->last_avail_idx(), RingIdx(2));
    EXPECT_EQ(pop(*q), 6);
}

// A fresh log (GET_INFLIGHT_FD) given to a ring that already ran: nothing
// in flight, the log's used_idx simply follows the ring.
TEST_F(Inflight, FreshLogOnARingThatRanFollowsItsUsedIdx) {
    rb_.set_used_idx(1000);
    rb_.set_avail_idx(1000);
    rb_.set_next_avail(RingIdx(1000));
    auto q = make(RingIdx(1000));
    EXPECT_EQ(q->stats().inflight_dropped.get(), 0u);
    EXPECT_EQ(header().used_idx, 1000);
    EXPECT_EQ(q->last_avail_idx(), RingIdx(1000));
    add_at(4);
    EXPECT_EQ(pop(*q), 4);
}

TEST_F(Inflight, RecoveryAcrossTheIndexWrap) {
    rb_.set_used_idx(65534);
    rb_.set_avail_idx(65534);
    rb_.set_next_avail(RingIdx(65534));
    poke<uint16_t>(offsetof(QueueRegionSplit, used_idx), 65534);
    for (const int h : {1, 2, 3, 4}) add_at(h);
    {
        auto q = make();
        for (int i = 0; i < 4; ++i) (void)pop(*q);
        ASSERT_TRUE(q->push_used(2, 64));
    }
    auto q = make();
    EXPECT_EQ(q->stats().inflight_dropped.get(), 3u);
    EXPECT_EQ(rb_.used_idx(), 2);
    EXPECT_EQ(q->last_avail_idx(), RingIdx(2));
    EXPECT_EQ(rb_.used_elem(RingIdx(65535).slot(kSize)), (RawUsed{1, 0}));
    EXPECT_EQ(rb_.used_elem(0), (RawUsed{3, 0}));
    EXPECT_EQ(rb_.used_elem(1), (RawUsed{4, 0}));
}

TEST_F(Inflight, ResetClearsTheLog) {
    add_at(3);
    auto q = make();
    (void)pop(*q);
    q->reset();
    EXPECT_TRUE(inflight_heads().empty());
    EXPECT_EQ(header().used_idx, 0);
}

// ---- hostile logs: refused with a reason, nothing written to log or ring ----

class HostileInflight : public Inflight {
protected:
    void expect_refused(RingError want, std::span<std::byte> l = {}) {
        const auto log_before = log_copy();
        const auto used_before = rb_.used_ring_bytes();
        auto q = create(RingIdx(0), l);
        ASSERT_FALSE(q);
        EXPECT_EQ(q.error(), want) << to_string(q.error());
        EXPECT_EQ(log_copy(), log_before);
        EXPECT_EQ(rb_.used_ring_bytes(), used_before);
    }
};

TEST_F(HostileInflight, BadVersionIsRefused) {
    for (const int v : {0, 2, 0xffff}) {
        poke(offsetof(QueueRegionSplit, version), static_cast<uint16_t>(v));
        expect_refused(RingError::InflightBadLog);
    }
}

TEST_F(HostileInflight, DescNumOtherThanTheRingSizeIsRefused) {
    for (const int n : {0, 8, 32, 0xffff}) {
        poke(offsetof(QueueRegionSplit, desc_num), static_cast<uint16_t>(n));
        expect_refused(RingError::InflightBadLog);
    }
}

TEST_F(HostileInflight, ShortOrMisalignedLogIsRefused) {
    expect_refused(RingError::InflightBadLog, log().first(log().size() - 64));
    expect_refused(RingError::InflightBadLog, log().first(virtio::kInflightQueueHeader));
    // Misaligned: same bytes from 4 further on (the mapping is a page longer).
    std::memmove(log().data() + 4, log().data(), log().size() - 4);
    expect_refused(RingError::InflightBadLog,
                   std::span<std::byte>(log_region_.host() + 4, log().size()));
}

TEST_F(HostileInflight, FlagOtherThanZeroOrOneIsRefused) {
    for (const int f : {2, 0x80, 0xff}) {
        rb_.set_avail_idx(kSize);
        set_entry(5, static_cast<uint8_t>(f), 1);
        expect_refused(RingError::InflightBadLog);
    }
}

TEST_F(HostileInflight, MoreInFlightThanAvailableIsRefused) {
    // Nothing was ever made available, yet heads are marked.
    set_entry(5, 1, 1);
    expect_refused(RingError::InflightTooMany);
    // Every head marked, two available.
    for (uint16_t h = 0; h < kSize; ++h) set_entry(h, 1, h);
    rb_.set_avail_idx(2);
    expect_refused(RingError::InflightTooMany);
}

TEST_F(HostileInflight, LogUsedIdxTooFarBehindIsRefused) {
    rb_.set_avail_idx(100);
    rb_.set_used_idx(99);
    set_entry(5, 1, 1);
    poke<uint16_t>(offsetof(QueueRegionSplit, used_idx), static_cast<uint16_t>(99 - kSize - 1));
    expect_refused(RingError::InflightBadUsed);
    // Behind by 65535 (one ahead, really).
    poke<uint16_t>(offsetof(QueueRegionSplit, used_idx), 100);
    expect_refused(RingError::InflightBadUsed);
}

TEST_F(HostileInflight, UsedIdOutOfRangeInTheCatchUpRangeIsRefused) {
    rb_.set_avail_idx(3);
    rb_.set_used_idx(2);
    rb_.set_used_elem(0, 4, 0);
    rb_.set_used_elem(1, kSize, 0);  // one past the table
    set_entry(4, 1, 1);
    set_entry(6, 1, 2);
    expect_refused(RingError::InflightBadUsed);
    rb_.set_used_elem(1, 0x10004, 0);  // a 16-bit truncation would name head 4
    expect_refused(RingError::InflightBadUsed);
}

// Garbage counters (duplicates, the maximum) only order the returns: each
// marked head comes back once, ties by head.
TEST_F(HostileInflight, GarbageCountersStillReturnEachHeadOnce) {
    rb_.set_avail_idx(4);
    set_entry(7, 1, UINT64_MAX);
    set_entry(3, 1, 5);
    set_entry(1, 1, 5);
    set_entry(9, 1, 0);
    auto q = make();
    EXPECT_EQ(q->stats().inflight_dropped.get(), 4u);
    EXPECT_EQ(rb_.used_idx(), 4);
    EXPECT_EQ(rb_.used_elem(0), (RawUsed{9, 0}));
    EXPECT_EQ(rb_.used_elem(1), (RawUsed{1, 0}));
    EXPECT_EQ(rb_.used_elem(2), (RawUsed{3, 0}));
    EXPECT_EQ(rb_.used_elem(3), (RawUsed{7, 0}));
    EXPECT_TRUE(inflight_heads().empty());
    EXPECT_EQ(q->last_avail_idx(), RingIdx(4));
}

// Random bytes over every entry: refused or recovered, never out of bounds.
TEST_F(HostileInflight, RandomEntriesNeverCrash) {
    uint64_t x = 0x9e3779b97f4a7c15;
    int recovered = 0, refused = 0;
    for (int round = 0; round < 200; ++round) {
        ASSERT_TRUE(init_split_inflight(log(), kSize));
        rb_.set_used_idx(0);
        for (uint16_t h = 0; h < kSize; ++h) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            set_entry(h, static_cast<uint8_t>(x % 3 == 0 ? 1 : (x % 7 == 0 ? x >> 8 : 0)), x >> 16);
        }
        poke<uint16_t>(offsetof(QueueRegionSplit, used_idx), static_cast<uint16_t>((x >> 40) % 4));
        rb_.set_avail_idx(static_cast<uint16_t>((x >> 20) % 20));
        rb_.set_used_idx(static_cast<uint16_t>((x >> 30) % 3));
        auto q = create();
        if (q) {
            EXPECT_TRUE(inflight_heads().empty());
            EXPECT_EQ((*q)->last_avail_idx(), (*q)->used_idx());
            recovered += (*q)->stats().inflight_dropped.get() != 0;
        } else {
            ++refused;
        }
    }
    EXPECT_GT(recovered, 0);
    EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace pvnet::ring
