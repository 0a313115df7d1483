// The inflight log's setup: a fresh buffer's headers, and the header checks
// a log gets before a queue uses it (the entries are checked by recovery,
// split_device_inflight.cc).
#include "pvnet/ring/inflight.h"

#include <bit>
#include <cstring>

namespace pvnet::ring {

bool init_split_inflight(std::span<std::byte> bytes, uint16_t size) noexcept {
    if (bytes.size() < virtio::inflight_queue_bytes(size)) return false;
    std::memset(bytes.data(), 0, virtio::inflight_queue_bytes(size));
    virtio::QueueRegionSplit h{};
    h.version = virtio::kInflightVersion;
    h.desc_num = size;
    std::memcpy(bytes.data(), &h, virtio::kInflightQueueHeader);
    return true;
}

Result<SplitInflightLog, RingError> SplitInflightLog::attach(std::span<std::byte> bytes,
                                                             uint16_t size) noexcept {
    // Rule: room for every descriptor, and the alignment atomic_ref needs
    // for the 8-byte counters.
    if (bytes.size() < virtio::inflight_queue_bytes(size) ||
        std::bit_cast<std::uintptr_t>(bytes.data()) % alignof(virtio::QueueRegionSplit) != 0) {
        return unexpected(RingError::InflightBadLog);
    }
    const SplitInflightLog log(bytes.data());
    const uint16_t version =
        log_load(log.field<uint16_t>(offsetof(virtio::QueueRegionSplit, version)));
    const uint16_t desc_num =
        log_load(log.field<uint16_t>(offsetof(virtio::QueueRegionSplit, desc_num)));
    // Rule: a log this back-end (or one like it) initialised, for this ring's size.
    if (version != virtio::kInflightVersion || desc_num != size) {
        return unexpected(RingError::InflightBadLog);
    }
    return log;
}

}  // namespace pvnet::ring
