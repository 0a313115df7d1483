// SplitDriverQueue: the frontend's side of a split virtqueue (VIRTIO 1.2
// 2.7.13 "Supplying Buffers to The Device" and 2.7.14 "Receiving Used
// Buffers"; Linux drivers/virtio/virtio_ring.c virtqueue_add_split,
// virtqueue_kick_prepare_split, virtqueue_get_buf_ctx_split,
// virtqueue_enable_cb_prepare/_delayed, virtqueue_poll).
//
// Descriptor chains and the free list are tracked privately (Linux's
// desc_extra): nothing is read back from the descriptor table, and every
// used entry the device returns is checked against what is in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/ring/ring_idx.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::ring {

/// One buffer of a chain, in guest memory.
struct Buf {
    mem::GuestAddr gpa;
    uint32_t len = 0;
};

/// A completed buffer: the token given to add() and the bytes written.
struct UsedBuf {
    uint64_t token = 0;
    uint32_t len = 0;
};

struct DriverQueueConfig {
    SplitRingAddrs addrs;
    bool event_idx = false;  ///< VIRTIO_RING_F_EVENT_IDX
    /// VIRTIO_RING_F_INDIRECT_DESC: a chain of 2..indirect_max buffers goes
    /// into one slot's table at indirect_area + head * indirect_max * 16.
    bool indirect = false;
    uint16_t indirect_max = 0;
    mem::GuestAddr indirect_area;
};

struct DriverQueueStats {
    RingErrorCounters errors;
    Counter adds;
    Counter add_no_space;      ///< add() refused: not enough free descriptors
    Counter reaps;
    Counter kicks_needed;      ///< kick_prepare() said yes
    Counter kicks_suppressed;  ///< ... said no (EVENT_IDX or NO_NOTIFY)
    Counter cb_rechecks;       ///< enable_cb*() found used entries already
};

enum class AddStatus : uint8_t { Ok, NoSpace, Broken };

/// Adds without a kick decision after which kick_prepare no longer trusts
/// need_event (Linux virtqueue_add_split: `num_added == (1 << 16) - 1`).
inline constexpr uint16_t kKickAddLimit = 0xFFFF;

class SplitDriverQueue {
public:
    /// Maps the ring (and the indirect area, if any). `table` is the
    /// driver's own view of guest memory; it must outlive the queue.
    static Result<std::unique_ptr<SplitDriverQueue>, RingError> create(
        const mem::MemoryTable& table, const DriverQueueConfig& cfg) noexcept;

    /// Makes a chain of device-readable `out` then device-writable `in`
    /// buffers available (not yet visible: see kick_prepare / publish).
    AddStatus add(std::span<const Buf> out, std::span<const Buf> in, uint64_t token) noexcept;

    /// Publishes added chains with one release-store of avail.idx.
    void publish() noexcept;
    /// publish(), then decide whether the device wants a kick (EVENT_IDX's
    /// avail_event, else the NO_NOTIFY flag) for what was added since the
    /// last decision. After kKickAddLimit adds or more with no decision,
    /// EVENT_IDX kicks whatever avail_event says (need_event's window cannot
    /// span 2^16; Linux's virtqueue_add_split decides at 65535 adds).
    bool kick_prepare() noexcept;

    /// Reaps one used entry, validated (id in range and in flight, len no
    /// more than posted). False when none is pending or the queue broke.
    bool get_used(UsedBuf& out) noexcept;

    /// Asks the device not to interrupt (NAPI is polling).
    void disable_cb() noexcept;
    /// Re-arms interrupts at the current position; pass the result to poll().
    RingIdx enable_cb_prepare() noexcept;
    /// True if used entries arrived beyond `last_used` (after a full fence).
    bool poll(RingIdx last_used) noexcept;
    /// Re-arms; false if entries are already pending (keep polling).
    bool enable_cb() noexcept;
    /// Re-arms for when 3/4 of the outstanding buffers are used; false if
    /// that many are already used (virtqueue_enable_cb_delayed).
    bool enable_cb_delayed() noexcept;

    uint16_t num_free() const noexcept { return num_free_; }
    uint16_t size() const noexcept { return ptrs_.size; }
    /// Chains made available and not yet reaped.
    uint16_t in_flight() const noexcept { return distance(last_used_idx_, avail_idx_shadow_); }
    /// Safe to call from any thread (a relaxed load).
    bool broken() const noexcept { return broken_.broken(); }
    /// First error that broke the queue; RingError::Count while not broken.
    /// Safe to call from any thread.
    RingError broken_reason() const noexcept { return broken_.reason(); }
    RingIdx last_used_idx() const noexcept { return last_used_idx_; }
    const DriverQueueStats& stats() const noexcept { return stats_; }

private:
    SplitDriverQueue(const mem::MemoryTable& table, const DriverQueueConfig& cfg,
                     const SplitRingPtrs& ptrs, std::byte* indirect_host);
    bool fail(RingError e) noexcept;
    void write_desc(std::byte* table, uint16_t i, const Buf& b, uint16_t flags,
                    uint16_t next) noexcept;
    void free_chain(uint16_t head) noexcept;

    SplitRingPtrs ptrs_;
    bool event_idx_;
    bool indirect_;
    uint16_t indirect_max_;
    mem::GuestAddr indirect_gpa_;
    std::byte* indirect_host_;

    uint16_t num_free_;
    uint16_t free_head_ = 0;
    RingIdx avail_idx_shadow_;  ///< avail.idx including unpublished adds
    RingIdx published_idx_;     ///< avail.idx as last published
    RingIdx kicked_idx_;        ///< avail.idx at the last kick decision
    uint16_t num_added_ = 0;    ///< adds since then, saturating at kKickAddLimit
    RingIdx last_used_idx_;
    RingIdx shadow_used_idx_;   ///< used.idx as last observed
    bool cb_enabled_ = true;
    BrokenState broken_;  ///< read by other threads (stats)

    // Private per-descriptor state (Linux desc_extra / desc_state).
    std::unique_ptr<uint16_t[]> next_;        ///< chain / free-list links
    std::unique_ptr<uint16_t[]> ndescs_;      ///< ring descriptors a head holds; 0 = free
    std::unique_ptr<uint32_t[]> in_bytes_;    ///< writable bytes posted per head
    std::unique_ptr<uint64_t[]> tokens_;
    DriverQueueStats stats_;
};

}  // namespace pvnet::ring
