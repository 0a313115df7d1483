// VIRTIO_RING_F_EVENT_IDX (VIRTIO 1.2 2.7.7.2 / 2.7.10.1): the one wrap-safe
// comparison and the bookkeeping around it. Mirrors vring_need_event() in
// include/uapi/linux/virtio_ring.h.
#pragma once

#include <cstdint>

#include "pvnet/ring/ring_idx.h"

namespace pvnet::ring {

/// True if `event` lies in [old_idx, new_idx): the peer asked to be notified
/// once the index passed `event`, and it passed between old and new.
constexpr bool need_event(uint16_t event, RingIdx new_idx, RingIdx old_idx) noexcept {
    return static_cast<uint16_t>(new_idx.value() - event - 1u) < distance(old_idx, new_idx);
}

/// Device side: where used.idx stood at the last signal decision
/// (vhost's signalled_used / signalled_used_valid).
struct SignalledUsed {
    RingIdx idx;
    bool valid = false;

    /// `count` used entries were just published, taking used.idx to
    /// `new_used`. If they reached or passed `idx`, used.idx has moved 2^16
    /// or more since the last decision (coalescing may defer decisions that
    /// long), and need_event's [old, new) window, at most 2^16 - 1 wide,
    /// can no longer show whether used_event was crossed: forget the record,
    /// so the next decision signals (vhost_add_used_n's
    /// `(u16)(last_used_idx - signalled_used) < count`). Call once per
    /// publish; `count` is at most the queue size, below 2^16.
    constexpr void published(RingIdx new_used, uint16_t count) noexcept {
        if (distance(idx, new_used) < count) valid = false;
    }

    /// Decides for `new_used` against the driver's used_event and records it.
    constexpr bool need(uint16_t used_event, RingIdx new_used) noexcept {
        const RingIdx old = idx;
        const bool was_valid = valid;
        idx = new_used;
        valid = true;
        // Nothing known about the last signal (after reset): signal.
        return !was_valid || need_event(used_event, new_used, old);
    }
};

}  // namespace pvnet::ring
