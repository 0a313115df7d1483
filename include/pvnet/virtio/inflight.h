// The split ring's inflight log (QEMU docs/interop/vhost-user.rst, "Inflight
// I/O tracking", VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD): per queue a header,
// then one DescStateSplit per descriptor. Layout only (DESIGN.md layer 1);
// ring/inflight.h keeps it, vhost_user shares it. Host byte order: the log
// passes between back-ends on one host, never to the guest.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pvnet::virtio {

/// One descriptor's state. `counter` orders the in-flight heads by pop.
/// `next` is the packed ring's; a split log leaves it alone.
struct DescStateSplit {
    uint8_t inflight;
    uint8_t padding[5];
    uint16_t next;
    uint64_t counter;
};
static_assert(sizeof(DescStateSplit) == 16);
static_assert(offsetof(DescStateSplit, inflight) == 0 && offsetof(DescStateSplit, next) == 6 &&
              offsetof(DescStateSplit, counter) == 8);

/// A queue's header. The back-end sets `used_idx` after it cleared a batch's
/// heads, so a restart that finds it behind the ring's used.idx knows the
/// batch between them was used; `last_batch_head` is libvhost-user's
/// one-entry version of the same hint.
struct QueueRegionSplit {
    uint64_t features;
    uint16_t version;
    uint16_t desc_num;
    uint16_t last_batch_head;
    uint16_t used_idx;
    DescStateSplit desc[1];  ///< desc_num of them
};
static_assert(sizeof(QueueRegionSplit) == 16 + sizeof(DescStateSplit));
static_assert(offsetof(QueueRegionSplit, version) == 8 &&
              offsetof(QueueRegionSplit, desc_num) == 10 &&
              offsetof(QueueRegionSplit, last_batch_head) == 12 &&
              offsetof(QueueRegionSplit, used_idx) == 14 && offsetof(QueueRegionSplit, desc) == 16);

inline constexpr uint64_t kInflightQueueHeader = offsetof(QueueRegionSplit, desc);
inline constexpr uint64_t kInflightAlign = 64;
/// The only version there is (libvhost-user's INFLIGHT_VERSION).
inline constexpr uint16_t kInflightVersion = 1;

/// One queue's share of the buffer: header and descriptors, 64-byte aligned.
constexpr uint64_t inflight_queue_bytes(uint16_t queue_size) noexcept {
    return (kInflightQueueHeader + uint64_t{queue_size} * sizeof(DescStateSplit) +
            kInflightAlign - 1) / kInflightAlign * kInflightAlign;
}
static_assert(inflight_queue_bytes(256) == 4160);

}  // namespace pvnet::virtio
