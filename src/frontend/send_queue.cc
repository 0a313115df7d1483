// SendQueue (send_queue.h): transmit and tx completion, with Flow send
// credit: released at transmit when the flow orphans, else when the
// completion is reaped.
//
// Interrupt discipline in Napi mode: whenever control leaves the tx path,
// tx interrupts are armed with used_event at most 3/4 of what is in flight
// ahead (enable_cb_delayed) or at the next entry (poll_tx's re-arm), so the
// device always signals before every buffer is used and credit cannot be
// stranded. FreeOnXmit keeps them off except while the queue is stopped.
//
// xmit_sg (start_xmit's xmit_skb with frags): one packet over several slots
// as one chain, indirect when negotiated; the tx records of its slots are
// linked from the first, which the used entry's token names.
#include "pvnet/frontend/send_queue.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace pvnet::frontend {

uint16_t SendQueue::max_pieces(const VirtioNetConfig& cfg) noexcept {
    return std::clamp<uint16_t>(cfg.tx_max_pieces, 1, cfg.tx_size);
}

SendQueue::SendQueue(const VirtioNetConfig& cfg, const ring::SplitRingAddrs& addrs,
                     std::unique_ptr<ring::SplitDriverQueue> vq, notify::QueueFds fds,
                     BufferPool& pool, VirtioNetStats& stats) noexcept
    : addrs_(addrs),
      vq_(std::move(vq)),
      fds_(fds),
      pool_(pool),
      stats_(stats),
      tx_mode_(cfg.tx_mode),
      tx_recs_(pool.size()),
      tx_sg_bufs_(max_pieces(cfg)) {
    // Free-on-xmit: tx completions are reaped on the next transmit, so the
    // tx interrupt stays off (virtio_net without napi_tx). Napi leaves it on.
    if (tx_mode_ == TxMode::FreeOnXmit) vq_->disable_cb();
    // check_sq_full_and_disable keeps room for the largest chain: one
    // descriptor when it goes indirect.
    tx_max_descs_ = uses_indirect(cfg) ? 1 : max_pieces(cfg);
    tx_wake_descs_ =
        cfg.tx_wake_descs == 0 ? tx_max_descs_ : std::min(cfg.tx_wake_descs, cfg.tx_size);
}

bool SendQueue::add_one(uint32_t buf_id, uint32_t len) noexcept {
    const ring::Buf b{pool_.gpa(buf_id), len};
    if (vq_->add(std::span<const ring::Buf>(&b, 1), {}, buf_id) != ring::AddStatus::Ok) {
        stats_.tx_drop_ring_full.add();
        pool_.free(buf_id);
        return false;
    }
    tx_recs_[buf_id] = TxRecord{};
    ++tx_batch_;
    return true;
}

bool SendQueue::add_sg(std::span<const TxPiece> pieces) noexcept {
    const uint32_t first = pieces[0].buf_id;
    if (vq_->add(std::span<const ring::Buf>(tx_sg_bufs_.data(), pieces.size()), {}, first) !=
        ring::AddStatus::Ok) {
        stats_.tx_drop_ring_full.add();
        for (const TxPiece& p : pieces) pool_.free(p.buf_id);
        return false;
    }
    for (std::size_t k = 0; k + 1 < pieces.size(); ++k) {
        tx_recs_[pieces[k].buf_id] = TxRecord{nullptr, 0, pieces[k + 1].buf_id};
    }
    tx_recs_[pieces.back().buf_id] = TxRecord{};
    ++tx_batch_;
    return true;
}

uint32_t SendQueue::sg_bufs(std::span<const TxPiece> pieces) noexcept {
    // Our caller's bug if these fail; never a peer's value.
    if (!PVNET_ASSERT(!pieces.empty() && pieces.size() <= tx_sg_bufs_.size())) return 0;
    uint64_t len = 0;
    for (std::size_t k = 0; k < pieces.size(); ++k) {
        const TxPiece& p = pieces[k];
        if (!PVNET_ASSERT(p.buf_id < pool_.size() && p.len > 0 && p.len <= pool_.buf_bytes())) {
            return 0;
        }
        tx_sg_bufs_[k] = ring::Buf{pool_.gpa(p.buf_id), p.len};
        len += p.len;
    }
    return static_cast<uint32_t>(len);  // at most tx_size slots of buf_bytes
}

bool SendQueue::xmit(uint32_t buf_id, uint32_t len) noexcept {
    if (!PVNET_ASSERT(buf_id < pool_.size() && len > 0 && len <= pool_.buf_bytes())) return false;
    if (!add_one(buf_id, len)) return false;
    stats_.tx_pkts.add();
    stats_.tx_bytes.add(len);
    return true;
}

bool SendQueue::xmit_sg(std::span<const TxPiece> pieces) noexcept {
    const uint32_t len = sg_bufs(pieces);
    if (len == 0 || !add_sg(pieces)) return false;
    stats_.tx_pkts.add();
    stats_.tx_bytes.add(len);
    return true;
}

template <typename Add>
XmitStatus SendQueue::start_xmit(Flow& flow, uint32_t first_id, uint32_t len, Add&& add) noexcept {
    // start_xmit without napi_tx: free what the device has used first.
    if (tx_mode_ == TxMode::FreeOnXmit) reap_tx(UINT32_MAX, stats_.tx_completions_at_xmit);
    if (tx_stopped_) {
        stats_.tx_busy.add();
        return XmitStatus::Stopped;
    }
    if (!flow.has_credit(len)) {
        stats_.tx_no_credit.add();
        return XmitStatus::NoCredit;
    }
    if (!add()) return XmitStatus::Dropped;
    flow.charge(len);
    if (flow.release_rule() == SndbufRelease::Orphan) {
        // skb_orphan: the sender may go on at once; completion owes it nothing.
        flow.release(len, false);
    } else {
        tx_recs_[first_id].flow = &flow;
        tx_recs_[first_id].len = len;
    }
    stats_.tx_pkts.add();
    stats_.tx_bytes.add(len);
    check_sq_full_and_disable();
    return XmitStatus::Ok;
}

XmitStatus SendQueue::xmit(Flow& flow, uint32_t buf_id, uint32_t len) noexcept {
    if (!PVNET_ASSERT(buf_id < pool_.size() && len > 0 && len <= pool_.buf_bytes())) {
        return XmitStatus::Dropped;
    }
    return start_xmit(flow, buf_id, len, [&] { return add_one(buf_id, len); });
}

XmitStatus SendQueue::xmit_sg(Flow& flow, std::span<const TxPiece> pieces) noexcept {
    const uint32_t len = sg_bufs(pieces);
    if (len == 0) return XmitStatus::Dropped;
    return start_xmit(flow, pieces[0].buf_id, len, [&] { return add_sg(pieces); });
}

void SendQueue::check_sq_full_and_disable() noexcept {
    if (vq_->num_free() >= tx_max_descs_) return;
    tx_stopped_ = true;
    stats_.tx_queue_stops.add();
    if (tx_mode_ == TxMode::Napi) {
        // The tx interrupt restarts the queue through poll_tx; if 3/4 are
        // already used, reap now instead (virtqueue_napi_schedule).
        tx_rearm_delayed(stats_.tx_completions_napi);
    } else if (!vq_->enable_cb_delayed()) {
        // More just got used: free them, then recheck (reap_tx may restart
        // the queue and turn the interrupt off again).
        reap_tx(UINT32_MAX, stats_.tx_completions_at_xmit);
    }
}

void SendQueue::tx_flush() noexcept {
    const uint32_t batch = std::exchange(tx_batch_, 0);
    if (vq_->kick_prepare()) {
        // The device would sleep through this batch without a kick: a small
        // one it may take right here (ORDER: kick_prepare's seq_cst fence
        // already ordered the publish before its look at the device's flags;
        // run() then reads the ring as the woken worker would).
        if (direct_tx_.run != nullptr && batch <= direct_tx_.max_batch &&
            direct_tx_.run(direct_tx_.ctx)) {
            stats_.tx_direct.add();
        } else {
            fds_.kick->signal();
            stats_.tx_kicks.add();
        }
    }
    if (tx_mode_ == TxMode::Napi) tx_rearm_delayed(stats_.tx_completions_at_xmit);
}

void SendQueue::tx_rearm_delayed(Counter& where) noexcept {
    // Bounded: each failed enable means a used entry is pending, and each
    // reap frees one of at most tx_size in flight (or the queue broke, and
    // enable_cb_delayed then says true).
    while (!vq_->enable_cb_delayed()) {
        vq_->disable_cb();
        if (reap_tx(UINT32_MAX, where) == 0) break;
    }
}

uint32_t SendQueue::free_old_xmit() noexcept {
    return reap_tx(UINT32_MAX, stats_.tx_completions_at_xmit);
}

uint32_t SendQueue::reap_tx(uint32_t max, Counter& where) noexcept {
    uint32_t n = 0;
    ring::UsedBuf u;
    while (n < max && vq_->get_used(u)) {
        // The token is our own first slot (get_used validated the head);
        // an xmit_sg packet's other slots hang off it.
        uint32_t id = static_cast<uint32_t>(u.token);
        if (tx_recs_[id].flow != nullptr) tx_recs_[id].flow->release(tx_recs_[id].len, true);
        while (id != kNoBuf) {
            const uint32_t next = tx_recs_[id].next;
            tx_recs_[id] = TxRecord{};
            pool_.free(id);
            id = next;
        }
        ++n;
    }
    if (n != 0) {
        stats_.tx_completions.add(n);
        where.add(n);
    }
    if (tx_stopped_ && vq_->num_free() >= tx_wake_descs_) {
        tx_stopped_ = false;
        stats_.tx_queue_wakes.add();
        // Free-on-xmit armed the interrupt only to hear about room.
        if (tx_mode_ == TxMode::FreeOnXmit) vq_->disable_cb();
    }
    return n;
}

uint32_t SendQueue::poll_tx(uint32_t budget) noexcept {
    stats_.tx_napi_polls.add();
    const bool napi = tx_mode_ == TxMode::Napi;
    if (napi) vq_->disable_cb();
    uint32_t n = reap_tx(budget, stats_.tx_completions_napi);
    // napi_complete + virtqueue_poll: re-arm at the next entry, then look
    // again for entries that raced the re-arm.
    while (n < budget) {
        if (!napi || vq_->enable_cb()) return n;
        vq_->disable_cb();
        const uint32_t m = reap_tx(budget - n, stats_.tx_completions_napi);
        if (m == 0) return n;  // broken mid-way: enable_cb says true next time
        n += m;
    }
    stats_.tx_napi_budget_exhausted.add();
    return n;
}

void SendQueue::poll_cleantx() noexcept {
    // virtnet_poll_cleantx: reap with interrupts off, then re-arm delayed so
    // the tx interrupt stays only as the fallback.
    vq_->disable_cb();
    reap_tx(UINT32_MAX, stats_.tx_completions_at_rx);
    tx_rearm_delayed(stats_.tx_completions_at_rx);
}

uint32_t SendQueue::tx_interrupt(uint32_t budget) noexcept {
    if (fds_.call->consume() == 0) return 0;
    stats_.tx_interrupts.add();
    if (tx_mode_ == TxMode::FreeOnXmit) {
        // skb_xmit_done: room again; the next xmit reaps.
        if (!tx_stopped_) vq_->disable_cb();
        return 0;
    }
    if (budget == 0) return 0;
    uint32_t n = 0;
    uint32_t got = 0;
    do {
        got = poll_tx(budget);
        n += got;
    } while (got == budget && !vq_->broken());
    return n;
}

}  // namespace pvnet::frontend
