// Interrupts: after each burst's used entries are published, the vring's
// Coalescer decides whether to signal now (max frames / max usecs, seed
// 000's "vhost: interrupt coalescing support"); when it says so the
// driver's suppression (EVENT_IDX, NO_INTERRUPT: vhost_notify) still
// decides. Coalescing limits change through one path, apply_coalesce_pairs: from
// set_coalesce()'s mailbox or the guest's NOTF_COAL commands on the
// control queue (handle_ctrl).
#include "pvnet/backend/net_device.h"

namespace pvnet::backend {

void NetDevice::signal(Vring& v, uint32_t n) noexcept {
    if (opt_.mode == RunMode::Poll || v.setup.call == nullptr) return;
    // Coalescing first, so a deferred burst leaves the EVENT_IDX bookkeeping
    // (signalled_used) alone and is covered by the next decision's interval.
    if (v.co->on_used(n) == notify::CoalesceAction::Defer) {
        v.coalesced->add();
        return;
    }
    raise(v);
}

void NetDevice::raise(Vring& v) noexcept {
    if (v.setup.call == nullptr || !v.q || v.q->broken()) return;
    if (v.q->should_signal()) {
        v.setup.call->signal();
        v.calls->add();
    } else {
        v.suppressed->add();
    }
}

void NetDevice::handle_timer(Vring& v) noexcept {
    if (v.co->on_timer() == notify::CoalesceAction::Signal) {
        v.timer_fires->add();
        raise(v);
    }
}

void NetDevice::handle_tx_timer(uint16_t pair) noexcept {
    Pair& p = *pairs_[pair];
    const std::lock_guard<std::mutex> lock(p.tx_mu);
    handle_timer(p.tx);
}

void NetDevice::handle_rx_timer(uint16_t pair) noexcept { handle_timer(pairs_[pair]->rx); }

void NetDevice::set_coalesce(notify::CoalesceParams rx, notify::CoalesceParams tx) noexcept {
    // Setters are serialised so the four fields of one message are never
    // mixed with another's; the worker takes no lock.
    const std::lock_guard<std::mutex> lock(coalesce_mu_);
    coalesce_msg_.rx_frames.store(rx.max_frames, std::memory_order_relaxed);
    coalesce_msg_.rx_usecs.store(rx.max_usecs, std::memory_order_relaxed);
    coalesce_msg_.tx_frames.store(tx.max_frames, std::memory_order_relaxed);
    coalesce_msg_.tx_usecs.store(tx.max_usecs, std::memory_order_relaxed);
    // ORDER: release; pairs with the acquire in take_coalesce_msg(), which then
    // reads these fields (or newer ones, whose epoch bump follows).
    coalesce_msg_.epoch.fetch_add(1, std::memory_order_release);
    // A sleeping worker applies it now, not at its next timeout.
    for (auto& w : workers_) w->wake->signal();
}

void NetDevice::take_coalesce_msg(Worker& w) noexcept {
    // ORDER: acquire; pairs with the release bump in set_coalesce(). A setter
    // racing with these loads bumps the epoch again, so its fields are
    // applied on the next pass.
    w.coalesce_epoch = coalesce_msg_.epoch.load(std::memory_order_acquire);
    if (w.index == 0) count(dstats_.coalesce_updates);  // once per message
    apply_coalesce_pairs(w, notify::CoalesceParams{coalesce_msg_.rx_frames.load(std::memory_order_relaxed),
                                          coalesce_msg_.rx_usecs.load(std::memory_order_relaxed)},
                   notify::CoalesceParams{coalesce_msg_.tx_frames.load(std::memory_order_relaxed),
                                          coalesce_msg_.tx_usecs.load(std::memory_order_relaxed)});
}

void NetDevice::apply_coalesce(Worker& w, std::optional<notify::CoalesceParams> rx,
                               std::optional<notify::CoalesceParams> tx) noexcept {
    // Counted first: a driver woken by the flush below sees the update counted.
    count(dstats_.coalesce_updates);
    for (auto& other : workers_) {
        if (other.get() == &w) {
            apply_coalesce_pairs(w, rx, tx);
        } else {
            // Worker 0 (the control queue's) holds its own mutex: only higher
            // ones are taken, the order lock_control takes them in.
            const auto lock = lock_worker(*other);
            apply_coalesce_pairs(*other, rx, tx);
        }
    }
}

void NetDevice::apply_coalesce_pairs(const Worker& w, std::optional<notify::CoalesceParams> rx,
                                     std::optional<notify::CoalesceParams> tx) noexcept {
    for (Pair* p : w.pairs) {
        if (rx && p->rx.co->set(*rx) == notify::CoalesceAction::Signal) raise(p->rx);
        if (tx) {
            const std::lock_guard<std::mutex> lock(p->tx_mu);
            if (p->tx.co->set(*tx) == notify::CoalesceAction::Signal) raise(p->tx);
        }
    }
}

void NetDevice::ctrl_sync_active_pairs() noexcept {
    // do_ctrl runs on worker 0, holding its own mutex; the other workers'
    // pairs (and rx_active_pairs_, which they read) change under theirs too.
    ControlLock others;
    for (std::size_t i = 1; i < workers_.size(); ++i) others.push_back(lock_worker(*workers_[i]));
    sync_active_pairs();
}

void NetDevice::handle_ctrl() noexcept {
    const std::lock_guard<std::mutex> lock(workers_[0]->mu);
    do_ctrl();
}

void NetDevice::do_ctrl() noexcept {
    ctrl_pending_ = false;
    if (!ctrl_) return;
    const bool more = ctrl_->handle([this](const CtrlCommand& c) noexcept {
        switch (c.op) {
            case CtrlCommand::Op::NotfCoalRxSet: apply_coalesce(*workers_[0], c.coal, std::nullopt); break;
            case CtrlCommand::Op::NotfCoalTxSet: apply_coalesce(*workers_[0], std::nullopt, c.coal); break;
            // Rule (multiqueue steering): once the command is used, no frame goes to
            // a receive queue beyond the pairs set; the ack follows apply.
            case CtrlCommand::Op::MqVqPairsSet:
                rx_steer_->set_active_pairs(c.pairs);
                ctrl_sync_active_pairs();
                break;
            case CtrlCommand::Op::MqRssConfig:
                rx_steer_->set_rss(c.rss);
                ctrl_sync_active_pairs();
                break;
            // Hashing only: the pairs in use stay as they are.
            case CtrlCommand::Op::MqHashConfig: rx_steer_->set_hash_config(c.hash); break;
        }
    });
    if (more) ctrl_pending_ = true;  // behind the datapath work already queued
    check_ctrl_broken();
}

}  // namespace pvnet::backend
