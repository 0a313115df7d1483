// Human-readable ring errors, for logs and `pvnet stats`.
#include "pvnet/ring/ring_error.h"

namespace pvnet::ring {

std::string_view to_string(RingError e) noexcept {
    switch (e) {
        case RingError::BadQueueSize: return "queue size zero, not a power of two, or too large";
        case RingError::RingMisaligned: return "ring part misaligned";
        case RingError::RingUnmapped: return "ring part not inside one memory region";
        case RingError::InflightBadLog:
            return "inflight log header (version, desc_num, size) or flags invalid";
        case RingError::InflightBadUsed:
            return "inflight log used_idx does not fit the used ring";
        case RingError::InflightTooMany:
            return "inflight log holds more heads than were made available";
        case RingError::InflightNotInOrder:
            return "inflight log heads are not the next ones of the avail ring (IN_ORDER)";
        case RingError::AvailIdxJump: return "avail idx moved by more than the queue size";
        case RingError::HeadOutOfRange: return "avail head out of range";
        case RingError::HeadInflight: return "avail head already in flight";
        case RingError::NextOutOfRange: return "descriptor next out of range";
        case RingError::ChainTooLong: return "descriptor chain longer than the queue (loop)";
        case RingError::IndirectNotNegotiated: return "indirect descriptor not negotiated";
        case RingError::IndirectWithNext: return "indirect descriptor with NEXT";
        case RingError::NestedIndirect: return "indirect descriptor inside an indirect table";
        case RingError::IndirectBadLen: return "indirect table length invalid";
        case RingError::IndirectUnmapped: return "indirect table not inside one memory region";
        case RingError::AddrUnmapped: return "buffer address not mapped";
        case RingError::AddrOverflow: return "buffer address + length overflows";
        case RingError::AddrAccessDenied: return "buffer in memory without the needed access";
        case RingError::ZeroLength: return "zero-length descriptor";
        case RingError::ChainOver4GiB: return "descriptor chain longer than 4 GiB";
        case RingError::ReadableAfterWritable: return "readable descriptor after writable";
        case RingError::TooManyIovs: return "descriptor chain maps to too many pieces";
        case RingError::BufferRefused: return "buffer access refused a descriptor (bad grant)";
        case RingError::UsedIdxJump: return "used idx moved past the buffers in flight";
        case RingError::UsedIdOutOfRange: return "used id out of range";
        case RingError::UsedIdNotInflight: return "used id not in flight";
        case RingError::UsedLenTooLong: return "used len above the buffer's writable bytes";
        case RingError::PushIdNotInflight: return "push of an id not in flight";
        case RingError::PushLenTooLong: return "push len above the chain's writable bytes";
        case RingError::PushOutOfOrder:
            return "VIRTIO_F_IN_ORDER: push of a chain other than the oldest in flight";
        case RingError::Count: break;
    }
    return "unknown";
}

}  // namespace pvnet::ring
