// SplitInflightLog: one split queue's inflight log (vhost-user.rst "Inflight
// I/O tracking"; libvhost-user's vu_queue_inflight_get / _pre_put /
// _post_put). The device records each head it pops, and clears it once the
// used.idx that returns it is published, so a back-end restarted after a
// crash finds what its predecessor popped and never returned.
//
// The log is shared memory a front-end (and a crashed predecessor) wrote:
// attach() checks its header, recovery (SplitDeviceQueue::create) reads each
// entry once into a copy and validates it. On the data path the device only
// writes it, with the store order barrier.h's log_* functions give.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pvnet/ring/barrier.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/ring/ring_idx.h"
#include "pvnet/util/result.h"
#include "pvnet/virtio/inflight.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring {

/// A fresh log for a queue of `size` (GET_INFLIGHT_FD): zeroed, version 1,
/// desc_num = size. False if `bytes` is shorter than inflight_queue_bytes(size).
bool init_split_inflight(std::span<std::byte> bytes, uint16_t size) noexcept;

/// A borrowed view of one queue's log (the mapping outlives it); empty when
/// the queue has none.
class SplitInflightLog {
public:
    SplitInflightLog() = default;
    /// Checks the header against the ring (hostile until then): `bytes`
    /// 8-byte aligned and holding inflight_queue_bytes(size), version 1,
    /// desc_num == size. InflightBadLog otherwise.
    static Result<SplitInflightLog, RingError> attach(std::span<std::byte> bytes,
                                                      uint16_t size) noexcept;

    explicit operator bool() const noexcept { return base_ != nullptr; }

    // ---- the data path (the queue's owner thread) ---------------------------

    /// pop: `head` is in flight. Stored before pop returns the chain.
    void record_pop(uint16_t head) noexcept {
        virtio::DescStateSplit* d = desc(head);
        log_store(&d->counter, ++counter_);
        // ORDER: release; the counter is in place before the flag that makes
        // it count. Partner: the next back-end's recovery reads (log_load).
        log_store_release(&d->inflight, uint8_t{1});
    }
    /// unpop: `head` went back to the ring unused.
    void forget(uint16_t head) noexcept { log_store(&desc(head)->inflight, uint8_t{0}); }
    /// flush_used, before used.idx is published: the batch's last head.
    void set_last_batch_head(uint16_t head) noexcept {
        log_store(field<uint16_t>(kLastBatchHeadOff), head);
    }
    /// flush_used, after used.idx is published: `head` is used.
    void clear_used(uint16_t head) noexcept {
        // ORDER: release; the used.idx store (publish_idx) that returned the
        // head precedes this clear, or a crash between them would lose it.
        log_store_release(&desc(head)->inflight, uint8_t{0});
    }
    /// flush_used, after the batch's heads were cleared.
    void set_used_idx(RingIdx used) noexcept {
        // ORDER: release; the batch's clears precede it: a restart that sees
        // this used_idx finds nothing of the batch still marked.
        log_store_release(field<uint16_t>(kUsedIdxOff), used.value());
    }

    // ---- recovery's reads: one tear-free load each, to validate as a copy ---

    uint8_t inflight(uint16_t head) const noexcept { return log_load(&desc(head)->inflight); }
    uint64_t counter(uint16_t head) const noexcept { return log_load(&desc(head)->counter); }
    RingIdx used_idx() const noexcept { return RingIdx(log_load(field<uint16_t>(kUsedIdxOff))); }
    /// Pops after recovery count on from here.
    void restart_counter(uint64_t c) noexcept { counter_ = c; }

private:
    static constexpr std::size_t kUsedIdxOff = offsetof(virtio::QueueRegionSplit, used_idx);
    static constexpr std::size_t kLastBatchHeadOff =
        offsetof(virtio::QueueRegionSplit, last_batch_head);

    explicit SplitInflightLog(std::byte* base) noexcept : base_(base) {}
    template <typename T>
    T* field(std::size_t off) const noexcept {
        return virtio::field_at<T>(base_, off);
    }
    // VALIDATED: head < desc_num == the ring size (attach); callers pass
    // heads the queue checked against that size.
    virtio::DescStateSplit* desc(uint16_t head) const noexcept {
        return field<virtio::DescStateSplit>(virtio::kInflightQueueHeader +
                                             sizeof(virtio::DescStateSplit) * head);
    }

    std::byte* base_ = nullptr;
    uint64_t counter_ = 0;  ///< the last counter given
};

}  // namespace pvnet::ring
