// The device side of a split virtqueue: pop validated chains, push used
// entries in bursts, decide when to interrupt, re-arm kicks race-free.
// Mirrors Linux drivers/vhost/vhost.c (vhost_get_vq_desc, get_indirect,
// vhost_add_used_n, vhost_notify, vhost_enable_notify) with the validation
// rules of STYLE.md §6.
#include <cstdio>
#include <cstring>
#include <new>

#include "pvnet/ring/barrier.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/shm.h"
#include "pvnet/util/assert.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring {
namespace {

using virtio::virtq_desc;
using virtio::virtq_used_elem;

RingError from_mem(mem::MemError e) noexcept {
    switch (e) {
        case mem::MemError::AddrOverflow: return RingError::AddrOverflow;
        case mem::MemError::ZeroLength: return RingError::ZeroLength;
        case mem::MemError::TooManyPieces: return RingError::TooManyIovs;
        case mem::MemError::AccessDenied: return RingError::AddrAccessDenied;
        default: return RingError::AddrUnmapped;
    }
}

}  // namespace

Result<std::unique_ptr<SplitDeviceQueue>, RingError> SplitDeviceQueue::create(
    const mem::MemoryTable& table, const DeviceQueueConfig& cfg) noexcept {
    auto ptrs = map_split_ring(table, cfg.addrs, RingSide::Device);
    if (!ptrs) return unexpected(ptrs.error());
    // Setup may allocate; the data path never does.
    std::unique_ptr<SplitDeviceQueue> q(new (std::nothrow) SplitDeviceQueue(table, cfg, *ptrs));
    if (!q || !q->inflight_bits_ || !q->inflight_in_bytes_ || !q->popped_heads_) {
        return unexpected(RingError::BadQueueSize);
    }
    if (!cfg.inflight.empty()) {
        auto log = SplitInflightLog::attach(cfg.inflight, ptrs->size);
        if (!log) return unexpected(log.error());
        q->log_ = *log;
        q->staged_heads_.reset(new (std::nothrow) uint16_t[ptrs->size]);
        if (!q->staged_heads_) return unexpected(RingError::BadQueueSize);
    }
    q->reset_state();
    // The base: avail from the caller (SET_VRING_BASE), used from the ring
    // itself (vhost_vq_init_access reads used->idx). A new ring's used.idx
    // is 0; a restarted one continues after its last publish. Any value is
    // legal, so nothing to check; nothing is written back either. The shadow
    // equals the start, so the first pop observes avail.idx and applies the
    // AvailIdxJump rule against this base.
    q->last_avail_idx_ = q->shadow_avail_idx_ = cfg.last_avail_idx;
    // ORDER: acquire; pairs with the publish_idx(used.idx) of whoever drove
    // the ring before (a stopped queue, perhaps in another process).
    q->used_idx_ = observe_idx(q->ptrs_.used_idx);
    if (q->log_) {
        if (auto st = q->recover_inflight(); !st) return unexpected(st.error());
    }
    q->next_use_ = q->last_avail_idx_;  // nothing in flight
    return q;
}

SplitDeviceQueue::SplitDeviceQueue(const mem::MemoryTable& table, const DeviceQueueConfig& cfg,
                                   const SplitRingPtrs& ptrs)
    : table_(table),
      buffers_(cfg.buffers),
      ptrs_(ptrs),
      // Hoisted from the feature word once; the data path tests bools.
      event_idx_(virtio::has_feature(cfg.features, virtio::VIRTIO_RING_F_EVENT_IDX)),
      indirect_(virtio::has_feature(cfg.features, virtio::VIRTIO_RING_F_INDIRECT_DESC)),
      notify_on_empty_(virtio::has_feature(cfg.features, virtio::VIRTIO_F_NOTIFY_ON_EMPTY)),
      in_order_(virtio::has_feature(cfg.features, virtio::VIRTIO_F_IN_ORDER)),
      inflight_bits_(new (std::nothrow) uint64_t[(ptrs.size + 63u) / 64u]),
      inflight_in_bytes_(new (std::nothrow) uint32_t[ptrs.size]),
      popped_heads_(new (std::nothrow) uint16_t[ptrs.size]) {}

SplitDeviceQueue::~SplitDeviceQueue() {
    if (buffers_ != nullptr) buffers_->unmap_all();
}

void SplitDeviceQueue::reset() noexcept {
    reset_state();
    if (log_) {
        // The driver starts over: nothing of the old ring is in flight.
        for (uint16_t h = 0; h < ptrs_.size; ++h) log_.forget(h);
        log_.set_used_idx(RingIdx(0));
        log_.restart_counter(0);
    }
}

void SplitDeviceQueue::reset_state() noexcept {
    if (buffers_ != nullptr) buffers_->unmap_all();
    last_avail_idx_ = RingIdx(0);
    shadow_avail_idx_ = RingIdx(0);
    used_idx_ = RingIdx(0);
    next_use_ = RingIdx(0);
    staged_ = 0;
    signalled_used_ = SignalledUsed{};
    broken_.clear();
    hot_region_ = mem::RegionMapping{};
    std::memset(inflight_bits_.get(), 0, (ptrs_.size + 63u) / 64u * sizeof(uint64_t));
    std::memset(popped_heads_.get(), 0, ptrs_.size * sizeof(uint16_t));
}

PopStatus SplitDeviceQueue::fail(RingError e) noexcept {
    stats_.errors.add(e);
    if (broken_.set(e)) {
        // Log once per queue; the counters are the record after that.
        std::fprintf(stderr, "pvnet ring: device queue broken: %.*s\n",
                     static_cast<int>(to_string(e).size()), to_string(e).data());
    }
    return PopStatus::Broken;
}

// Refreshes shadow_avail_idx_ from the ring. False if the queue broke.
bool SplitDeviceQueue::observe_avail() noexcept {
    // ORDER: acquire; pairs with the driver's publish_idx(avail.idx) after
    // it wrote the ring slots and descriptors we are about to read.
    const RingIdx avail = observe_idx(ptrs_.avail_idx);
    // Rule: the driver cannot have more than `size` chains outstanding.
    if (distance(last_avail_idx_, avail) > ptrs_.size) {
        fail(RingError::AvailIdxJump);
        return false;
    }
    shadow_avail_idx_ = avail;
    return true;
}

uint16_t SplitDeviceQueue::pending() noexcept {
    if (broken() || !observe_avail()) return 0;
    return distance(last_avail_idx_, shadow_avail_idx_);
}

PopStatus SplitDeviceQueue::pop(DescChain& chain) noexcept {
    if (broken()) return PopStatus::Broken;
    // One acquire per burst: only look at avail.idx once the shadow is used up.
    if (last_avail_idx_ == shadow_avail_idx_) {
        if (!observe_avail()) return PopStatus::Broken;
        if (last_avail_idx_ == shadow_avail_idx_) return PopStatus::Empty;
    }
    const uint16_t slot = last_avail_idx_.slot(ptrs_.size);
    const uint16_t head =
        virtio::le_to_host(read_once<uint16_t>(ptrs_.avail_ring + 2u * slot));
    // Rule: head < queue size.
    if (head >= ptrs_.size) return fail(RingError::HeadOutOfRange);
    // Rule: a head is not made available again before it was used.
    if (inflight(head)) return fail(RingError::HeadInflight);
    if (!walk_chain(head, chain)) {
        if (buffers_ != nullptr) buffers_->unmap(head, 0);  // what the walk mapped
        return PopStatus::Broken;
    }

    // Logged before the caller can act on the chain: a successor must know it.
    if (log_) log_.record_pop(head);
    inflight_bits_[head / 64] |= uint64_t{1} << (head % 64);
    inflight_in_bytes_[head] = chain.in_bytes;
    popped_heads_[slot] = head;
    ++last_avail_idx_;
    stats_.pops.add();
    return PopStatus::Ok;
}

bool SplitDeviceQueue::append_desc(uint16_t head, uint64_t gpa, uint32_t len, bool writable, DescChain& chain,
                                   uint64_t& total) noexcept {
    // Rule: a data descriptor carries data (QEMU: "zero sized buffers are not allowed").
    if (len == 0) return reject(RingError::ZeroLength);
    // Rule: device-readable descriptors precede device-writable ones (2.7.4.2).
    if (!writable && chain.in_num != 0) return reject(RingError::ReadableAfterWritable);
    // Rule: a chain carries at most 2^32 - 1 bytes.
    total += len;
    if (total > UINT32_MAX) return reject(RingError::ChainOver4GiB);

    const std::size_t used = std::size_t{chain.out_num} + chain.in_num;
    const mem::Access access = writable ? mem::Access::Write : mem::Access::Read;
    uint16_t n;
    const uint64_t off = gpa - hot_region_.gpa.value;
    if (buffers_ != nullptr) {
        // A grant: the access validates it and says where its bytes are.
        if (used >= kMaxIov) return reject(RingError::TooManyIovs);
        if (!buffers_->map(head, gpa, len, writable, chain.iov[used])) {
            return reject(RingError::BufferRefused);
        }
        n = 1;
    } else if (gpa >= hot_region_.gpa.value && off < hot_region_.size_bytes &&
        len <= hot_region_.size_bytes - off && mem::allows(hot_region_.access, access) &&
        used < kMaxIov) [[likely]] {
        // Wholly inside the cached region, which was validated when added
        // to the table: the same result translate() would give.
        chain.iov[used] = iovec{hot_region_.host + off, len};
        n = 1;
    } else {
        auto pieces = table_.translate(mem::GuestAddr(gpa), len, access,
                                       std::span<iovec>(chain.iov.data() + used, kMaxIov - used));
        if (!pieces) return reject(from_mem(pieces.error()));
        n = static_cast<uint16_t>(*pieces);
        if (const mem::RegionMapping* r = table_.region_of(mem::GuestAddr(gpa))) hot_region_ = *r;
    }
    if (writable) {
        chain.in_num = static_cast<uint16_t>(chain.in_num + n);
        chain.in_bytes += len;
    } else {
        chain.out_num = static_cast<uint16_t>(chain.out_num + n);
        chain.out_bytes += len;
    }
    return true;
}

bool SplitDeviceQueue::walk_chain(uint16_t head, DescChain& chain) noexcept {
    chain.head = head;
    chain.out_num = chain.in_num = 0;
    chain.out_bytes = chain.in_bytes = 0;

    const std::byte* table = ptrs_.desc;
    uint32_t table_len = ptrs_.size;
    bool in_indirect = false;
    uint16_t idx = head;
    uint64_t total = 0;
    // Rule: one counter across direct and indirect data descriptors, capped at
    // the queue size, so a loop anywhere ends the walk (CVE-2014-0077 class).
    uint32_t count = 0;
    for (;;) {
        // VALIDATED: idx < table_len (head checked by pop, next checked below).
        const virtq_desc d = read_once<virtq_desc>(table + 16u * idx);
        const uint16_t flags = d.flags.get();
        const uint32_t len = d.len.get();

        if (flags & virtio::VIRTQ_DESC_F_INDIRECT) {
            // Rules (2.7.5.3.1): negotiated; not inside an indirect table; not
            // with NEXT; length a non-zero multiple of 16 and <= queue size entries.
            if (!indirect_) return reject(RingError::IndirectNotNegotiated);
            if (in_indirect) return reject(RingError::NestedIndirect);
            if (flags & virtio::VIRTQ_DESC_F_NEXT) return reject(RingError::IndirectWithNext);
            if (len == 0 || len % sizeof(virtq_desc) != 0 ||
                len / sizeof(virtq_desc) > ptrs_.size) {
                return reject(RingError::IndirectBadLen);
            }
            auto host = table_.translate_contiguous(mem::GuestAddr(d.addr.get()), len,
                                                    mem::Access::Read);
            if (!host) {
                const mem::MemError me = host.error();
                return reject(me == mem::MemError::AddrOverflow ? RingError::AddrOverflow
                                                                : RingError::IndirectUnmapped);
            }
            table = *host;
            table_len = len / static_cast<uint32_t>(sizeof(virtq_desc));
            in_indirect = true;
            idx = 0;
            continue;
        }

        if (++count > ptrs_.size) return reject(RingError::ChainTooLong);
        if (!append_desc(head, d.addr.get(), len, (flags & virtio::VIRTQ_DESC_F_WRITE) != 0, chain,
                         total)) {
            return false;
        }
        if (!(flags & virtio::VIRTQ_DESC_F_NEXT)) return true;
        const uint16_t next = d.next.get();
        // Rule: next < table length (queue size, or the indirect table's entries).
        if (next >= table_len) return reject(RingError::NextOutOfRange);
        idx = next;
    }
}

void SplitDeviceQueue::unpop(uint16_t n) noexcept {
    for (uint16_t i = 0; i < n; ++i) {
        const RingIdx idx = last_avail_idx_ - 1;
        const uint16_t head = popped_heads_[idx.slot(ptrs_.size)];
        if (!PVNET_ASSERT(head < ptrs_.size && inflight(head))) return;
        inflight_bits_[head / 64] &= ~(uint64_t{1} << (head % 64));
        if (log_) log_.forget(head);
        if (buffers_ != nullptr) buffers_->unmap(head, 0);
        last_avail_idx_ = idx;
    }
}

Status<RingError> SplitDeviceQueue::add_used(uint16_t id, uint32_t len) noexcept {
    if (broken()) return {};
    // Our caller's bug, not the driver's: count it, leave the ring alone.
    if (id >= ptrs_.size || !inflight(id)) {
        stats_.errors.add(RingError::PushIdNotInflight);
        return unexpected(RingError::PushIdNotInflight);
    }
    if (len > inflight_in_bytes_[id]) {
        stats_.errors.add(RingError::PushLenTooLong);
        return unexpected(RingError::PushLenTooLong);
    }
    if (in_order_) {
        // The contract offered with IN_ORDER (a driver may then ignore the
        // ids): one load of what pop recorded, cheap enough to keep on.
        // VALIDATED: next_use_'s slot is not reused before it is pushed
        // (at most size chains in flight).
        if (popped_heads_[next_use_.slot(ptrs_.size)] != id) {
            fail(RingError::PushOutOfOrder);
            return unexpected(RingError::PushOutOfOrder);
        }
        ++next_use_;
    }
    inflight_bits_[id / 64] &= ~(uint64_t{1} << (id % 64));
    if (buffers_ != nullptr) buffers_->unmap(id, len);
    virtq_used_elem e{};
    e.id.set(id);
    e.len.set(len);
    const uint16_t slot = (used_idx_ + staged_).slot(ptrs_.size);
    write_shared(ptrs_.used_ring + 8u * slot, e);
    // VALIDATED: staged_ < size: each staged id was in flight, at most size of them.
    if (log_) staged_heads_[staged_] = id;
    ++staged_;
    stats_.pushes.add();
    return {};
}

void SplitDeviceQueue::flush_used() noexcept {
    if (staged_ == 0 || broken()) return;
    const uint16_t n = staged_;
    used_idx_ += n;
    // EVENT_IDX: a record 2^16 behind is meaningless; forget it (see SignalledUsed).
    signalled_used_.published(used_idx_, n);
    staged_ = 0;
    if (log_) log_.set_last_batch_head(staged_heads_[n - 1u]);
    // ORDER: release; the used elements written above are visible before the
    // new used.idx. Pairs with the driver's observe_idx(used.idx) in get_used.
    publish_idx(ptrs_.used_idx, used_idx_);
    if (log_) {
        // After the publish, never before: a crash in between leaves heads
        // both used and marked, which recovery clears from the used ring
        // (log used_idx is still behind); the other way they would be lost.
        for (uint16_t k = 0; k < n; ++k) log_.clear_used(staged_heads_[k]);
        log_.set_used_idx(used_idx_);
    }
    stats_.used_publishes.add();
}

Status<RingError> SplitDeviceQueue::push_used(uint16_t id, uint32_t len) noexcept {
    auto s = add_used(id, len);
    flush_used();
    return s;
}

Status<RingError> SplitDeviceQueue::push_used_batch(std::span<const UsedElem> elems) noexcept {
    Status<RingError> s;
    for (const UsedElem& e : elems) {
        s = add_used(e.id, e.len);
        if (!s) break;
    }
    flush_used();
    return s;
}

bool SplitDeviceQueue::should_signal() noexcept {
    if (broken()) return false;
    // ORDER: full fence; used.idx (published in flush_used) must be visible
    // before we read used_event / avail.flags. Pairs with the fence in the
    // driver's enable_cb (poll / enable_cb_delayed).
    full_fence();
    bool need;
    if (notify_on_empty_ && distance(last_avail_idx_, observe_idx(ptrs_.avail_idx)) == 0) {
        // VIRTIO_F_NOTIFY_ON_EMPTY: interrupt when out of buffers, whatever
        // the suppression says. Keep the EVENT_IDX bookkeeping current.
        signalled_used_.need(0, used_idx_);
        need = true;
    } else if (event_idx_) {
        need = signalled_used_.need(load_event(ptrs_.used_event), used_idx_);
    } else {
        need = (load_event(ptrs_.avail_flags) & virtio::VIRTQ_AVAIL_F_NO_INTERRUPT) == 0;
    }
    (need ? stats_.signals_needed : stats_.signals_suppressed).add();
    return need;
}

void SplitDeviceQueue::disable_notify() noexcept {
    if (broken()) return;
    // With EVENT_IDX the driver kicks only when it crosses avail_event, which
    // stays where enable_notify left it (vhost_disable_notify does the same).
    // Stored only when it changes (DPDK's ASSIGN_UNLESS_EQUAL): every run
    // calls this, and a store would take the line from the driver reading it.
    if (!event_idx_ && load_event(ptrs_.used_flags) != virtio::VIRTQ_USED_F_NO_NOTIFY) {
        store_event(ptrs_.used_flags, virtio::VIRTQ_USED_F_NO_NOTIFY);
    }
}

bool SplitDeviceQueue::rearm_notify(RingIdx event) noexcept {
    if (event_idx_) {
        store_event(ptrs_.avail_event, event.value());
    } else {
        store_event(ptrs_.used_flags, 0);
    }
    // ORDER: full fence; the avail_event / flags store must be visible
    // before re-reading avail.idx, or a kick suppressed by the old value is
    // lost. Pairs with the fence in the driver's kick_prepare.
    full_fence();
    return observe_avail();
}

bool SplitDeviceQueue::enable_notify() noexcept {
    if (broken() || !rearm_notify(last_avail_idx_)) return false;
    const bool more = last_avail_idx_ != shadow_avail_idx_;
    if (more) stats_.notify_rechecks.add();
    return more;
}

bool SplitDeviceQueue::enable_notify_for_more() noexcept {
    if (broken()) return false;
    const RingIdx seen = shadow_avail_idx_;
    if (!rearm_notify(seen)) return false;
    const bool more = shadow_avail_idx_ != seen;
    if (more) stats_.notify_rechecks.add();
    return more;
}

}  // namespace pvnet::ring
