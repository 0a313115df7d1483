// Split virtqueue placement (VIRTIO 1.2 2.7 "Split Virtqueues"): where the
// three parts live, checked once at setup and turned into host pointers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/util/result.h"

namespace pvnet::ring {

/// Guest addresses of a split ring, as the driver programs them
/// (vhost-user VHOST_USER_SET_VRING_ADDR / virtio-pci queue_desc etc.).
struct SplitRingAddrs {
    uint16_t size = 0;
    mem::GuestAddr desc;
    mem::GuestAddr avail;
    mem::GuestAddr used;
};

/// Host view of a validated split ring. Pointers are into peer-writable
/// memory: read through read_once / barrier.h only.
struct SplitRingPtrs {
    uint16_t size = 0;
    std::byte* desc = nullptr;
    uint16_t* avail_flags = nullptr;
    uint16_t* avail_idx = nullptr;
    std::byte* avail_ring = nullptr;  ///< le16[size]
    uint16_t* used_event = nullptr;
    uint16_t* used_flags = nullptr;
    uint16_t* used_idx = nullptr;
    std::byte* used_ring = nullptr;   ///< virtq_used_elem[size]
    uint16_t* avail_event = nullptr;
};

/// Which side maps the ring decides the access checked on each part.
enum class RingSide : uint8_t { Driver, Device };

/// Validates size (power of two, 1..32768), alignment (16/2/4) and that each
/// part lies wholly inside one region, then returns host pointers.
Result<SplitRingPtrs, RingError> map_split_ring(const mem::MemoryTable& table,
                                                const SplitRingAddrs& addrs,
                                                RingSide side) noexcept;

/// Bytes needed to lay out a split ring of `size` contiguously from an
/// aligned base (desc, then avail, then used at the next 4-byte boundary).
constexpr std::size_t split_ring_bytes(uint16_t size) noexcept {
    const std::size_t avail_end = 16u * size + 6u + 2u * size;
    return (avail_end + 3u) / 4u * 4u + 6u + 8u * size;
}

/// Contiguous addresses for a ring at `base` (16-byte aligned).
constexpr SplitRingAddrs split_ring_addrs_at(mem::GuestAddr base, uint16_t size) noexcept {
    const uint64_t avail = base.value + 16u * size;
    const uint64_t used = (avail + 6u + 2u * size + 3u) / 4u * 4u;
    return SplitRingAddrs{size, base, mem::GuestAddr(avail), mem::GuestAddr(used)};
}

}  // namespace pvnet::ring
