// SplitDriverQueue, the frontend side of a split virtqueue (VIRTIO 1.2 2.7.13
// "Supplying Buffers to The Device", 2.7.14 "Receiving Used Buffers", 2.7.7 /
// 2.7.10 notification suppression). Descriptors and ring fields are read back
// raw from guest memory; the device is either a SplitDeviceQueue on the same
// memory or raw writes to the used ring (a hostile device).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring {
namespace {

using mem::GuestAddr;
using virtio::SplitRingLayout;
using virtio::VIRTQ_AVAIL_F_NO_INTERRUPT;
using virtio::virtq_desc;
using virtio::VIRTQ_DESC_F_INDIRECT;
using virtio::VIRTQ_DESC_F_NEXT;
using virtio::VIRTQ_DESC_F_WRITE;
using virtio::VIRTQ_USED_F_NO_NOTIFY;

// Guest memory: ring at the base, indirect tables at +64 KiB, data at +128 KiB.
constexpr uint64_t kGuestBase = 0x10000;
constexpr uint64_t kIndirectGpa = kGuestBase + 0x10000;
constexpr uint64_t kDataGpa = kGuestBase + 0x20000;
constexpr std::size_t kRegionBytes = 0x30000;
constexpr uint16_t kIndirectMax = 8;

struct Features {
    bool event_idx;
    bool indirect;
};

std::string feature_name(const ::testing::TestParamInfo<Features>& info) {
    return std::string(info.param.event_idx ? "EventIdx" : "Flags") +
           (info.param.indirect ? "Indirect" : "Direct");
}

/// Raw view of one split ring laid out in a fresh memfd region.
class Guest {
public:
    explicit Guest(uint16_t size) : addrs_(split_ring_addrs_at(GuestAddr(kGuestBase), size)) {
        auto r = mem::MemoryRegion::create(kRegionBytes, "split_driver_test");
        if (!r) throw std::runtime_error("MemoryRegion::create failed");
        region_.emplace(std::move(r).value());
        if (!table_.add(GuestAddr(kGuestBase), region_->bytes())) {
            throw std::runtime_error("MemoryTable::add failed");
        }
    }

    const mem::MemoryTable& table() const { return table_; }
    const SplitRingAddrs& addrs() const { return addrs_; }
    uint16_t size() const { return addrs_.size; }

    std::byte* host(uint64_t gpa) const { return region_->host() + (gpa - kGuestBase); }

    template <typename T>
    T load(uint64_t gpa) const {
        T v;
        std::memcpy(&v, host(gpa), sizeof v);
        return v;
    }
    void store16(uint64_t gpa, uint16_t v) const {
        const uint16_t le = virtio::host_to_le(v);
        std::memcpy(host(gpa), &le, sizeof le);
    }
    void store32(uint64_t gpa, uint32_t v) const {
        const uint32_t le = virtio::host_to_le(v);
        std::memcpy(host(gpa), &le, sizeof le);
    }
    uint16_t load16(uint64_t gpa) const { return virtio::le_to_host(load<uint16_t>(gpa)); }

    virtq_desc desc(uint16_t i) const { return load<virtq_desc>(addrs_.desc.value + 16u * i); }
    uint16_t avail_flags() const { return load16(addrs_.avail.value); }
    uint16_t avail_idx() const {
        return load16(addrs_.avail.value + SplitRingLayout::avail_idx_off());
    }
    uint16_t avail_slot(uint16_t slot) const {
        return load16(addrs_.avail.value + SplitRingLayout::avail_ring_off(slot));
    }
    uint16_t used_event() const {
        return load16(addrs_.avail.value + SplitRingLayout::used_event_off(size()));
    }

    void set_used_flags(uint16_t v) const { store16(addrs_.used.value, v); }
    void set_used_idx(uint16_t v) const {
        store16(addrs_.used.value + SplitRingLayout::used_idx_off(), v);
    }
    void set_used_elem(uint16_t slot, uint32_t id, uint32_t len) const {
        const uint64_t at = addrs_.used.value + SplitRingLayout::used_ring_off(slot);
        store32(at, id);
        store32(at + 4, len);
    }
    void set_avail_event(uint16_t v) const {
        store16(addrs_.used.value + SplitRingLayout::avail_event_off(size()), v);
    }

private:
    SplitRingAddrs addrs_;
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
};

/// One descriptor as the device would see it, after following the chain.
struct RawDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
};

Buf buf(uint64_t off, uint32_t len) { return Buf{GuestAddr(kDataGpa + off), len}; }

class DriverQueueTest : public ::testing::TestWithParam<Features> {
protected:
    void make(uint16_t size) {
        guest_ = std::make_unique<Guest>(size);
        DriverQueueConfig cfg;
        cfg.addrs = guest_->addrs();
        cfg.event_idx = GetParam().event_idx;
        cfg.indirect = GetParam().indirect;
        cfg.indirect_max = GetParam().indirect ? kIndirectMax : 0;
        cfg.indirect_area = GuestAddr(kIndirectGpa);
        auto q = SplitDriverQueue::create(guest_->table(), cfg);
        if (!q) throw std::runtime_error(std::string(to_string(q.error())));
        drv_ = std::move(q).value();
        dev_.reset();
    }

    SplitDeviceQueue& device() {
        if (!dev_) {
            DeviceQueueConfig cfg;
            cfg.addrs = guest_->addrs();
            cfg.features =
                (GetParam().event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0) |
                (GetParam().indirect ? virtio::feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC)
                                     : 0);
            auto q = SplitDeviceQueue::create(guest_->table(), cfg);
            if (!q) throw std::runtime_error("SplitDeviceQueue::create failed");
            dev_ = std::move(q).value();
            chain_ = std::make_unique<DescChain>();
        }
        return *dev_;
    }

    /// Pops one chain on the device side; returns its head.
    uint16_t pop_head() {
        EXPECT_EQ(device().pop(*chain_), PopStatus::Ok);
        return chain_->head;
    }

    /// Descriptors per chain a chain of `n` buffers takes from the ring.
    uint16_t descs_for(std::size_t n) const {
        return GetParam().indirect && n > 1 && n <= kIndirectMax ? 1 : static_cast<uint16_t>(n);
    }

    /// Follows the chain at `head` through the descriptor table (and an
    /// indirect table if the head is INDIRECT), checking the chaining flags.
    std::vector<RawDesc> read_chain(uint16_t head) const {
        std::vector<RawDesc> out;
        virtq_desc d = guest_->desc(head);
        const std::byte* table = guest_->host(guest_->addrs().desc.value);
        uint32_t table_len = guest_->size();
        if (d.flags.get() & VIRTQ_DESC_F_INDIRECT) {
            EXPECT_EQ(d.flags.get(), VIRTQ_DESC_F_INDIRECT);
            EXPECT_EQ(d.len.get() % 16u, 0u);
            table = guest_->host(d.addr.get());
            table_len = d.len.get() / 16u;
            std::memcpy(&d, table, sizeof d);
        }
        for (uint32_t n = 0; n <= table_len; ++n) {
            out.push_back(RawDesc{d.addr.get(), d.len.get(), d.flags.get()});
            if (!(d.flags.get() & VIRTQ_DESC_F_NEXT)) return out;
            const uint16_t next = d.next.get();
            if (next >= table_len) {
                ADD_FAILURE() << "next " << next << " out of table of " << table_len;
                return out;
            }
            std::memcpy(&d, table + 16u * next, sizeof d);
        }
        ADD_FAILURE() << "chain loops";
        return out;
    }

    /// Makes the device want a kick for the next chain published after `idx`.
    void device_wants_kick_after(uint16_t idx) const {
        guest_->set_used_flags(0);
        guest_->set_avail_event(idx);
    }

    std::unique_ptr<Guest> guest_;
    std::unique_ptr<SplitDriverQueue> drv_;
    std::unique_ptr<SplitDeviceQueue> dev_;
    std::unique_ptr<DescChain> chain_;
};

class DriverQueueFlagsTest : public DriverQueueTest {};
class DriverQueueEventIdxTest : public DriverQueueTest {};

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

// ---------------------------------------------------------------- kick

TEST_P(DriverQueueTest, KickPrepareReturnsFalseWhenNothingNewIsPublished) {
    make(8);
    const Buf out[] = {buf(0, 8)};
    device_wants_kick_after(0);
    ASSERT_EQ(drv_->add(out, {}, 0), AddStatus::Ok);
    EXPECT_TRUE(drv_->kick_prepare());
    EXPECT_FALSE(drv_->kick_prepare());
    drv_->publish();
    EXPECT_FALSE(drv_->kick_prepare());
    // Published by publish() alone is still new to the next kick decision.
    device_wants_kick_after(1);
    ASSERT_EQ(drv_->add(out, {}, 1), AddStatus::Ok);
    drv_->publish();
    EXPECT_TRUE(drv_->kick_prepare());
    EXPECT_FALSE(drv_->kick_prepare());
    EXPECT_EQ(drv_->stats().kicks_needed.get(), 2u);
}

TEST_P(DriverQueueFlagsTest, KickPrepareHonoursUsedNoNotify) {
    make(8);
    const Buf out[] = {buf(0, 8)};
    guest_->set_avail_event(1000);  // ignored without EVENT_IDX
    ASSERT_EQ(drv_->add(out, {}, 0), AddStatus::Ok);
    EXPECT_TRUE(drv_->kick_prepare());
    guest_->set_used_flags(VIRTQ_USED_F_NO_NOTIFY);
    ASSERT_EQ(drv_->add(out, {}, 1), AddStatus::Ok);
    EXPECT_FALSE(drv_->kick_prepare());
    EXPECT_EQ(guest_->avail_idx(), 2);  // suppressed, still published
    guest_->set_used_flags(0);
    ASSERT_EQ(drv_->add(out, {}, 2), AddStatus::Ok);
    EXPECT_TRUE(drv_->kick_prepare());
    EXPECT_EQ(drv_->stats().kicks_needed.get(), 2u);
    EXPECT_EQ(drv_->stats().kicks_suppressed.get(), 1u);
}

TEST_P(DriverQueueEventIdxTest, KickPrepareKicksExactlyWhenAvailIdxCrossesAvailEvent) {
    // One chain per kick decision: a kick exactly on the step idx goes E -> E+1.
    for (uint16_t event = 0; event < 7; ++event) {
        make(8);
        guest_->set_avail_event(event);
        guest_->set_used_flags(VIRTQ_USED_F_NO_NOTIFY);  // ignored with EVENT_IDX
        const Buf out[] = {buf(0, 8)};
        for (uint16_t step = 1; step <= 6; ++step) {
            ASSERT_EQ(drv_->add(out, {}, step), AddStatus::Ok);
            EXPECT_EQ(drv_->kick_prepare(), step - 1 == event)
                << "avail_event " << event << " idx " << step - 1 << "->" << step;
        }
    }
    // Batches: 0 -> 3 -> 6 kicks iff avail_event lies in the batch's [old, new).
    for (uint16_t event = 0; event < 7; ++event) {
        make(8);
        guest_->set_avail_event(event);
        const Buf out[] = {buf(0, 8)};
        for (uint16_t batch = 0; batch < 2; ++batch) {
            for (int k = 0; k < 3; ++k) ASSERT_EQ(drv_->add(out, {}, 0), AddStatus::Ok);
            const bool want = event >= 3 * batch && event < 3 * batch + 3;
            EXPECT_EQ(drv_->kick_prepare(), want) << "avail_event " << event << " batch " << batch;
        }
    }
}

/// Cycles `n` one-buffer chains through the ring (add, publish, the device
/// pops and uses it, reap) without a kick decision: a caller that publishes
/// and never kicks because the device is seen to keep up.
void cycle_without_kick(SplitDriverQueue& drv, SplitDeviceQueue& dev, DescChain& chain,
                        uint32_t n) {
    const Buf out[] = {buf(0, 8)};
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(drv.add(out, {}, i), AddStatus::Ok) << i;
        drv.publish();
        ASSERT_EQ(dev.pop(chain), PopStatus::Ok) << i;
        ASSERT_TRUE(dev.push_used(chain.head, 0).has_value()) << i;
        UsedBuf u;
        ASSERT_TRUE(drv.get_used(u)) << i;
    }
}

// need_event's [old, new) window holds at most 2^16 - 1 indices, so Linux's
// virtqueue_add_split runs a kick decision before num_added reaches 2^16.
// pvnet's add() has no doorbell: after 2^16 or more chains published with no
// kick decision, the next kick_prepare kicks whatever avail_event says (and,
// without EVENT_IDX, does not take "avail.idx is back where it was" for
// "nothing new"). Otherwise a device asleep on an avail_event crossed a lap
// ago never wakes.
TEST_P(DriverQueueTest, KickPrepareKicksAfterTwoToTheSixteenChainsWithoutADecision) {
    for (const uint32_t extra : {0u, 1u, 50u}) {
        SCOPED_TRACE(extra);
        make(8);
        device_wants_kick_after(100);  // crossed in the first lap
        SplitDeviceQueue& dev = device();
        cycle_without_kick(*drv_, dev, *chain_, 65536u + extra);
        EXPECT_TRUE(drv_->kick_prepare());
        EXPECT_FALSE(drv_->kick_prepare()) << "nothing new since";
        // Counting starts again from the decision: back to need_event.
        device_wants_kick_after(static_cast<uint16_t>(65536u + extra + 5u));
        cycle_without_kick(*drv_, dev, *chain_, 2);
        EXPECT_EQ(drv_->kick_prepare(), !GetParam().event_idx);
    }
}

// Below the limit the decision stays exact: 65534 chains, avail_event at the
// new avail.idx (reached, not passed) is no kick.
TEST_P(DriverQueueEventIdxTest, KickPrepareStaysExactBelowTheAddLimit) {
    make(8);
    device_wants_kick_after(65534);
    SplitDeviceQueue& dev = device();
    cycle_without_kick(*drv_, dev, *chain_, 65534);
    EXPECT_FALSE(drv_->kick_prepare());
    EXPECT_EQ(drv_->stats().kicks_suppressed.get(), 1u);
}

// ---------------------------------------------------------------- interrupts

TEST_P(DriverQueueTest, EnableCbReturnsFalseWhileUsedEntriesArePending) {
    make(8);
    const Buf in[] = {buf(0, 64)};
    ASSERT_EQ(drv_->add({}, in, 1), AddStatus::Ok);
    ASSERT_EQ(drv_->add({}, in, 2), AddStatus::Ok);
    (void)drv_->kick_prepare();
    const uint16_t h1 = pop_head();
    const uint16_t h2 = pop_head();

    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb());  // nothing used yet: safe to sleep
    ASSERT_TRUE(device().push_used(h1, 64));
    drv_->disable_cb();
    EXPECT_FALSE(drv_->enable_cb());  // one pending: keep polling
    EXPECT_EQ(drv_->stats().cb_rechecks.get(), 1u);
    UsedBuf u;
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 1u);
    EXPECT_TRUE(drv_->enable_cb());

    // enable_cb_prepare + poll: the split form of the same decision.
    const RingIdx at = drv_->enable_cb_prepare();
    EXPECT_EQ(at, RingIdx(1));
    EXPECT_FALSE(drv_->poll(at));
    ASSERT_TRUE(device().push_used(h2, 3));
    EXPECT_TRUE(drv_->poll(at));
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(u.token, 2u);
    EXPECT_FALSE(drv_->poll(drv_->enable_cb_prepare()));
}

TEST_P(DriverQueueTest, EnableCbDelayedReturnsFalseOnceThreeQuartersAreUsed) {
    make(8);
    const Buf in[] = {buf(0, 64)};
    for (uint64_t t = 0; t < 8; ++t) ASSERT_EQ(drv_->add({}, in, t), AddStatus::Ok);
    (void)drv_->kick_prepare();
    uint16_t heads[8];
    for (uint16_t& h : heads) h = pop_head();

    // 8 in flight: arm for 6 used.
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    for (int k = 0; k < 6; ++k) ASSERT_TRUE(device().push_used(heads[k], 1));
    EXPECT_TRUE(drv_->enable_cb_delayed());  // 6 used: the device has not passed used_event
    ASSERT_TRUE(device().push_used(heads[6], 1));
    EXPECT_FALSE(drv_->enable_cb_delayed());  // 7 used: it has
    EXPECT_EQ(drv_->stats().cb_rechecks.get(), 1u);

    // Reap 4: 4 in flight, 3 used beyond last_used -> arm for 3: not passed yet.
    UsedBuf u;
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(drv_->get_used(u));
    EXPECT_TRUE(drv_->enable_cb_delayed());
    ASSERT_TRUE(device().push_used(heads[7], 1));
    EXPECT_FALSE(drv_->enable_cb_delayed());
}

TEST_P(DriverQueueFlagsTest, DisableCbSetsNoInterruptAndEveryEnableClearsIt) {
    make(8);
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    EXPECT_EQ(guest_->avail_flags(), VIRTQ_AVAIL_F_NO_INTERRUPT);
    EXPECT_TRUE(drv_->enable_cb());
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    (void)drv_->enable_cb_prepare();
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->avail_flags(), 0);
}

TEST_P(DriverQueueEventIdxTest, EnableCbWritesUsedEventAtLastUsedIdx) {
    make(8);
    const Buf in[] = {buf(0, 64)};
    for (uint64_t t = 0; t < 6; ++t) ASSERT_EQ(drv_->add({}, in, t), AddStatus::Ok);
    (void)drv_->kick_prepare();
    for (int k = 0; k < 6; ++k) ASSERT_TRUE(device().push_used(pop_head(), 1));
    UsedBuf u;
    drv_->disable_cb();
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(guest_->used_event(), 0);  // disarmed: reaping does not move it

    EXPECT_FALSE(drv_->enable_cb());  // 3 still pending
    EXPECT_EQ(guest_->used_event(), 3);
    drv_->disable_cb();
    EXPECT_EQ(drv_->enable_cb_prepare(), RingIdx(3));
    EXPECT_EQ(guest_->used_event(), 3);
    // Armed: each reap moves used_event along to the new last_used_idx.
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(guest_->used_event(), 4);
    ASSERT_TRUE(drv_->get_used(u));
    ASSERT_TRUE(drv_->get_used(u));
    EXPECT_EQ(guest_->used_event(), 6);
    EXPECT_TRUE(drv_->enable_cb());
    EXPECT_EQ(guest_->used_event(), 6);
}

TEST_P(DriverQueueEventIdxTest, EnableCbDelayedSetsUsedEventThreeQuartersOfInFlightAhead) {
    make(16);
    const Buf in[] = {buf(0, 64)};
    for (uint64_t t = 0; t < 12; ++t) ASSERT_EQ(drv_->add({}, in, t), AddStatus::Ok);
    (void)drv_->kick_prepare();
    uint16_t heads[12];
    for (uint16_t& h : heads) h = pop_head();
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->used_event(), 9);  // 0 + 12 * 3 / 4

    for (int k = 0; k < 4; ++k) ASSERT_TRUE(device().push_used(heads[k], 1));
    UsedBuf u;
    drv_->disable_cb();
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(drv_->get_used(u));
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->used_event(), 10);  // 4 + 8 * 3 / 4
}

// VIRTIO 1.2 2.7.10.1: "if the VIRTIO_F_EVENT_IDX feature bit is negotiated:
// The driver MUST set flags to 0." Suppression goes through used_event only.
TEST_P(DriverQueueEventIdxTest, AvailFlagsStayZeroAcrossDisableAndEnableCb) {
    make(8);
    drv_->disable_cb();
    EXPECT_EQ(guest_->avail_flags(), 0);
    EXPECT_TRUE(drv_->enable_cb());
    EXPECT_EQ(guest_->avail_flags(), 0);
    drv_->disable_cb();
    EXPECT_TRUE(drv_->enable_cb_delayed());
    EXPECT_EQ(guest_->avail_flags(), 0);
}

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

const Features kAll[] = {{false, false}, {false, true}, {true, false}, {true, true}};
INSTANTIATE_TEST_SUITE_P(All, DriverQueueTest, ::testing::ValuesIn(kAll), feature_name);
INSTANTIATE_TEST_SUITE_P(All, HostileDeviceTest, ::testing::ValuesIn(kAll), feature_name);
INSTANTIATE_TEST_SUITE_P(NoEventIdx, DriverQueueFlagsTest,
                         ::testing::Values(Features{false, false}, Features{false, true}),
                         feature_name);
INSTANTIATE_TEST_SUITE_P(EventIdx, DriverQueueEventIdxTest,
                         ::testing::Values(Features{true, false}, Features{true, true}),
                         feature_name);

}  // namespace
}  // namespace pvnet::ring
