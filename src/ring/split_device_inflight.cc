// SplitDeviceQueue's recovery from an inflight log (vhost-user.rst "Inflight
// I/O tracking"; libvhost-user's vu_check_queue_inflights). A back-end that
// died (SIGKILL, a crash) left heads popped and never used; the new one
// returns each used with length 0 — the packet is dropped and counted,
// never delivered twice, never lost.
//
// The log is hostile (a crashed back-end or a front-end wrote it): every
// entry is read once into a copy and checked before anything is written;
// a log that does not fit the ring refuses the queue and is left as it was.
#include <algorithm>
#include <new>

#include "pvnet/ring/barrier.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/shm.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring {
namespace {

// Snapshot states of a head: 0 free, or as below.
constexpr uint8_t kInflight = 1;
constexpr uint8_t kUsedUncleared = 2;  ///< marked, but returned by the last publish

struct Entry {
    uint64_t counter;
    uint16_t head;
};

}  // namespace

Status<RingError> SplitDeviceQueue::recover_inflight() noexcept {
    const uint16_t n = ptrs_.size;
    std::unique_ptr<uint8_t[]> state(new (std::nothrow) uint8_t[n]);
    if (!state) return unexpected(RingError::BadQueueSize);
    uint32_t marked = 0;
    for (uint16_t h = 0; h < n; ++h) {
        const uint8_t f = log_.inflight(h);
        // Rule: a flag is 0 or 1 (libvhost-user counts "== 1" but resubmits "!= 0").
        if (f > kInflight) return unexpected(RingError::InflightBadLog);
        state[h] = f;
        marked += f;
    }
    // The predecessor published used.idx and died before it cleared that
    // batch: the heads in used entries [log used_idx, used.idx) were used.
    const RingIdx log_used = log_.used_idx();
    const uint16_t behind = distance(log_used, used_idx_);
    const bool catch_up = behind != 0;
    if (marked != 0 && behind != 0) {
        // Rule: one batch holds at most size entries (at most size in flight).
        if (behind > n) return unexpected(RingError::InflightBadUsed);
        for (uint16_t k = 0; k < behind; ++k) {
            const auto e = read_once<virtio::virtq_used_elem>(ptrs_.used_ring +
                                                               8u * (log_used + k).slot(n));
            const uint32_t id = e.id.get();
            // Rule: a used id names a descriptor.
            if (id >= n) return unexpected(RingError::InflightBadUsed);
            if (state[id] == kInflight) {
                state[id] = kUsedUncleared;
                --marked;
            }
        }
    }
    // Rule: what is in flight was made available: at most avail.idx - used.idx.
    // ORDER: acquire; pairs with the driver's publish_idx(avail.idx).
    const RingIdx avail = observe_idx(ptrs_.avail_idx);
    if (marked > distance(used_idx_, avail)) return unexpected(RingError::InflightTooMany);

    std::unique_ptr<Entry[]> order(new (std::nothrow) Entry[marked + 1u]);
    if (!order) return unexpected(RingError::BadQueueSize);
    uint16_t inuse = 0;
    for (uint16_t h = 0; h < n; ++h) {
        if (state[h] == kInflight) order[inuse++] = Entry{log_.counter(h), h};
    }
    // Pop order (ties, which only a hostile log has, by head).
    std::sort(order.get(), order.get() + inuse, [](const Entry& a, const Entry& b) {
        return a.counter != b.counter ? a.counter < b.counter : a.head < b.head;
    });

    // Rule (IN_ORDER): the predecessor used a prefix of what it popped, so
    // what it left in flight is the avail ring's next heads, in pop order;
    // returned otherwise, they would break the order the driver relies on.
    if (in_order_) {
        for (uint16_t k = 0; k < inuse; ++k) {
            const uint16_t head = virtio::le_to_host(
                read_once<uint16_t>(ptrs_.avail_ring + 2u * (used_idx_ + k).slot(n)));
            if (head != order[k].head) return unexpected(RingError::InflightNotInOrder);
        }
    }

    // Checked: from here on the log and the ring are written.
    if (catch_up) {
        for (uint16_t h = 0; h < n; ++h) {
            if (state[h] == kUsedUncleared) log_.clear_used(h);
        }
        log_.set_used_idx(used_idx_);
    }
    // Every chain popped is used or in flight: the next to pop follows them
    // (SET_VRING_BASE's value is not needed, and not trusted over this).
    last_avail_idx_ = shadow_avail_idx_ = used_idx_ + inuse;
    if (inuse != 0) {
        // Returned as any burst is (flush_used clears them from the log after
        // the publish), so a crash now is recovered the same way.
        for (uint16_t k = 0; k < inuse; ++k) {
            virtio::virtq_used_elem e{};
            e.id.set(order[k].head);
            e.len.set(0);
            write_shared(ptrs_.used_ring + 8u * (used_idx_ + k).slot(n), e);
            staged_heads_[k] = order[k].head;
        }
        staged_ = inuse;
        flush_used();
        stats_.inflight_dropped.add(inuse);
    }
    log_.restart_counter(0);  // nothing is in flight: pop order starts afresh
    return {};
}

}  // namespace pvnet::ring
