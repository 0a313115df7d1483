// Split ring setup checks (VIRTIO 1.2 2.7 "Split Virtqueues": queue size,
// alignment table, and placement inside memory the device can reach).
#include "pvnet/ring/split_ring.h"

#include <bit>
#include <cstdint>

#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring {
namespace {

using virtio::SplitRingLayout;

bool aligned(const void* p, std::size_t a) noexcept {
    return std::bit_cast<std::uintptr_t>(p) % a == 0;
}

}  // namespace

Result<SplitRingPtrs, RingError> map_split_ring(const mem::MemoryTable& table,
                                                const SplitRingAddrs& a,
                                                RingSide side) noexcept {
    const uint32_t n = a.size;
    // Rule: size is a power of two, 1..32768 (2.7).
    if (n == 0 || (n & (n - 1)) != 0 || n > virtio::kMaxQueueSize) {
        return unexpected(RingError::BadQueueSize);
    }
    // Rule: desc 16-, avail 2-, used 4-byte aligned (2.7, alignment table).
    if (a.desc.value % SplitRingLayout::kDescAlign != 0 ||
        a.avail.value % SplitRingLayout::kAvailAlign != 0 ||
        a.used.value % SplitRingLayout::kUsedAlign != 0) {
        return unexpected(RingError::RingMisaligned);
    }
    const bool device = side == RingSide::Device;
    // Each part wholly inside one region, with the access this side needs.
    // The driver writes desc and avail; the device writes used.
    const mem::Access drv = device ? mem::Access::Read : mem::Access::ReadWrite;
    const mem::Access dev = device ? mem::Access::ReadWrite : mem::Access::Read;
    auto desc = table.translate_contiguous(a.desc, SplitRingLayout::desc_bytes(n), drv);
    auto avail = table.translate_contiguous(a.avail, SplitRingLayout::avail_bytes(n), drv);
    auto used = table.translate_contiguous(a.used, SplitRingLayout::used_bytes(n), dev);
    if (!desc || !avail || !used) return unexpected(RingError::RingUnmapped);
    // The host mapping must keep the alignment atomic_ref needs.
    if (!aligned(*desc, SplitRingLayout::kDescAlign) ||
        !aligned(*avail, SplitRingLayout::kAvailAlign) ||
        !aligned(*used, SplitRingLayout::kUsedAlign)) {
        return unexpected(RingError::RingMisaligned);
    }
    std::byte* av = *avail;
    std::byte* us = *used;
    SplitRingPtrs p;
    p.size = a.size;
    p.desc = *desc;
    p.avail_flags = virtio::field_at<uint16_t>(av, SplitRingLayout::avail_flags_off());
    p.avail_idx = virtio::field_at<uint16_t>(av, SplitRingLayout::avail_idx_off());
    p.avail_ring = av + SplitRingLayout::avail_ring_off(0);
    p.used_event = virtio::field_at<uint16_t>(av, SplitRingLayout::used_event_off(n));
    p.used_flags = virtio::field_at<uint16_t>(us, SplitRingLayout::used_flags_off());
    p.used_idx = virtio::field_at<uint16_t>(us, SplitRingLayout::used_idx_off());
    p.used_ring = us + SplitRingLayout::used_ring_off(0);
    p.avail_event = virtio::field_at<uint16_t>(us, SplitRingLayout::avail_event_off(n));
    return p;
}

}  // namespace pvnet::ring
