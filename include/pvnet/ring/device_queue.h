// SplitDeviceQueue: the backend's side of a split virtqueue (VIRTIO 1.2
// 2.7.13 "Receiving Used Buffers From The Device" seen from the device, and
// Linux drivers/vhost/vhost.c vhost_get_vq_desc / vhost_add_used_n /
// vhost_notify / vhost_enable_notify).
//
// The whole ring is hostile: every head, next, length, address and flag is
// read once into a local, validated, and only then used. A ring rule broken
// marks the queue broken (sticky until reset(): the device would set
// DEVICE_NEEDS_RESET), counts the reason and logs once.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "pvnet/mem/buffer_access.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/ring/ring_idx.h"
#include "pvnet/ring/event_idx.h"
#include "pvnet/ring/inflight.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::ring {

/// Host pieces one chain may map to (Linux UIO_MAXIOV).
inline constexpr std::size_t kMaxIov = 1024;

/// A popped descriptor chain: device-readable pieces first, then writable.
struct DescChain {
    uint16_t head = 0;
    uint16_t out_num = 0;  ///< readable iovecs (vhost's out)
    uint16_t in_num = 0;   ///< writable iovecs (vhost's in)
    uint32_t out_bytes = 0;
    uint32_t in_bytes = 0;
    std::array<iovec, kMaxIov> iov{};

    std::span<const iovec> readable() const noexcept { return {iov.data(), out_num}; }
    std::span<const iovec> writable() const noexcept {
        return {iov.data() + out_num, in_num};
    }
};

struct UsedElem {
    uint16_t id = 0;
    uint32_t len = 0;
};

enum class PopStatus : uint8_t { Ok, Empty, Broken };

struct DeviceQueueConfig {
    SplitRingAddrs addrs;
    /// The negotiated feature word (VIRTIO 1.2 2.2 "Feature Bits"), as the
    /// driver accepted it. The queue takes VIRTIO_RING_F_EVENT_IDX,
    /// VIRTIO_RING_F_INDIRECT_DESC, VIRTIO_F_NOTIFY_ON_EMPTY and
    /// VIRTIO_F_IN_ORDER from it at create and ignores the other bits. With
    /// IN_ORDER every push must be of the oldest chain popped and not yet
    /// pushed (unpop gives back the newest, so it keeps the order); any
    /// other breaks the queue (PushOutOfOrder): a driver relying on the
    /// order would take the wrong buffers.
    uint64_t features = 0;
    /// Where the device resumes reading the avail ring: 0 for a new ring, or
    /// the base a stopped queue reported (vhost-user SET_VRING_BASE /
    /// GET_VRING_BASE). used.idx is not configured: create reads it from the
    /// ring (vhost_vq_init_access), so a restart continues where the last
    /// publish left it. Ignored with an inflight log, which knows better
    /// (used.idx + the heads in flight), as libvhost-user ignores it.
    RingIdx last_avail_idx;
    /// Null: buffer addresses are guest addresses, translated by the memory
    /// table. Otherwise this maps each data descriptor (a grant) and is told
    /// when its chain is used; it must outlive the queue.
    mem::BufferAccess* buffers = nullptr;
    /// The queue's inflight log (SplitInflightLog, vhost-user
    /// INFLIGHT_SHMFD), borrowed: it must outlive the queue. Empty: none.
    /// create() recovers from what the log holds: every head a previous
    /// device popped and never returned is returned used with length 0
    /// (counted in inflight_dropped); a log that does not fit the ring
    /// refuses the queue (InflightBadLog, InflightBadUsed, InflightTooMany;
    /// with IN_ORDER, InflightNotInOrder unless the heads are the avail
    /// ring's next ones in the log's pop order).
    std::span<std::byte> inflight;
};

struct DeviceQueueStats {
    RingErrorCounters errors;
    Counter pops;
    Counter pushes;
    Counter used_publishes;      ///< release-stores of used.idx (one per burst)
    Counter signals_needed;      ///< should_signal() said yes
    Counter signals_suppressed;  ///< ... said no (EVENT_IDX or NO_INTERRUPT)
    Counter notify_rechecks;     ///< enable_notify() found new buffers
    Counter inflight_dropped;    ///< heads a previous device left in flight, returned used with 0
};

class SplitDeviceQueue {
public:
    /// Maps and validates the ring; the table must outlive the queue. Starts
    /// at cfg.last_avail_idx and at the ring's used.idx (any 16-bit value is
    /// legal there); writes nothing to ring memory, unless an inflight log
    /// had heads to return (see DeviceQueueConfig::inflight). The first
    /// observation of avail.idx is checked against the start like any other
    /// (distance(last_avail_idx, avail.idx) <= size).
    static Result<std::unique_ptr<SplitDeviceQueue>, RingError> create(
        const mem::MemoryTable& table, const DeviceQueueConfig& cfg) noexcept;
    /// Chains still held go back to the buffer access, unwritten.
    ~SplitDeviceQueue();

    /// Pops the next available chain into `chain`, validated: every iovec
    /// lies inside mapped memory with the access its direction needs.
    PopStatus pop(DescChain& chain) noexcept;
    /// Gives back the last `n` popped chains, unused (vhost_discard_vq_desc).
    void unpop(uint16_t n) noexcept;

    /// Stages a used entry; the driver sees it after flush_used(). With
    /// IN_ORDER, `id` must be the oldest chain in flight (PushOutOfOrder).
    Status<RingError> add_used(uint16_t id, uint32_t len) noexcept;
    /// Publishes all staged entries with one release-store of used.idx.
    void flush_used() noexcept;
    /// add_used + flush_used.
    Status<RingError> push_used(uint16_t id, uint32_t len) noexcept;
    /// Stages and publishes a batch; stops at the first bad entry.
    Status<RingError> push_used_batch(std::span<const UsedElem> elems) noexcept;

    /// Whether the driver wants an interrupt for what was published since
    /// the last decision (vhost_notify): EVENT_IDX's used_event, else the
    /// NO_INTERRUPT flag; NOTIFY_ON_EMPTY overrides when the ring ran dry.
    bool should_signal() noexcept;

    /// Asks the driver not to kick (the device is polling).
    void disable_notify() noexcept;
    /// Re-arms kicks, then re-checks avail.idx. True: buffers arrived in the
    /// window, so keep going (and disable again) instead of sleeping.
    bool enable_notify() noexcept;
    /// As enable_notify, for a device waiting for more than what is already
    /// available (mergeable rx gave back chains too small for a packet): the
    /// driver kicks for its next buffer past avail.idx as last observed, not
    /// past last_avail_idx (vhost_enable_notify's avail_event = vq->avail_idx).
    /// True if avail.idx moved beyond that meanwhile.
    bool enable_notify_for_more() noexcept;

    /// A rule the caller checks across chains was broken (a mergeable rx
    /// packet needing more than kMaxIov pieces): count, break the queue.
    void mark_broken(RingError e) noexcept { fail(e); }

    /// Available chains not yet popped, as last observed (0 when broken).
    uint16_t pending() noexcept;

    /// Safe to call from any thread (a relaxed load).
    bool broken() const noexcept { return broken_.broken(); }
    /// First error that broke the queue; RingError::Count while not broken.
    /// Safe to call from any thread.
    RingError broken_reason() const noexcept { return broken_.reason(); }
    /// Forgets all state as vhost_vq_reset does (the driver reset the device):
    /// indices back to 0, not to the configured base; ring memory untouched.
    /// An inflight log is cleared to match (nothing in flight, used_idx 0).
    void reset() noexcept;

    uint16_t size() const noexcept { return ptrs_.size; }
    /// The ring's base (GET_VRING_BASE): a new queue created with it as
    /// cfg.last_avail_idx pops the next chain. It counts every chain popped,
    /// used or not: before stopping, push (and flush) or unpop what is in
    /// flight, or the new queue never sees those chains.
    RingIdx last_avail_idx() const noexcept { return last_avail_idx_; }
    RingIdx used_idx() const noexcept { return used_idx_; }
    const DeviceQueueStats& stats() const noexcept { return stats_; }

private:
    SplitDeviceQueue(const mem::MemoryTable& table, const DeviceQueueConfig& cfg,
                     const SplitRingPtrs& ptrs);
    /// reset() without touching the inflight log (create, before recovery).
    void reset_state() noexcept;
    /// create() with a log: validates what it holds against the ring, then
    /// returns every head still in flight used with length 0, in pop order.
    Status<RingError> recover_inflight() noexcept;
    PopStatus fail(RingError e) noexcept;
    bool reject(RingError e) noexcept {
        fail(e);
        return false;
    }
    bool observe_avail() noexcept;
    /// Writes the kick threshold `event` (or clears NO_NOTIFY), fences and
    /// re-reads avail.idx. False if the queue broke.
    bool rearm_notify(RingIdx event) noexcept;
    bool walk_chain(uint16_t head, DescChain& chain) noexcept;
    bool append_desc(uint16_t head, uint64_t gpa, uint32_t len, bool writable, DescChain& chain,
                     uint64_t& total) noexcept;
    bool inflight(uint16_t id) const noexcept {
        return (inflight_bits_[id / 64] >> (id % 64)) & 1u;
    }

    const mem::MemoryTable& table_;
    mem::BufferAccess* buffers_;
    /// Last region a buffer fell in wholly (a one-entry TLB): most buffers
    /// skip the table walk. Owned by the queue's thread; the table must not
    /// change under a live queue (the control plane resets the queue first).
    mem::RegionMapping hot_region_{};
    SplitRingPtrs ptrs_;
    bool event_idx_;
    bool indirect_;
    bool notify_on_empty_;
    bool in_order_;

    RingIdx last_avail_idx_;
    RingIdx shadow_avail_idx_;  ///< avail.idx as last observed
    RingIdx used_idx_;          ///< published used.idx
    RingIdx next_use_;          ///< IN_ORDER: avail index of the oldest chain in flight
    uint16_t staged_ = 0;       ///< used entries written, not yet published
    SignalledUsed signalled_used_;
    BrokenState broken_;  ///< read by other threads (stats)

    std::unique_ptr<uint64_t[]> inflight_bits_;      ///< popped, not pushed
    std::unique_ptr<uint32_t[]> inflight_in_bytes_;  ///< writable bytes per head
    std::unique_ptr<uint16_t[]> popped_heads_;       ///< head per avail slot, for unpop
    SplitInflightLog log_;                           ///< empty without a log
    std::unique_ptr<uint16_t[]> staged_heads_;       ///< with a log: the heads staged, in order
    DeviceQueueStats stats_;
};

}  // namespace pvnet::ring
