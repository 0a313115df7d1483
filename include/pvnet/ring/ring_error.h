// What a peer (or our caller) did wrong to a virtqueue. Every value has a
// counter; the ring-rule values also mark the queue broken (NEEDS_RESET).
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "pvnet/util/counters.h"

namespace pvnet::ring {

enum class RingError : uint8_t {
    // Setup (VIRTIO 1.2 2.7: size, alignment, placement).
    BadQueueSize,          ///< zero, not a power of two, or above the maximum
    RingMisaligned,        ///< desc/avail/used not 16/2/4-aligned
    RingUnmapped,          ///< a ring part not wholly inside one region
    // Setup with an inflight log (inflight.h): the log a crashed back-end or
    // the front-end left does not fit the ring; the queue is refused.
    InflightBadLog,        ///< header (version, desc_num, room, alignment) or a flag not 0/1
    InflightBadUsed,       ///< log used_idx more than the size behind used.idx, or a used id >= size
    InflightTooMany,       ///< more heads in flight than the driver made available
    InflightNotInOrder,    ///< VIRTIO_F_IN_ORDER: the heads in flight are not the avail ring's next ones
    // Device side: the driver broke a ring rule.
    AvailIdxJump,          ///< avail.idx moved more than the queue size
    HeadOutOfRange,        ///< avail ring head >= queue size
    HeadInflight,          ///< head made available again before it was used
    NextOutOfRange,        ///< desc.next >= table length
    ChainTooLong,          ///< more descriptors than the queue size: a loop
    IndirectNotNegotiated, ///< INDIRECT flag without VIRTIO_RING_F_INDIRECT_DESC
    IndirectWithNext,      ///< INDIRECT and NEXT on one descriptor
    NestedIndirect,        ///< INDIRECT inside an indirect table
    IndirectBadLen,        ///< table length 0, not a multiple of 16, or too long
    IndirectUnmapped,      ///< table not wholly inside one region
    AddrUnmapped,          ///< buffer outside every region
    AddrOverflow,          ///< addr + len wraps 64 bits
    AddrAccessDenied,      ///< device write to read-only memory
    ZeroLength,            ///< a data descriptor of zero bytes
    ChainOver4GiB,         ///< total chain length above 2^32 - 1
    ReadableAfterWritable, ///< device-readable descriptor after a writable one
    TooManyIovs,           ///< chain needs more than kMaxIov host pieces
    BufferRefused,         ///< the buffer access refused a descriptor (a bad grant: it counts why)
    // Driver side: the device broke a ring rule.
    UsedIdxJump,           ///< used.idx moved past what is in flight
    UsedIdOutOfRange,      ///< used elem id >= queue size
    UsedIdNotInflight,     ///< used elem id not made available
    UsedLenTooLong,        ///< used len above the writable bytes posted
    // Caller errors (pvnet's own bug; counted, queue left alone).
    PushIdNotInflight,     ///< push of an id the device did not pop
    PushLenTooLong,        ///< push len above the chain's writable bytes
    // pvnet's own bug the driver cannot survive: the queue stops.
    PushOutOfOrder,        ///< VIRTIO_F_IN_ORDER: push of a chain other than the oldest popped
    Count
};

std::string_view to_string(RingError e) noexcept;

/// True for the errors that mean the peer broke the ring: the queue stops.
constexpr bool breaks_queue(RingError e) noexcept {
    return e != RingError::PushIdNotInflight && e != RingError::PushLenTooLong;
}

using RingErrorCounters = CounterArray<RingError>;

/// A queue's broken state: the first ring rule broken, or none. Written by
/// the queue's owner thread only, read from any thread (a stats thread, the
/// control plane). One atomic byte holds both the flag and the reason, so a
/// reader never sees "broken" with no reason, and the owner's per-call check
/// is one relaxed load, as Counter's reads are.
class BrokenState {
public:
    bool broken() const noexcept { return reason() != RingError::Count; }
    /// The first error that broke the queue; RingError::Count while not broken.
    RingError reason() const noexcept {
        // ORDER: relaxed; a status word, not a publication: nothing else is
        // read because of it (the owner orders its own ring accesses, other
        // threads only report it). Pairs with the relaxed store in set().
        return reason_.load(std::memory_order_relaxed);
    }
    /// Records `e` (not Count) unless already broken; true if this call
    /// broke the queue (the caller logs once).
    bool set(RingError e) noexcept {
        if (broken() || e == RingError::Count) return false;
        // ORDER: relaxed; single writer (the owner thread), see reason().
        reason_.store(e, std::memory_order_relaxed);
        return true;
    }
    /// Not broken again (reset; owner thread).
    void clear() noexcept {
        // ORDER: relaxed; single writer, see reason().
        reason_.store(RingError::Count, std::memory_order_relaxed);
    }

private:
    std::atomic<RingError> reason_{RingError::Count};
    static_assert(std::atomic<RingError>::is_always_lock_free);
};

}  // namespace pvnet::ring
