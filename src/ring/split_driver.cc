// The driver side of a split virtqueue: add chains, publish, decide on
// kicks, reap and check used entries, arm and disarm interrupts.
// Mirrors Linux drivers/virtio/virtio_ring.c (split ring functions).
#include <cstdio>
#include <cstring>
#include <new>

#include "pvnet/ring/barrier.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/event_idx.h"
#include "pvnet/ring/shm.h"
#include "pvnet/util/assert.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring {

using virtio::virtq_desc;
using virtio::virtq_used_elem;

Result<std::unique_ptr<SplitDriverQueue>, RingError> SplitDriverQueue::create(
    const mem::MemoryTable& table, const DriverQueueConfig& cfg) noexcept {
    auto ptrs = map_split_ring(table, cfg.addrs, RingSide::Driver);
    if (!ptrs) return unexpected(ptrs.error());
    std::byte* indirect_host = nullptr;
    if (cfg.indirect && cfg.indirect_max > 1) {
        const uint64_t bytes = uint64_t{cfg.addrs.size} * cfg.indirect_max * sizeof(virtq_desc);
        if (cfg.indirect_area.value % 16 != 0) return unexpected(RingError::RingMisaligned);
        auto h = table.translate_contiguous(cfg.indirect_area, bytes, mem::Access::ReadWrite);
        if (!h) return unexpected(RingError::RingUnmapped);
        indirect_host = *h;
    }
    std::unique_ptr<SplitDriverQueue> q(
        new (std::nothrow) SplitDriverQueue(table, cfg, *ptrs, indirect_host));
    if (!q || !q->next_ || !q->ndescs_ || !q->in_bytes_ || !q->tokens_) {
        return unexpected(RingError::BadQueueSize);
    }
    const uint16_t n = ptrs->size;
    for (uint16_t i = 0; i < n; ++i) {
        q->next_[i] = static_cast<uint16_t>(i + 1u);
        q->ndescs_[i] = 0;
    }
    // A fresh ring: interrupts wanted, nothing used yet.
    store_event(ptrs->avail_flags, 0);
    store_event(ptrs->used_event, 0);
    publish_idx(ptrs->avail_idx, RingIdx(0));
    return q;
}

SplitDriverQueue::SplitDriverQueue(const mem::MemoryTable&, const DriverQueueConfig& cfg,
                                   const SplitRingPtrs& ptrs, std::byte* indirect_host)
    : ptrs_(ptrs),
      event_idx_(cfg.event_idx),
      indirect_(indirect_host != nullptr),
      indirect_max_(cfg.indirect_max),
      indirect_gpa_(cfg.indirect_area),
      indirect_host_(indirect_host),
      num_free_(ptrs.size),
      next_(new (std::nothrow) uint16_t[ptrs.size]),
      ndescs_(new (std::nothrow) uint16_t[ptrs.size]),
      in_bytes_(new (std::nothrow) uint32_t[ptrs.size]),
      tokens_(new (std::nothrow) uint64_t[ptrs.size]) {}

bool SplitDriverQueue::fail(RingError e) noexcept {
    stats_.errors.add(e);
    if (broken_.set(e)) {
        std::fprintf(stderr, "pvnet ring: driver queue broken: %.*s\n",
                     static_cast<int>(to_string(e).size()), to_string(e).data());
    }
    return false;
}

void SplitDriverQueue::write_desc(std::byte* table, uint16_t i, const Buf& b, uint16_t flags,
                                  uint16_t next) noexcept {
    virtq_desc d{};
    d.addr.set(b.gpa.value);
    d.len.set(b.len);
    d.flags.set(flags);
    d.next.set(next);
    write_shared(table + sizeof(virtq_desc) * i, d);
}

AddStatus SplitDriverQueue::add(std::span<const Buf> out, std::span<const Buf> in,
                                uint64_t token) noexcept {
    if (broken()) return AddStatus::Broken;
    const std::size_t total = out.size() + in.size();
    if (!PVNET_ASSERT(total > 0 && total <= ptrs_.size)) return AddStatus::NoSpace;
    const auto n = static_cast<uint16_t>(total);
    const bool use_indirect = indirect_ && n > 1 && n <= indirect_max_;
    const uint16_t needed = use_indirect ? 1 : n;
    if (num_free_ < needed) {
        stats_.add_no_space.add();
        return AddStatus::NoSpace;
    }

    const uint16_t head = free_head_;
    uint32_t in_bytes = 0;
    for (const Buf& b : in) in_bytes += b.len;

    auto flags_of = [&](std::size_t k) -> uint16_t {
        uint16_t f = k < out.size() ? 0 : virtio::VIRTQ_DESC_F_WRITE;
        if (k + 1 < total) f |= virtio::VIRTQ_DESC_F_NEXT;
        return f;
    };
    auto buf_of = [&](std::size_t k) -> const Buf& {
        return k < out.size() ? out[k] : in[k - out.size()];
    };

    if (use_indirect) {
        const std::size_t table_off = std::size_t{head} * indirect_max_ * sizeof(virtq_desc);
        std::byte* table = indirect_host_ + table_off;
        for (std::size_t k = 0; k < total; ++k) {
            write_desc(table, static_cast<uint16_t>(k), buf_of(k), flags_of(k),
                       static_cast<uint16_t>(k + 1));
        }
        const Buf t{indirect_gpa_ + table_off, static_cast<uint32_t>(total * sizeof(virtq_desc))};
        write_desc(ptrs_.desc, head, t, virtio::VIRTQ_DESC_F_INDIRECT, 0);
        free_head_ = next_[head];
    } else {
        uint16_t i = head;
        for (std::size_t k = 0; k < total; ++k) {
            write_desc(ptrs_.desc, i, buf_of(k), flags_of(k), next_[i]);
            if (k + 1 < total) i = next_[i];
        }
        free_head_ = next_[i];
    }
    num_free_ = static_cast<uint16_t>(num_free_ - needed);
    ndescs_[head] = needed;
    in_bytes_[head] = in_bytes;
    tokens_[head] = token;

    const uint16_t slot = avail_idx_shadow_.slot(ptrs_.size);
    write_shared(ptrs_.avail_ring + 2u * slot, virtio::host_to_le(head));
    ++avail_idx_shadow_;
    if (num_added_ != kKickAddLimit) ++num_added_;
    stats_.adds.add();
    return AddStatus::Ok;
}

void SplitDriverQueue::publish() noexcept {
    if (broken() || published_idx_ == avail_idx_shadow_) return;
    published_idx_ = avail_idx_shadow_;
    // ORDER: release; descriptors and avail slots written by add() are
    // visible before the new avail.idx. Pairs with the device's observe_idx.
    publish_idx(ptrs_.avail_idx, published_idx_);
}

bool SplitDriverQueue::kick_prepare() noexcept {
    if (broken()) return false;
    publish();
    const RingIdx old = kicked_idx_;
    const RingIdx now = published_idx_;
    const uint16_t added = num_added_;
    kicked_idx_ = now;
    num_added_ = 0;
    // Nothing added since the last decision. Not `old == now`: 2^16 adds
    // bring avail.idx back to where it was.
    if (added == 0) return false;
    // ORDER: full fence; avail.idx must be visible before we read the
    // device's avail_event / used.flags, or we may skip a kick the device is
    // about to sleep for. Pairs with the fence in the device's enable_notify.
    full_fence();
    bool need;
    if (event_idx_ && added == kKickAddLimit) {
        // [old, now) may have wrapped past avail_event unseen: kick anyway; a
        // spare kick costs a wakeup, a missed one a device asleep for good.
        need = true;
    } else if (event_idx_) {
        need = need_event(load_event(ptrs_.avail_event), now, old);
    } else {
        need = (load_event(ptrs_.used_flags) & virtio::VIRTQ_USED_F_NO_NOTIFY) == 0;
    }
    (need ? stats_.kicks_needed : stats_.kicks_suppressed).add();
    return need;
}

void SplitDriverQueue::free_chain(uint16_t head) noexcept {
    uint16_t tail = head;
    for (uint16_t k = 1; k < ndescs_[head]; ++k) tail = next_[tail];
    next_[tail] = free_head_;
    free_head_ = head;
    num_free_ = static_cast<uint16_t>(num_free_ + ndescs_[head]);
    ndescs_[head] = 0;
}

bool SplitDriverQueue::get_used(UsedBuf& out) noexcept {
    if (broken()) return false;
    if (last_used_idx_ == shadow_used_idx_) {
        // ORDER: acquire; pairs with the device's publish_idx(used.idx) after
        // it wrote the used elements we read next.
        const RingIdx used = observe_idx(ptrs_.used_idx);
        // Rule: the device cannot use more than was made available.
        if (distance(last_used_idx_, used) > distance(last_used_idx_, published_idx_)) {
            return fail(RingError::UsedIdxJump);
        }
        shadow_used_idx_ = used;
        if (last_used_idx_ == used) return false;
    }
    const uint16_t slot = last_used_idx_.slot(ptrs_.size);
    const virtq_used_elem e = read_once<virtq_used_elem>(ptrs_.used_ring + 8u * slot);
    const uint32_t id = e.id.get();
    const uint32_t len = e.len.get();
    // Rules: id < size, in flight, len <= writable bytes posted (CVE-2021-... class
    // of drivers trusting used len).
    if (id >= ptrs_.size) return fail(RingError::UsedIdOutOfRange);
    const auto head = static_cast<uint16_t>(id);
    if (ndescs_[head] == 0) return fail(RingError::UsedIdNotInflight);
    if (len > in_bytes_[head]) return fail(RingError::UsedLenTooLong);

    out.token = tokens_[head];
    out.len = len;
    free_chain(head);
    ++last_used_idx_;
    // As Linux: with interrupts armed under EVENT_IDX, move used_event along
    // so the device interrupts for the next entry, not an old one.
    if (event_idx_ && cb_enabled_) store_event(ptrs_.used_event, last_used_idx_.value());
    stats_.reaps.add();
    return true;
}

void SplitDriverQueue::disable_cb() noexcept {
    if (broken()) return;
    cb_enabled_ = false;
    // With EVENT_IDX flags must stay 0 (2.7.10.1); used_event stops moving
    // (get_used leaves it alone), so the device interrupts at most once more,
    // when it crosses the last one — NAPI tolerates that.
    if (!event_idx_) store_event(ptrs_.avail_flags, virtio::VIRTQ_AVAIL_F_NO_INTERRUPT);
}

RingIdx SplitDriverQueue::enable_cb_prepare() noexcept {
    if (broken()) return last_used_idx_;
    cb_enabled_ = true;
    if (event_idx_) {
        store_event(ptrs_.used_event, last_used_idx_.value());
    } else {
        store_event(ptrs_.avail_flags, 0);
    }
    return last_used_idx_;
}

bool SplitDriverQueue::poll(RingIdx last_used) noexcept {
    if (broken()) return false;
    // ORDER: full fence; the used_event / flags store of enable_cb_prepare is
    // visible before we re-read used.idx. Pairs with the device's fence in
    // should_signal.
    full_fence();
    const bool more = observe_idx(ptrs_.used_idx) != last_used;
    if (more) stats_.cb_rechecks.add();
    return more;
}

bool SplitDriverQueue::enable_cb() noexcept { return !poll(enable_cb_prepare()); }

bool SplitDriverQueue::enable_cb_delayed() noexcept {
    if (broken()) return true;
    cb_enabled_ = true;
    // Interrupt when 3/4 of what is outstanding has been used.
    const auto bufs = static_cast<uint16_t>(in_flight() * 3u / 4u);
    if (event_idx_) {
        store_event(ptrs_.used_event, (last_used_idx_ + bufs).value());
    } else {
        store_event(ptrs_.avail_flags, 0);
    }
    // ORDER: full fence, as in poll(): used_event before the used.idx re-read.
    full_fence();
    if (distance(last_used_idx_, observe_idx(ptrs_.used_idx)) > bufs) {
        stats_.cb_rechecks.add();
        return false;
    }
    return true;
}

}  // namespace pvnet::ring
