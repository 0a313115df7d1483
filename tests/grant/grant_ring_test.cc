// A split ring whose buffers are grants (issue 13): the device queue reaches
// every data descriptor through the mode's BufferAccess. Data lands where
// the grant says, a used entry releases the chain's grants, and each hostile
// descriptor breaks the queue (BufferRefused) with its reason counted and
// nothing left held, the grants of the chain before it included.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pvnet/mem/grant_access.h"
#include "pvnet/mem/grant_table.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::grant {
namespace {

using namespace pvnet::mem;
constexpr uint16_t kRing = 4;
constexpr uint32_t kRefs = 64;
constexpr uint32_t kFrames = 16;
constexpr uint64_t kRingOff = 4096;

enum class Mode { Map, Copy, Persistent };

struct GrantRing {
    explicit GrantRing(Mode mode)
        : shared(MemoryRegion::create(3 * 4096, "grant_ring_shared").value()),
          data(MemoryRegion::create(kFrames * kGrantPageBytes, "grant_ring_data").value()),
          front(shared.bytes().first(kRefs * sizeof(GrantEntry))),
          refs(shared.bytes().first(kRefs * sizeof(GrantEntry)), 0, kFrames) {
        EXPECT_TRUE(table.add(GuestAddr(0), shared.bytes()));
        const GrantSource src{&refs, data.fd(), nullptr};
        switch (mode) {
            case Mode::Map: access = std::make_unique<GrantMapper>(src, kRing); break;
            case Mode::Copy: access = std::make_unique<GrantCopier>(src, kRing, CopyVia::Pread); break;
            case Mode::Persistent:
                access = std::make_unique<PersistentGrantPool>(src, kRing);
                break;
        }
        const ring::SplitRingAddrs addrs{kRing, GuestAddr(kRingOff), GuestAddr(kRingOff + 16 * kRing),
                                         GuestAddr(kRingOff + 1024)};
        ring::DriverQueueConfig dc;
        dc.addrs = addrs;
        driver = ring::SplitDriverQueue::create(table, dc).value();
        ring::DeviceQueueConfig qc;
        qc.addrs = addrs;
        qc.features = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1);
        qc.buffers = access.get();
        device = ring::SplitDeviceQueue::create(table, qc).value();
    }
    std::byte* page(uint32_t f) const { return data.host() + f * kGrantPageBytes; }

    MemoryRegion shared, data;
    MemoryTable table;
    GrantTable front;
    GrantRefs refs;
    std::unique_ptr<GrantAccess> access;
    std::unique_ptr<ring::SplitDriverQueue> driver;
    std::unique_ptr<ring::SplitDeviceQueue> device;
};

class GrantRingModes : public ::testing::TestWithParam<Mode> {};

TEST_P(GrantRingModes, DataLandsInTheGrantedPageAndTheUsedEntryReleasesIt) {
    GrantRing r(GetParam());
    std::memset(r.page(2), 0x33, kGrantPageBytes);
    std::memset(r.page(5), 0, kGrantPageBytes);
    const GrantRef out = r.front.grant(0, 2, true).value();
    const GrantRef in = r.front.grant(0, 5, false).value();
    const ring::Buf o{GuestAddr(grant_addr(out, 10)), 100};
    const ring::Buf i{GuestAddr(grant_addr(in, 100)), 200};
    ASSERT_EQ(r.driver->add(std::span(&o, 1), std::span(&i, 1), 77), ring::AddStatus::Ok);
    r.driver->publish();
    auto chain = std::make_unique<ring::DescChain>();
    ASSERT_EQ(r.device->pop(*chain), ring::PopStatus::Ok);
    ASSERT_EQ(chain->out_num, 1u);
    ASSERT_EQ(chain->in_num, 1u);
    EXPECT_EQ(std::to_integer<int>(static_cast<std::byte*>(chain->iov[0].iov_base)[99]), 0x33);
    std::memset(chain->iov[1].iov_base, 0x44, 50);
    ASSERT_TRUE(r.device->push_used(chain->head, 50));
    ring::UsedBuf u;
    ASSERT_TRUE(r.driver->get_used(u));
    EXPECT_EQ(u.token, 77u);
    EXPECT_EQ(u.len, 50u);
    for (uint32_t b = 0; b < kGrantPageBytes; ++b) {
        ASSERT_EQ(std::to_integer<int>(r.page(5)[b]), (b >= 100 && b < 150) ? 0x44 : 0) << b;
    }
    if (GetParam() == Mode::Persistent) {
        EXPECT_GT(r.refs.pinned(), 0u) << "kept mapped for the next use";
        r.device.reset();
        r.access->release_all();
    }
    EXPECT_EQ(r.refs.pinned(), 0u);
    EXPECT_TRUE(r.front.end_access(out).has_value());
    EXPECT_TRUE(r.front.end_access(in).has_value());
}

TEST_P(GrantRingModes, AHostileDescriptorBreaksTheQueueAndHoldsNothing) {
    struct Case {
        const char* name;
        GrantError want;
        bool writable;
        uint32_t offset, len;
        int kind;  // 0 out of range, 1 revoked, 2 read-only, 3 other domain, 4 crosses page
    };
    const Case cases[] = {
        {"out of range", GrantError::RefOutOfRange, false, 0, 64, 0},
        {"revoked", GrantError::NotGranted, false, 0, 64, 1},
        {"write through read-only", GrantError::ReadOnly, true, 0, 64, 2},
        {"another domain", GrantError::WrongDomain, false, 0, 64, 3},
        {"crosses the page", GrantError::CrossesPage, false, 4000, 200, 4},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        GrantRing r(GetParam());
        // A good grant first, so the bad one comes mid-chain.
        const GrantRef good = r.front.grant(0, 1, false).value();
        GrantRef bad = 0;
        switch (c.kind) {
            case 0: bad = kRefs + 3; break;
            case 1:
                bad = r.front.grant(0, 3, false).value();
                ASSERT_TRUE(r.front.end_access(bad).has_value());
                break;
            case 2: bad = r.front.grant(0, 3, true).value(); break;
            case 3: bad = r.front.grant(9, 3, false).value(); break;
            default: bad = r.front.grant(0, 3, false).value(); break;
        }
        const ring::Buf b[2] = {{GuestAddr(grant_addr(good, 0)), 64},
                                {GuestAddr(grant_addr(bad, c.offset)), c.len}};
        if (c.writable) {
            ASSERT_EQ(r.driver->add({}, std::span(b, 2), 1), ring::AddStatus::Ok);
        } else {
            ASSERT_EQ(r.driver->add(std::span(b, 2), {}, 1), ring::AddStatus::Ok);
        }
        r.driver->publish();
        auto chain = std::make_unique<ring::DescChain>();
        EXPECT_EQ(r.device->pop(*chain), ring::PopStatus::Broken);
        EXPECT_EQ(r.device->broken_reason(), ring::RingError::BufferRefused);
        EXPECT_EQ(r.device->stats().errors.get(ring::RingError::BufferRefused), 1u);
        EXPECT_EQ(r.refs.errors().get(c.want), 1u) << to_string(c.want);
        EXPECT_EQ(r.refs.errors().total(), 1u);
        if (GetParam() != Mode::Persistent) {
            EXPECT_EQ(r.refs.pinned(), 0u) << "the failed pop released the chain's grants";
        }
        r.device.reset();
        r.access->release_all();
        EXPECT_EQ(r.refs.pinned(), 0u) << "the good grant before it was released too";
        EXPECT_TRUE(r.front.end_access(good).has_value());
    }
}

INSTANTIATE_TEST_SUITE_P(Grants, GrantRingModes,
                         ::testing::Values(Mode::Map, Mode::Copy, Mode::Persistent),
                         [](const ::testing::TestParamInfo<Mode>& p) {
                             return std::string(p.param == Mode::Map    ? "Map"
                                                : p.param == Mode::Copy ? "Copy"
                                                                        : "Persistent");
                         });

TEST(GrantRingPersistent, MoreGrantsInUseThanThePoolHoldsBreakTheQueue) {
    // Without indirect descriptors a ring cannot hold more grants than its
    // size; with them one chain can, which is what the bound must stop.
    GrantRing r(Mode::Persistent);  // pool bound: the ring's size, 4
    const ring::SplitRingAddrs addrs{kRing, GuestAddr(kRingOff), GuestAddr(kRingOff + 16 * kRing),
                                     GuestAddr(kRingOff + 1024)};
    ring::DriverQueueConfig dc;
    dc.addrs = addrs;
    dc.indirect = true;
    dc.indirect_max = kRing;
    dc.indirect_area = GuestAddr(8192);
    r.device.reset();
    r.driver = ring::SplitDriverQueue::create(r.table, dc).value();
    ring::DeviceQueueConfig qc;
    qc.addrs = addrs;
    qc.features = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) |
                  virtio::feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC);
    qc.buffers = r.access.get();
    r.device = ring::SplitDeviceQueue::create(r.table, qc).value();

    std::vector<ring::Buf> bufs;
    for (uint32_t i = 0; i < kRing + 1u; ++i) {
        bufs.push_back({GuestAddr(grant_addr(r.front.grant(0, i, false).value(), 0)), 64});
    }
    // One chain of four grants: the pool is full, every entry in use.
    ASSERT_EQ(r.driver->add(std::span(bufs.data(), kRing), {}, 1), ring::AddStatus::Ok);
    ASSERT_EQ(r.driver->add(std::span(&bufs[kRing], 1), {}, 2), ring::AddStatus::Ok);
    r.driver->publish();
    auto a = std::make_unique<ring::DescChain>();
    ASSERT_EQ(r.device->pop(*a), ring::PopStatus::Ok);
    EXPECT_EQ(a->out_num, kRing);
    // A fifth grant while they are in use: nothing to evict.
    auto b = std::make_unique<ring::DescChain>();
    EXPECT_EQ(r.device->pop(*b), ring::PopStatus::Broken);
    EXPECT_EQ(r.device->broken_reason(), ring::RingError::BufferRefused);
    EXPECT_EQ(r.refs.errors().get(GrantError::PoolFull), 1u);
    r.device.reset();
    r.access->release_all();
    EXPECT_EQ(r.refs.pinned(), 0u);
}

}  // namespace
}  // namespace pvnet::grant
