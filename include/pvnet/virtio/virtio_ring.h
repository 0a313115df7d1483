// Virtqueue wire formats: VIRTIO 1.2 "Split Virtqueues" (2.7) and "Packed
// Virtqueues" (2.8). Layout only: the logic lives in src/ring/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pvnet/virtio/le.h"

namespace pvnet::virtio {

// Split ring descriptor flags (2.7.5).
inline constexpr uint16_t VIRTQ_DESC_F_NEXT = 1;
inline constexpr uint16_t VIRTQ_DESC_F_WRITE = 2;
inline constexpr uint16_t VIRTQ_DESC_F_INDIRECT = 4;
// Suppression flags (2.7.7, 2.7.10).
inline constexpr uint16_t VIRTQ_AVAIL_F_NO_INTERRUPT = 1;
inline constexpr uint16_t VIRTQ_USED_F_NO_NOTIFY = 1;
// Packed ring descriptor flags (2.8.1).
inline constexpr uint16_t VIRTQ_DESC_F_AVAIL = 1 << 7;
inline constexpr uint16_t VIRTQ_DESC_F_USED = 1 << 15;
// Packed event suppression (2.8.10).
inline constexpr uint16_t RING_EVENT_FLAGS_ENABLE = 0;
inline constexpr uint16_t RING_EVENT_FLAGS_DISABLE = 1;
inline constexpr uint16_t RING_EVENT_FLAGS_DESC = 2;

/// Largest queue size the spec allows (2.7: "Queue Size ... maximum 32768").
inline constexpr uint32_t kMaxQueueSize = 32768;

struct virtq_desc {
    Le64 addr;
    Le32 len;
    Le16 flags;
    Le16 next;
};
static_assert(sizeof(virtq_desc) == 16);
static_assert(offsetof(virtq_desc, addr) == 0 && offsetof(virtq_desc, len) == 8 &&
              offsetof(virtq_desc, flags) == 12 && offsetof(virtq_desc, next) == 14);

/// struct virtq_avail { le16 flags; le16 idx; le16 ring[size]; le16 used_event; }
struct virtq_avail_hdr {
    Le16 flags;
    Le16 idx;
};
static_assert(sizeof(virtq_avail_hdr) == 4);

struct virtq_used_elem {
    Le32 id;
    Le32 len;
};
static_assert(sizeof(virtq_used_elem) == 8);
static_assert(offsetof(virtq_used_elem, id) == 0 && offsetof(virtq_used_elem, len) == 4);

/// struct virtq_used { le16 flags; le16 idx; virtq_used_elem ring[size]; le16 avail_event; }
struct virtq_used_hdr {
    Le16 flags;
    Le16 idx;
};
static_assert(sizeof(virtq_used_hdr) == 4);

struct vring_packed_desc {
    Le64 addr;
    Le32 len;
    Le16 id;
    Le16 flags;
};
static_assert(sizeof(vring_packed_desc) == 16);
static_assert(offsetof(vring_packed_desc, id) == 12 && offsetof(vring_packed_desc, flags) == 14);

struct vring_packed_desc_event {
    Le16 off_wrap;
    Le16 flags;
};
static_assert(sizeof(vring_packed_desc_event) == 4);

/// Byte offsets and sizes of the three split-ring parts for a queue size
/// (2.7: alignment 16 / 2 / 4; sizes 16*N, 6+2*N, 6+8*N).
struct SplitRingLayout {
    static constexpr std::size_t kDescAlign = 16;
    static constexpr std::size_t kAvailAlign = 2;
    static constexpr std::size_t kUsedAlign = 4;

    static constexpr std::size_t desc_bytes(uint32_t size) noexcept { return 16u * size; }
    static constexpr std::size_t avail_bytes(uint32_t size) noexcept { return 6u + 2u * size; }
    static constexpr std::size_t used_bytes(uint32_t size) noexcept { return 6u + 8u * size; }

    // Offsets inside the avail ring.
    static constexpr std::size_t avail_flags_off() noexcept { return 0; }
    static constexpr std::size_t avail_idx_off() noexcept { return 2; }
    static constexpr std::size_t avail_ring_off(uint32_t slot) noexcept { return 4u + 2u * slot; }
    static constexpr std::size_t used_event_off(uint32_t size) noexcept { return 4u + 2u * size; }
    // Offsets inside the used ring.
    static constexpr std::size_t used_flags_off() noexcept { return 0; }
    static constexpr std::size_t used_idx_off() noexcept { return 2; }
    static constexpr std::size_t used_ring_off(uint32_t slot) noexcept { return 4u + 8u * slot; }
    static constexpr std::size_t avail_event_off(uint32_t size) noexcept { return 4u + 8u * size; }
};

/// A typed pointer to a ring field at `off` bytes into a ring part. The one
/// place ring code turns raw ring bytes into a field pointer; alignment is
/// checked by the caller at setup.
template <typename T>
inline T* field_at(std::byte* base, std::size_t off) noexcept {
    return reinterpret_cast<T*>(base + off);
}

static_assert(SplitRingLayout::used_event_off(256) == 516);
static_assert(SplitRingLayout::avail_event_off(256) == 2052);

}  // namespace pvnet::virtio
