// Shared by the split_driver_*_test files: SplitDriverQueue, the frontend
// side of a split virtqueue, on a ring laid out in a fresh memfd region whose
// descriptors and ring fields the tests read back (and write) raw; the device
// is a SplitDeviceQueue on the same memory or raw writes to the used ring.
// Parameterised over EVENT_IDX and indirect descriptors (Features).
#pragma once

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

namespace pvnet::ring::driver_fixture {

using mem::GuestAddr;
using virtio::SplitRingLayout;
using virtio::VIRTQ_AVAIL_F_NO_INTERRUPT;
using virtio::virtq_desc;
using virtio::VIRTQ_DESC_F_INDIRECT;
using virtio::VIRTQ_DESC_F_NEXT;
using virtio::VIRTQ_DESC_F_WRITE;
using virtio::VIRTQ_USED_F_NO_NOTIFY;

// Guest memory: ring at the base, indirect tables at +64 KiB, data at +128 KiB.
inline constexpr uint64_t kGuestBase = 0x10000;
inline constexpr uint64_t kIndirectGpa = kGuestBase + 0x10000;
inline constexpr uint64_t kDataGpa = kGuestBase + 0x20000;
inline constexpr std::size_t kRegionBytes = 0x30000;
inline constexpr uint16_t kIndirectMax = 8;

struct Features {
    bool event_idx;
    bool indirect;
};

inline std::string feature_name(const ::testing::TestParamInfo<Features>& info) {
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

inline constexpr Features kAll[] = {{false, false}, {false, true}, {true, false}, {true, true}};

}  // namespace pvnet::ring::driver_fixture
