// Split ring setup validation (VIRTIO 1.2 2.7 "Split Virtqueues": queue
// size, the alignment table, and placement inside memory the device can
// reach), through SplitDeviceQueue::create and map_split_ring.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_ring.h"
#include "ring_builder.h"

namespace pvnet::ring {
namespace {

using mem::GuestAddr;
using test::QueueFeatures;
using test::RingBuilder;
using virtio::SplitRingLayout;

constexpr uint64_t kBase = RingBuilder::kDefaultBase;

RingError create_error(const RingBuilder& rb, const SplitRingAddrs& a) {
    DeviceQueueConfig cfg;
    cfg.addrs = a;
    auto q = SplitDeviceQueue::create(rb.table(), cfg);
    EXPECT_FALSE(q.has_value());
    return q ? RingError::Count : q.error();
}

// ---- queue size ------------------------------------------------------------

TEST(DeviceQueueSetup, RejectsSizeZero) {
    RingBuilder rb(256);
    EXPECT_EQ(create_error(rb, split_ring_addrs_at(rb.base(), 0)), RingError::BadQueueSize);
}

TEST(DeviceQueueSetup, RejectsNonPowerOfTwoSize) {
    RingBuilder rb(256);
    for (const uint16_t n : std::initializer_list<uint16_t>{3, 6, 12, 255, 257, 1000, 32767}) {
        SCOPED_TRACE(n);
        EXPECT_EQ(create_error(rb, split_ring_addrs_at(rb.base(), n)), RingError::BadQueueSize);
    }
}

// No power of two fits in uint16_t above 32768, so every size above the
// maximum is also rejected as not a power of two.
TEST(DeviceQueueSetup, RejectsSizeAbove32768) {
    RingBuilder rb(256, RingBuilder::Options{GuestAddr(kBase), std::size_t{8} << 20});
    for (const uint16_t n : std::initializer_list<uint16_t>{32769, 49152, 65535}) {
        SCOPED_TRACE(n);
        EXPECT_EQ(create_error(rb, split_ring_addrs_at(rb.base(), n)), RingError::BadQueueSize);
    }
}

// ---- alignment -------------------------------------------------------------

TEST(DeviceQueueSetup, RejectsDescNotSixteenAligned) {
    RingBuilder rb(256);
    for (const uint64_t off : std::initializer_list<uint64_t>{2, 4, 8, 1}) {
        SCOPED_TRACE(off);
        SplitRingAddrs a = rb.addrs();
        a.desc = GuestAddr(a.desc.value + off);
        EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
    }
}

TEST(DeviceQueueSetup, RejectsOddAvail) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    a.avail = GuestAddr(a.avail.value + 1);
    EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
}

TEST(DeviceQueueSetup, RejectsUsedNotFourAligned) {
    RingBuilder rb(256);
    for (const uint64_t off : std::initializer_list<uint64_t>{1, 2, 3}) {
        SCOPED_TRACE(off);
        SplitRingAddrs a = rb.addrs();
        a.used = GuestAddr(a.used.value + off);
        EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
    }
}

// Guest alignment is not enough: a region placed at an odd guest address
// turns an aligned gpa into a misaligned host pointer, which atomic_ref on
// the idx words cannot take.
TEST(DeviceQueueSetup, RejectsRingWhoseHostAddressIsMisaligned) {
    RingBuilder rb(256);
    const GuestAddr odd(0x4000'0001);
    rb.add_region(odd, 1 << 20);
    // All three guest addresses are aligned; host = region host + (gpa - odd) is not.
    const SplitRingAddrs a = split_ring_addrs_at(GuestAddr(0x4000'0010), 256);
    EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
}

// The rule is on the guest address the driver programmed, even where the
// host pointer happens to be aligned: a region at an odd guest address maps
// odd guest addresses to even host ones.
TEST(DeviceQueueSetup, RejectsMisalignedGuestAddressEvenWhenHostPointerIsAligned) {
    RingBuilder rb(256);
    const GuestAddr odd(0x4000'0001);
    rb.add_region(odd, 1 << 20);
    // odd + 0x1000 is 1 mod 16 in guest space and page-aligned on the host.
    const GuestAddr at(odd.value + 0x1000);
    ASSERT_EQ(std::bit_cast<std::uintptr_t>(rb.host(at)) % 16, 0u);
    SplitRingAddrs a = rb.addrs();
    a.desc = at;
    EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
    a = rb.addrs();
    a.avail = at;
    EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
    a = rb.addrs();
    a.used = at;
    EXPECT_EQ(create_error(rb, a), RingError::RingMisaligned);
}

// ---- placement ------------------------------------------------------------

TEST(DeviceQueueSetup, RejectsDescOutsideMemory) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    a.desc = GuestAddr(0x10'0000'0000);  // far above every region
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
    a.desc = GuestAddr(0);  // below the region at 0x10000
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

TEST(DeviceQueueSetup, RejectsAvailOutsideMemory) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    a.avail = GuestAddr(0x10'0000'0000);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

TEST(DeviceQueueSetup, RejectsUsedOutsideMemory) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    a.used = GuestAddr(0x10'0000'0000);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

// The start of each part is mapped, its end is not: the whole range counts.
TEST(DeviceQueueSetup, RejectsDescStraddlingRegionEnd) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    a.desc = GuestAddr(rb.main_end().value - 16);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

TEST(DeviceQueueSetup, RejectsAvailStraddlingRegionEnd) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    // avail is 6 + 2*256 bytes: leave 4 inside.
    a.avail = GuestAddr(rb.main_end().value - 4);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

TEST(DeviceQueueSetup, RejectsUsedStraddlingRegionEnd) {
    RingBuilder rb(256);
    SplitRingAddrs a = rb.addrs();
    // used is 6 + 8*256 bytes: starting 2048 before the end, its last
    // 6 bytes (the final used elem's tail and avail_event) stick out.
    a.used = GuestAddr(rb.main_end().value - 2048);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

// Two regions adjacent in guest space are two host mappings: a ring part
// must not span them even though every byte is mapped.
TEST(DeviceQueueSetup, RejectsPartSpanningTwoAdjacentRegions) {
    RingBuilder rb(256);
    rb.add_region(rb.main_end(), 1 << 20);
    SplitRingAddrs a = rb.addrs();
    a.used = GuestAddr(rb.main_end().value - 64);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
    a = rb.addrs();
    a.desc = GuestAddr(rb.main_end().value - 64);
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
}

// The device writes the used ring, so read-only memory will not do for it;
// the driver only reads the used ring and may map it read-only.
TEST(DeviceQueueSetup, RejectsUsedRingInReadOnlyMemoryOnDeviceSide) {
    RingBuilder rb(256);
    const GuestAddr ro(0x2000'0000);
    rb.add_region(ro, 1 << 16, mem::Access::Read);
    SplitRingAddrs a = rb.addrs();
    a.used = ro;
    EXPECT_EQ(create_error(rb, a), RingError::RingUnmapped);
    auto drv = map_split_ring(rb.table(), a, RingSide::Driver);
    EXPECT_TRUE(drv.has_value());
}

TEST(DeviceQueueSetup, AcceptsDescAndAvailInReadOnlyMemory) {
    RingBuilder rb(256);
    const GuestAddr ro(0x2000'0000);
    rb.add_region(ro, 1 << 16, mem::Access::Read);
    const SplitRingAddrs in_ro = split_ring_addrs_at(ro, 256);
    SplitRingAddrs a = rb.addrs();
    a.desc = in_ro.desc;
    a.avail = in_ro.avail;
    EXPECT_TRUE(map_split_ring(rb.table(), a, RingSide::Device).has_value());
    // The driver writes desc and avail: not in read-only memory.
    auto drv = map_split_ring(rb.table(), a, RingSide::Driver);
    ASSERT_FALSE(drv.has_value());
    EXPECT_EQ(drv.error(), RingError::RingUnmapped);
}

// ---- valid setups -----------------------------------------------------------

class DeviceQueueValidSetup : public ::testing::TestWithParam<uint16_t> {};

// A part that ends exactly at the end of its region is wholly inside it
// (used, 4-aligned and 6 + 8n bytes long, ends 2 bytes short).
TEST_P(DeviceQueueValidSetup, AcceptsPartsEndingAtRegionEnd) {
    const uint16_t n = GetParam();
    RingBuilder rb(n);
    const uint64_t end = rb.main_end().value;
    DeviceQueueConfig cfg;
    cfg.addrs = rb.addrs();
    cfg.addrs.desc = GuestAddr(end - SplitRingLayout::desc_bytes(n));
    EXPECT_TRUE(SplitDeviceQueue::create(rb.table(), cfg).has_value());
    cfg.addrs = rb.addrs();
    cfg.addrs.avail = GuestAddr(end - SplitRingLayout::avail_bytes(n));
    EXPECT_TRUE(SplitDeviceQueue::create(rb.table(), cfg).has_value());
    cfg.addrs = rb.addrs();
    cfg.addrs.used = GuestAddr((end - SplitRingLayout::used_bytes(n)) / 4 * 4);
    EXPECT_TRUE(SplitDeviceQueue::create(rb.table(), cfg).has_value());
}

// The host pointers land where the guest addresses say: a chain written at
// the last descriptor through the builder pops with the builder's host
// address, and the used entry and avail_event appear where the driver reads them.
TEST_P(DeviceQueueValidSetup, MapsEveryRingPartWhereTheDriverWroteIt) {
    const uint16_t n = GetParam();
    RingBuilder rb(n);
    auto q = rb.make_device(QueueFeatures{.event_idx = true});
    EXPECT_EQ(q->size(), n);
    EXPECT_FALSE(q->broken());

    const auto buf = rb.alloc_buf(100, 7);
    const uint16_t last = static_cast<uint16_t>(n - 1);
    rb.add_chain_at(last, {}, std::span<const Buf>(&buf, 1));

    auto chain = std::make_unique<DescChain>();
    ASSERT_EQ(q->pop(*chain), PopStatus::Ok);
    EXPECT_EQ(chain->head, last);
    ASSERT_EQ(chain->in_num, 1);
    EXPECT_EQ(chain->iov[0].iov_base, rb.host(buf.gpa));
    EXPECT_EQ(chain->iov[0].iov_len, 100u);

    ASSERT_TRUE(q->push_used(last, 60).has_value());
    EXPECT_EQ(rb.used_idx(), 1);
    EXPECT_EQ(rb.used_elem(0), (test::RawUsed{last, 60}));

    EXPECT_FALSE(q->enable_notify());
    EXPECT_EQ(rb.avail_event(), 1);
}

// ---- the feature word -----------------------------------------------------------

// The queue reads its three bits from the negotiated feature word and no
// others: every other bit set changes nothing, and each bit alone turns on
// just its own behaviour.
TEST(DeviceQueueFeatures, TakesRingBitsFromTheFeatureWordAndIgnoresTheRest) {
    using virtio::feature_mask;
    const uint64_t ring_bits = feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) |
                               feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC) |
                               feature_mask(virtio::VIRTIO_F_NOTIFY_ON_EMPTY);
    struct Seen {
        bool event_idx;        // enable_notify writes avail_event, leaves the flags
        bool indirect;         // an indirect chain pops instead of breaking the queue
        bool notify_on_empty;  // a dry ring signals through NO_INTERRUPT
    };
    auto probe = [](uint64_t features) {
        RingBuilder rb(8);
        DeviceQueueConfig cfg = rb.device_config();
        cfg.features = features;
        Seen seen{};
        {
            auto q = SplitDeviceQueue::create(rb.table(), cfg).value();
            rb.set_used_flags(virtio::VIRTQ_USED_F_NO_NOTIFY);
            rb.set_avail_event(0x5555);
            (void)q->enable_notify();
            seen.event_idx = rb.avail_event() == 0 && rb.used_flags() != 0;
        }
        {
            auto q = SplitDeviceQueue::create(rb.table(), cfg).value();
            rb.add_indirect_chain({}, {rb.alloc_buf(64)});
            auto chain = std::make_unique<DescChain>();
            seen.indirect = q->pop(*chain) == PopStatus::Ok;
        }
        {
            // A fresh ring, EVENT_IDX off: NO_INTERRUPT is the only suppression.
            RingBuilder rb2(8);
            DeviceQueueConfig c2 = rb2.device_config();
            c2.features = features & ~feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX);
            auto q = SplitDeviceQueue::create(rb2.table(), c2).value();
            rb2.set_avail_flags(virtio::VIRTQ_AVAIL_F_NO_INTERRUPT);
            rb2.add_chain({}, {rb2.alloc_buf(64)});
            auto chain = std::make_unique<DescChain>();
            EXPECT_EQ(q->pop(*chain), PopStatus::Ok);
            (void)q->push_used(chain->head, 0);
            seen.notify_on_empty = q->should_signal();
        }
        return seen;
    };
    const uint64_t others = ~ring_bits;
    for (const uint64_t extra : {uint64_t{0}, others}) {
        SCOPED_TRACE(extra);
        Seen s = probe(extra);
        EXPECT_FALSE(s.event_idx);
        EXPECT_FALSE(s.indirect);
        EXPECT_FALSE(s.notify_on_empty);
        s = probe(extra | feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX));
        EXPECT_TRUE(s.event_idx);
        EXPECT_FALSE(s.indirect);
        EXPECT_FALSE(s.notify_on_empty);
        s = probe(extra | feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC));
        EXPECT_FALSE(s.event_idx);
        EXPECT_TRUE(s.indirect);
        EXPECT_FALSE(s.notify_on_empty);
        s = probe(extra | feature_mask(virtio::VIRTIO_F_NOTIFY_ON_EMPTY));
        EXPECT_FALSE(s.event_idx);
        EXPECT_FALSE(s.indirect);
        EXPECT_TRUE(s.notify_on_empty);
    }
}

INSTANTIATE_TEST_SUITE_P(Sizes, DeviceQueueValidSetup, ::testing::Values(1, 256, 32768),
                         [](const auto& p) { return "size" + std::to_string(p.param); });

}  // namespace
}  // namespace pvnet::ring
