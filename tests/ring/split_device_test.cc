// SplitDeviceQueue doing its job with a well-behaved driver: popping chains
// into host iovecs, publishing used entries in bursts, 16-bit index
// wrap-around, unpop, and restart at a base; the notification decisions
// are in split_device_notify_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_ring.h"
#include "ring_builder.h"

namespace pvnet::ring {
namespace {

using mem::GuestAddr;
using test::Publish;
using test::QueueFeatures;
using test::RawUsed;
using test::RingBuilder;
using virtio::VIRTQ_AVAIL_F_NO_INTERRUPT;

/// What a popped chain looked like, comparable across pops.
struct Snapshot {
    uint16_t head = 0;
    uint16_t out_num = 0;
    uint16_t in_num = 0;
    uint32_t out_bytes = 0;
    uint32_t in_bytes = 0;
    std::vector<std::pair<const void*, std::size_t>> iov;
    bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const DescChain& c) {
    Snapshot s{c.head, c.out_num, c.in_num, c.out_bytes, c.in_bytes, {}};
    for (std::size_t i = 0; i < std::size_t{c.out_num} + c.in_num; ++i) {
        s.iov.emplace_back(c.iov[i].iov_base, c.iov[i].iov_len);
    }
    return s;
}

struct Mode {
    bool event_idx;
    bool indirect;
};

class DeviceQueue : public ::testing::TestWithParam<Mode> {
protected:
    void SetUp() override { init(256); }

    void init(uint16_t size, std::size_t mem_bytes = RingBuilder::kDefaultMemBytes) {
        q_.reset();
        rb_ = std::make_unique<RingBuilder>(
            size, RingBuilder::Options{GuestAddr(RingBuilder::kDefaultBase), mem_bytes});
        q_ = rb_->make_device(
            QueueFeatures{.event_idx = GetParam().event_idx, .indirect = GetParam().indirect});
    }

    /// Adds a chain the way this mode's driver would: direct, or one
    /// indirect descriptor when the table is worth it.
    uint16_t add(std::span<const Buf> readable, std::span<const Buf> writable,
                 Publish publish = Publish::Yes) {
        return GetParam().indirect ? rb_->add_indirect_chain(readable, writable, publish)
                                   : rb_->add_chain(readable, writable, publish);
    }
    uint16_t add(std::initializer_list<Buf> readable, std::initializer_list<Buf> writable,
                 Publish publish = Publish::Yes) {
        return add(std::span<const Buf>(readable.begin(), readable.size()),
                   std::span<const Buf>(writable.begin(), writable.size()), publish);
    }

    PopStatus pop() { return q_->pop(*chain_); }

    /// Each buffer became exactly one iovec at the builder's host address
    /// for it, readable ones first, and carries the builder's bytes.
    void expect_iovs(std::span<const Buf> readable, std::span<const Buf> writable) {
        ASSERT_EQ(chain_->out_num, readable.size());
        ASSERT_EQ(chain_->in_num, writable.size());
        uint32_t out_bytes = 0;
        uint32_t in_bytes = 0;
        std::size_t i = 0;
        for (const Buf& b : readable) {
            EXPECT_EQ(chain_->iov[i].iov_base, rb_->host(b.gpa, b.len)) << "iov " << i;
            EXPECT_EQ(chain_->iov[i].iov_len, b.len) << "iov " << i;
            out_bytes += b.len;
            ++i;
        }
        for (const Buf& b : writable) {
            EXPECT_EQ(chain_->iov[i].iov_base, rb_->host(b.gpa, b.len)) << "iov " << i;
            EXPECT_EQ(chain_->iov[i].iov_len, b.len) << "iov " << i;
            in_bytes += b.len;
            ++i;
        }
        EXPECT_EQ(chain_->out_bytes, out_bytes);
        EXPECT_EQ(chain_->in_bytes, in_bytes);
        EXPECT_EQ(chain_->readable().size(), readable.size());
        EXPECT_EQ(chain_->writable().size(), writable.size());
        if (!writable.empty()) {
            EXPECT_EQ(chain_->writable().data(), &chain_->iov[readable.size()]);
        }
    }

    std::unique_ptr<RingBuilder> rb_;
    std::unique_ptr<SplitDeviceQueue> q_;
    std::unique_ptr<DescChain> chain_ = std::make_unique<DescChain>();
};

// ---- pop ----------------------------------------------------------------------

TEST_P(DeviceQueue, PopsReadableChainIntoHostIovecs) {
    const std::vector<Buf> out = {rb_->alloc_buf(12, 1), rb_->alloc_buf(200, 2),
                                  rb_->alloc_buf(4096, 3)};
    const uint16_t head = add(out, {});
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->head, head);
    expect_iovs(out, {});
    // The device reads the driver's bytes through the iovecs.
    const auto* p = static_cast<const std::byte*>(chain_->iov[1].iov_base);
    for (std::size_t k = 0; k < 200; ++k) ASSERT_EQ(p[k], RingBuilder::pattern_byte(2, k)) << k;
    EXPECT_EQ(q_->stats().pops.get(), 1u);
}

TEST_P(DeviceQueue, PopsReadableThenWritableChain) {
    const std::vector<Buf> out = {rb_->alloc_buf(12)};
    const std::vector<Buf> in = {rb_->alloc_buf(1500), rb_->alloc_buf(64)};
    const uint16_t head = add(out, in);
    ASSERT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(chain_->head, head);
    expect_iovs(out, in);
    // The builder laid out what it was asked to (its read_chain sees it too).
    const auto descs = rb_->read_chain(head);
    ASSERT_EQ(descs.size(), 3u);
    EXPECT_EQ(descs[0].addr, out[0].gpa.value);
    EXPECT_EQ(descs[2].flags & virtio::VIRTQ_DESC_F_WRITE, virtio::VIRTQ_DESC_F_WRITE);
    // The device writes where the driver will read.
    std::memset(chain_->writable()[0].iov_base, 0xab, 1500);
    EXPECT_EQ(*rb_->host(GuestAddr(in[0].gpa.value + 1499)), std::byte{0xab});
}

TEST_P(DeviceQueue, PopsWritableOnlyChain) {
    const std::vector<Buf> in = {rb_->alloc_buf(2048), rb_->alloc_buf(2048), rb_->alloc_buf(1)};
    add({}, in);
    ASSERT_EQ(pop(), PopStatus::Ok);
    expect_iovs({}, in);
}

TEST_P(DeviceQueue, PopsChainsInAvailOrder) {
    std::vector<uint16_t> heads;
    std::vector<Buf> bufs;
    for (int i = 0; i < 5; ++i) {
        bufs.push_back(rb_->alloc_buf(100 + static_cast<uint32_t>(i)));
        heads.push_back(add({bufs.back()}, {}));
    }
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(pop(), PopStatus::Ok);
        EXPECT_EQ(chain_->head, heads[static_cast<std::size_t>(i)]);
        expect_iovs(std::span<const Buf>(&bufs[static_cast<std::size_t>(i)], 1), {});
    }
    EXPECT_EQ(pop(), PopStatus::Empty);
}

// Two regions adjacent in guest space are two host mappings: one buffer
// across the boundary becomes one iovec per region.
TEST_P(DeviceQueue, SplitsBufferAcrossAdjacentRegionsIntoTwoIovecs) {
    const GuestAddr boundary = rb_->main_end();
    rb_->add_region(boundary, 1 << 16);
    const Buf hdr = rb_->alloc_buf(12);
    const Buf across{GuestAddr(boundary.value - 100), 300};
    rb_->fill_pattern(across.gpa, 100, 9);
    add({hdr}, {across});
    ASSERT_EQ(pop(), PopStatus::Ok);
    ASSERT_EQ(chain_->out_num, 1);
    ASSERT_EQ(chain_->in_num, 2);
    EXPECT_EQ(chain_->in_bytes, 300u);
    const auto w = chain_->writable();
    EXPECT_EQ(w[0].iov_base, rb_->host(across.gpa, 100));
    EXPECT_EQ(w[0].iov_len, 100u);
    EXPECT_EQ(w[1].iov_base, rb_->host(boundary, 200));
    EXPECT_EQ(w[1].iov_len, 200u);
    EXPECT_NE(static_cast<std::byte*>(w[0].iov_base) + 100, w[1].iov_base)
        << "the regions happen to be host-adjacent; the test shows nothing";
}

TEST_P(DeviceQueue, ReturnsEmptyWhenNothingAvailable) {
    EXPECT_EQ(pop(), PopStatus::Empty);
    EXPECT_EQ(q_->pending(), 0);
    // Laid out but not yet published: still nothing.
    add({rb_->alloc_buf(64)}, {}, Publish::No);
    EXPECT_EQ(pop(), PopStatus::Empty);
    rb_->publish();
    EXPECT_EQ(q_->pending(), 1);
    EXPECT_EQ(pop(), PopStatus::Ok);
    EXPECT_EQ(pop(), PopStatus::Empty);
    EXPECT_EQ(q_->stats().pops.get(), 1u);
    EXPECT_FALSE(q_->broken());
}

// ---- push -------------------------------------------------------------------

TEST_P(DeviceQueue, PushUsedPublishesEachEntry) {
    std::vector<uint16_t> heads;
    for (int i = 0; i < 3; ++i) heads.push_back(add({}, {rb_->alloc_buf(1000)}));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(pop(), PopStatus::Ok);
    for (uint16_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(q_->push_used(heads[i], 100u * i).has_value());
        EXPECT_EQ(rb_->used_idx(), i + 1);
        EXPECT_EQ(rb_->used_elem(i), (RawUsed{heads[i], 100u * i}));
    }
    EXPECT_EQ(q_->used_idx(), RingIdx(3));
    EXPECT_EQ(q_->stats().pushes.get(), 3u);
    EXPECT_EQ(q_->stats().used_publishes.get(), 3u);
}

TEST_P(DeviceQueue, AddUsedStagesEntriesUntilOneFlush) {
    std::vector<uint16_t> heads;
    for (int i = 0; i < 4; ++i) heads.push_back(add({}, {rb_->alloc_buf(1000)}));
    for (int i = 0; i < 4; ++i) ASSERT_EQ(pop(), PopStatus::Ok);
    // Completed out of order: used entries follow completion order.
    const uint16_t order[] = {2, 0, 3, 1};
    for (uint16_t k : order) ASSERT_TRUE(q_->add_used(heads[k], 10u + k).has_value());
    EXPECT_EQ(rb_->used_idx(), 0) << "staged entries are not visible before flush";
    EXPECT_EQ(q_->stats().used_publishes.get(), 0u);
    q_->flush_used();
    EXPECT_EQ(rb_->used_idx(), 4);
    EXPECT_EQ(q_->stats().used_publishes.get(), 1u);
    for (uint16_t s = 0; s < 4; ++s) {
        EXPECT_EQ(rb_->used_elem(s), (RawUsed{heads[order[s]], 10u + order[s]})) << s;
    }
    q_->flush_used();  // nothing staged: no second publish
    EXPECT_EQ(q_->stats().used_publishes.get(), 1u);
}

TEST_P(DeviceQueue, PushUsedBatchPublishesOnce) {
    std::vector<UsedElem> batch;
    for (int i = 0; i < 5; ++i) batch.push_back(UsedElem{add({}, {rb_->alloc_buf(500)}), 0});
    for (std::size_t i = 0; i < batch.size(); ++i) {
        ASSERT_EQ(pop(), PopStatus::Ok);
        batch[i].len = static_cast<uint32_t>(i * 100);
    }
    ASSERT_TRUE(q_->push_used_batch(batch).has_value());
    EXPECT_EQ(rb_->used_idx(), 5);
    EXPECT_EQ(q_->stats().used_publishes.get(), 1u);
    for (uint16_t s = 0; s < 5; ++s) {
        EXPECT_EQ(rb_->used_elem(s), (RawUsed{batch[s].id, batch[s].len}));
    }
}

// A bad entry stops the batch; those before it are still published, once.
TEST_P(DeviceQueue, PushUsedBatchStopsAtFirstBadEntry) {
    const uint16_t a = add({}, {rb_->alloc_buf(500)});
    const uint16_t b = add({}, {rb_->alloc_buf(500)});
    ASSERT_EQ(pop(), PopStatus::Ok);
    ASSERT_EQ(pop(), PopStatus::Ok);
    const UsedElem batch[] = {{a, 1}, {b, 501}, {b, 2}};
    auto s = q_->push_used_batch(batch);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error(), RingError::PushLenTooLong);
    EXPECT_EQ(rb_->used_idx(), 1);
    EXPECT_EQ(rb_->used_elem(0), (RawUsed{a, 1}));
    EXPECT_EQ(q_->stats().used_publishes.get(), 1u);
    EXPECT_FALSE(q_->broken());
}

// ---- 16-bit wrap-around -------------------------------------------------------

// More than 2^16 pop/push cycles on an 8-entry ring, in bursts of 1..3
// two-buffer chains, so the wrap of avail.idx and used.idx falls inside a
// burst. The driver wants an interrupt after every other burst.
TEST_P(DeviceQueue, WrapsSixteenBitIndices) {
    init(8, std::size_t{16} << 20);
    const Buf in = rb_->alloc_buf(256);
    const Buf out = rb_->alloc_buf(64, 5);
    const bool event_idx = GetParam().event_idx;
    uint32_t used_total = 0;
    uint32_t burst_no = 0;
    EXPECT_TRUE(q_->should_signal());  // first decision after reset: always
    while (used_total < 70000) {
        const uint16_t burst = static_cast<uint16_t>(1 + burst_no % 3);
        std::vector<UsedElem> done;
        for (uint16_t k = 0; k < burst; ++k) {
            const uint16_t head = add({out}, {in});
            ASSERT_EQ(pop(), PopStatus::Ok) << used_total;
            ASSERT_EQ(chain_->head, head);
            ASSERT_EQ(chain_->out_num + chain_->in_num, 2);
            ASSERT_EQ(chain_->iov[0].iov_base, rb_->host(out.gpa));
            ASSERT_EQ(chain_->iov[1].iov_base, rb_->host(in.gpa));
            done.push_back(UsedElem{head, 7});
        }
        ASSERT_EQ(pop(), PopStatus::Empty);
        const auto old_used = static_cast<uint16_t>(used_total);
        const bool want = burst_no % 2 == 0;
        if (event_idx) {
            // used_event = the old used.idx: crossed by this burst. Old - 1:
            // already passed, no new interrupt.
            rb_->set_used_event(want ? old_used : static_cast<uint16_t>(old_used - 1));
        } else {
            rb_->set_avail_flags(want ? 0 : VIRTQ_AVAIL_F_NO_INTERRUPT);
        }
        ASSERT_TRUE(q_->push_used_batch(done).has_value());
        used_total += burst;
        ASSERT_EQ(rb_->used_idx(), static_cast<uint16_t>(used_total));
        ASSERT_EQ(q_->used_idx(), RingIdx(static_cast<uint16_t>(used_total)));
        ASSERT_EQ(q_->last_avail_idx(), RingIdx(static_cast<uint16_t>(used_total)));
        const uint16_t last_slot = static_cast<uint16_t>((used_total - 1) % 8);
        ASSERT_EQ(rb_->used_elem(last_slot), (RawUsed{done.back().id, 7}));
        ASSERT_EQ(q_->should_signal(), want) << "burst " << burst_no;
        ++burst_no;
    }
    EXPECT_EQ(q_->stats().pops.get(), used_total);
    EXPECT_EQ(q_->stats().used_publishes.get(), burst_no);
    EXPECT_FALSE(q_->broken());
}

// ---- unpop ------------------------------------------------------------------

TEST_P(DeviceQueue, UnpopReturnsChainsThatPopAgainIdentically) {
    std::vector<Snapshot> first;
    for (uint32_t i = 0; i < 4; ++i) add({rb_->alloc_buf(20 + i)}, {rb_->alloc_buf(900 + i)});
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(pop(), PopStatus::Ok);
        first.push_back(snapshot(*chain_));
    }
    q_->unpop(2);
    EXPECT_EQ(q_->last_avail_idx(), RingIdx(2));
    EXPECT_EQ(q_->pending(), 2);
    // Given back, so not in flight: pushing one now is the caller's error.
    auto s = q_->push_used(first[3].head, 0);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error(), RingError::PushIdNotInflight);

    for (std::size_t i = 2; i < 4; ++i) {
        ASSERT_EQ(pop(), PopStatus::Ok);
        EXPECT_EQ(snapshot(*chain_), first[i]) << i;
    }
    EXPECT_EQ(pop(), PopStatus::Empty);
    for (const Snapshot& c : first) ASSERT_TRUE(q_->push_used(c.head, c.in_bytes).has_value());
    EXPECT_EQ(rb_->used_idx(), 4);
    EXPECT_FALSE(q_->broken());
}

// unpop across the 16-bit wrap of last_avail_idx.
TEST_P(DeviceQueue, UnpopAcrossIndexWrap) {
    init(8);
    const Buf b = rb_->alloc_buf(64);
    // Cycle chains until last_avail_idx stands 2 short of the wrap.
    for (uint32_t i = 0; i < 65534; ++i) {
        const uint16_t head = add({b}, {});
        ASSERT_EQ(pop(), PopStatus::Ok);
        ASSERT_TRUE(q_->push_used(head, 0).has_value());
    }
    ASSERT_EQ(q_->last_avail_idx(), RingIdx(65534));
    std::vector<Snapshot> first;
    for (int i = 0; i < 4; ++i) add({b}, {});
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(pop(), PopStatus::Ok);
        first.push_back(snapshot(*chain_));
    }
    ASSERT_EQ(q_->last_avail_idx(), RingIdx(2));
    q_->unpop(3);
    EXPECT_EQ(q_->last_avail_idx(), RingIdx(65535));
    for (std::size_t i = 1; i < 4; ++i) {
        ASSERT_EQ(pop(), PopStatus::Ok);
        EXPECT_EQ(snapshot(*chain_), first[i]) << i;
    }
}

std::string mode_name(const ::testing::TestParamInfo<Mode>& info) {
    return std::string(info.param.event_idx ? "EventIdx" : "NoEventIdx") +
           (info.param.indirect ? "Indirect" : "Direct");
}

INSTANTIATE_TEST_SUITE_P(Modes, DeviceQueue,
                         ::testing::Values(Mode{false, false}, Mode{false, true}, Mode{true, false},
                                           Mode{true, true}),
                         mode_name);

// ---- restart at a base (SET_VRING_BASE / GET_VRING_BASE) ---------------------------

struct RestartCase {
    uint16_t base;  ///< where driver and device meet before the first queue
    uint16_t n;     ///< chains the first queue pops and uses before it stops
};

class DeviceQueueRestart : public ::testing::TestWithParam<RestartCase> {};

// A queue stopped after n pops and pushes, and a new one created with the
// old one's last_avail_idx: it pops the next chain (not the first one again,
// not one further), and its used entries go on from the ring's used.idx.
// Bases short of the wrap put the wrap before, at or after the restart.
TEST_P(DeviceQueueRestart, ContinuesWithTheNextChainAndTheUsedIdx) {
    const auto [base, n] = GetParam();
    RingBuilder rb(8);
    rb.set_next_avail(RingIdx(base));
    rb.set_avail_idx(base);
    rb.set_used_idx(base);
    const Buf b = rb.alloc_buf(64);
    auto chain = std::make_unique<DescChain>();

    auto q = rb.make_device(QueueFeatures{.event_idx = true}, RingIdx(base));
    EXPECT_EQ(q->last_avail_idx(), RingIdx(base));
    EXPECT_EQ(q->used_idx(), RingIdx(base));
    for (uint16_t i = 0; i < n; ++i) {
        const uint16_t head = rb.add_chain({}, {b});
        ASSERT_EQ(q->pop(*chain), PopStatus::Ok);
        ASSERT_EQ(chain->head, head);
        ASSERT_TRUE(q->push_used(head, i).has_value());
    }
    // Two more made available, not popped: the next queue's work.
    const uint16_t next = rb.add_chain({}, {b});
    rb.add_chain({}, {b});
    const RingIdx stopped_at = q->last_avail_idx();  // GET_VRING_BASE
    ASSERT_EQ(stopped_at, RingIdx(base) + n);
    ASSERT_EQ(rb.used_idx(), (RingIdx(base) + n).value());
    q.reset();

    q = rb.make_device(QueueFeatures{.event_idx = true}, stopped_at);  // SET_VRING_BASE
    EXPECT_EQ(q->last_avail_idx(), stopped_at);
    EXPECT_EQ(q->used_idx(), stopped_at) << "used.idx taken from the ring";
    EXPECT_EQ(q->pending(), 2);
    ASSERT_EQ(q->pop(*chain), PopStatus::Ok);
    EXPECT_EQ(chain->head, next);
    ASSERT_TRUE(q->push_used(next, 9).has_value());
    EXPECT_EQ(rb.used_idx(), (stopped_at + 1).value());
    EXPECT_EQ(rb.used_elem(stopped_at.slot(8)), (RawUsed{next, 9}));
    EXPECT_TRUE(q->should_signal()) << "nothing known of the last signal: signal";
    // And on, across the wrap wherever it falls.
    ASSERT_EQ(q->pop(*chain), PopStatus::Ok);
    ASSERT_TRUE(q->push_used(chain->head, 0).has_value());
    for (uint16_t i = 0; i < 20; ++i) {
        const uint16_t head = rb.add_chain({}, {b});
        ASSERT_EQ(q->pop(*chain), PopStatus::Ok);
        ASSERT_EQ(chain->head, head);
        ASSERT_TRUE(q->push_used(head, 0).has_value());
    }
    EXPECT_EQ(rb.used_idx(), (stopped_at + 22).value());
    EXPECT_EQ(q->pop(*chain), PopStatus::Empty);
    EXPECT_FALSE(q->broken());
}

INSTANTIATE_TEST_SUITE_P(Bases, DeviceQueueRestart,
                         ::testing::Values(RestartCase{0, 3}, RestartCase{0, 8},
                                           RestartCase{65530, 3}, RestartCase{65530, 6},
                                           RestartCase{65533, 8}, RestartCase{65535, 0},
                                           RestartCase{65535, 1}),
                         [](const auto& p) {
                             return "Base" + std::to_string(p.param.base) + "After" +
                                    std::to_string(p.param.n);
                         });

// The AvailIdxJump rule holds on the first look at avail.idx, measured from
// the configured base: size ahead is fine, size + 1 breaks the queue.
TEST(DeviceQueueRestartRule, FirstObserveChecksAvailIdxAgainstTheBase) {
    for (const uint16_t base : {uint16_t{1000}, uint16_t{65533}}) {
        SCOPED_TRACE(base);
        RingBuilder rb(8);
        rb.set_avail_idx(static_cast<uint16_t>(base + 8));
        EXPECT_EQ(rb.make_device({}, RingIdx(base))->pending(), 8);
        rb.set_avail_idx(static_cast<uint16_t>(base + 9));
        auto q = rb.make_device({}, RingIdx(base));
        EXPECT_EQ(q->pending(), 0);
        EXPECT_TRUE(q->broken());
        EXPECT_EQ(q->broken_reason(), RingError::AvailIdxJump);
    }
}

// Create reads used.idx (any value is legal) and writes nothing: whatever
// the driver and the last device left in the ring stays, so a restart
// loses no state the guest can see.
TEST(DeviceQueueRestartRule, CreateTakesUsedIdxFromTheRingAndWritesNoRingMemory) {
    RingBuilder rb(8);
    std::byte* ring = rb.host(rb.base(), split_ring_bytes(8));
    for (std::size_t i = 0; i < split_ring_bytes(8); ++i) {
        ring[i] = static_cast<std::byte>(i * 13 + 5);
    }
    rb.set_used_idx(0xfffe);
    rb.set_avail_idx(0xfff9);
    const std::vector<std::byte> before(ring, ring + split_ring_bytes(8));
    auto q =
        rb.make_device(QueueFeatures{.event_idx = true, .notify_on_empty = true}, RingIdx(0xfff9));
    EXPECT_EQ(std::vector<std::byte>(ring, ring + split_ring_bytes(8)), before);
    EXPECT_EQ(q->used_idx(), RingIdx(0xfffe));
    EXPECT_EQ(q->last_avail_idx(), RingIdx(0xfff9));
    EXPECT_EQ(q->pending(), 0);
    EXPECT_FALSE(q->broken());
}

}  // namespace
}  // namespace pvnet::ring
