// The worker thread: vhost_worker's loop. Work comes from the handlers'
// own requeues (weights) and, in event mode, from the kick eventfds and
// the port's fd, waited on with epoll, or is found by busy polling
// (vhost_net_busy_poll) before the worker sleeps. The interrupt decision
// (Coalescer, then the ring's vhost_notify), the coalescing timers, the
// control messages and the control virtqueue are handled here too.
#pragma once

#include <array>
#include <new>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/util/thread.h"

namespace pvnet::backend {

namespace detail {
/// Spin-wait hint while busy polling.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
}  // namespace detail

template <typename Port>
Result<std::unique_ptr<VhostNet<Port>>, ring::RingError> VhostNet<Port>::create(
    const mem::MemoryTable& table, const VhostNetConfig& cfg, const VhostNetFds& fds,
    Port& port, const notify::QueueFds& ctrl_fds) noexcept {
    auto rx = ring::SplitDeviceQueue::create(table, cfg.rx);
    if (!rx) return unexpected(rx.error());
    auto tx = ring::SplitDeviceQueue::create(table, cfg.tx);
    if (!tx) return unexpected(tx.error());
    std::unique_ptr<CtrlQueue> ctrl;
    if (cfg.ctrl) {
        auto c = CtrlQueue::create(table, *cfg.ctrl, ctrl_fds);
        if (!c) return unexpected(c.error());
        ctrl = std::move(*c);
    }
    auto rx_co = notify::Coalescer::create(cfg.rx_coalesce);
    auto tx_co = notify::Coalescer::create(cfg.tx_coalesce);
    if (!rx_co || !tx_co) return unexpected(ring::RingError::Count);
    auto wake = notify::EventFd::create();
    auto ep = notify::Epoll::create();
    if (!wake || !ep) return unexpected(ring::RingError::Count);
    bool watched = ep->add(wake->fd(), 0).has_value();
    if (fds.tx_kick) watched = watched && ep->add(fds.tx_kick->fd(), kTxWork).has_value();
    if (fds.rx_kick) watched = watched && ep->add(fds.rx_kick->fd(), kRxWork).has_value();
    watched = watched && ep->add((*tx_co)->timer_fd(), kTxTimer).has_value();
    watched = watched && ep->add((*rx_co)->timer_fd(), kRxTimer).has_value();
    if (ctrl && ctrl_fds.kick) {
        watched = watched && ep->add(ctrl_fds.kick->fd(), kCtrlWork).has_value();
    }
    if constexpr (requires { port.rx_fd(); }) {
        if (port.rx_fd() >= 0) watched = watched && ep->add(port.rx_fd(), kPortWork).has_value();
    }
    if (!watched) return unexpected(ring::RingError::Count);
    std::unique_ptr<VhostNet> d(new (std::nothrow) VhostNet(
        cfg, fds, port, std::move(*rx), std::move(*tx), std::move(*rx_co), std::move(*tx_co),
        std::move(ctrl), ctrl_fds, std::move(*wake), std::move(*ep)));
    if (!d || !d->chain_ || !d->tx_chain_ || (cfg.mergeable_rx && !d->rx_bufs_)) {
        return unexpected(ring::RingError::Count);
    }
    return d;
}

template <typename Port>
VhostNet<Port>::VhostNet(const VhostNetConfig& cfg, const VhostNetFds& fds, Port& port,
                         std::unique_ptr<ring::SplitDeviceQueue> rx,
                         std::unique_ptr<ring::SplitDeviceQueue> tx,
                         std::unique_ptr<notify::Coalescer> rx_co,
                         std::unique_ptr<notify::Coalescer> tx_co,
                         std::unique_ptr<CtrlQueue> ctrl, const notify::QueueFds& ctrl_fds,
                         notify::EventFd wake, notify::Epoll epoll)
    : cfg_(cfg),
      fds_(fds),
      port_(port),
      rx_(std::move(rx)),
      tx_(std::move(tx)),
      rx_co_(std::move(rx_co)),
      tx_co_(std::move(tx_co)),
      ctrl_(std::move(ctrl)),
      ctrl_fds_(ctrl_fds),
      chain_(new (std::nothrow) ring::DescChain),
      tx_chain_(new (std::nothrow) ring::DescChain),
      rx_bufs_(cfg.mergeable_rx ? new (std::nothrow) RxBufs : nullptr),
      wake_(std::move(wake)),
      epoll_(std::move(epoll)),
      rx_sig_{*rx_,
              *rx_co_,
              fds.rx_call,
              stats_.rx_calls,
              stats_.rx_signals_coalesced,
              stats_.rx_signals_suppressed_event_idx,
              stats_.rx_coalesce_timer_fires},
      tx_sig_{*tx_,
              *tx_co_,
              fds.tx_call,
              stats_.tx_calls,
              stats_.tx_signals_coalesced,
              stats_.tx_signals_suppressed_event_idx,
              stats_.tx_coalesce_timer_fires} {}

template <typename Port>
void VhostNet<Port>::signal(QueueSignal& s, uint32_t n) noexcept {
    if (cfg_.mode == RunMode::Poll || s.call == nullptr) return;
    // Coalescing first, so a deferred burst leaves the EVENT_IDX bookkeeping
    // (signalled_used) alone and is covered by the next decision's interval.
    if (s.co.on_used(n) == notify::CoalesceAction::Defer) {
        s.coalesced.add();
        return;
    }
    raise(s);
}

template <typename Port>
void VhostNet<Port>::raise(QueueSignal& s) noexcept {
    if (s.call == nullptr || s.q.broken()) return;
    if (s.q.should_signal()) {
        s.call->signal();
        s.calls.add();
    } else {
        s.suppressed.add();
    }
}

template <typename Port>
void VhostNet<Port>::handle_timer(QueueSignal& s) noexcept {
    if (s.co.on_timer() == notify::CoalesceAction::Signal) {
        s.timer_fires.add();
        raise(s);
    }
}

template <typename Port>
void VhostNet<Port>::set_coalesce(notify::CoalesceParams rx, notify::CoalesceParams tx) noexcept {
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
    wake_.signal();  // a sleeping worker applies it now, not at its next timeout
}

template <typename Port>
void VhostNet<Port>::take_coalesce_msg() noexcept {
    // ORDER: acquire; pairs with the release bump in set_coalesce(). A setter
    // racing with these loads bumps the epoch again, so its fields are
    // applied on the next pass.
    coalesce_epoch_ = coalesce_msg_.epoch.load(std::memory_order_acquire);
    apply_coalesce(notify::CoalesceParams{coalesce_msg_.rx_frames.load(std::memory_order_relaxed),
                                          coalesce_msg_.rx_usecs.load(std::memory_order_relaxed)},
                   notify::CoalesceParams{coalesce_msg_.tx_frames.load(std::memory_order_relaxed),
                                          coalesce_msg_.tx_usecs.load(std::memory_order_relaxed)});
}

template <typename Port>
void VhostNet<Port>::apply_coalesce(std::optional<notify::CoalesceParams> rx,
                                    std::optional<notify::CoalesceParams> tx) noexcept {
    if (rx && rx_co_->set(*rx) == notify::CoalesceAction::Signal) raise(rx_sig_);
    if (tx) {
        const std::lock_guard<std::mutex> lock(tx_mu_);
        if (tx_co_->set(*tx) == notify::CoalesceAction::Signal) raise(tx_sig_);
    }
    stats_.coalesce_updates.add();
}

template <typename Port>
void VhostNet<Port>::handle_ctrl() noexcept {
    pending_ &= ~kCtrlWork;
    if (!ctrl_) return;
    const bool more = ctrl_->handle([this](const CtrlCommand& c) noexcept {
        if (c.op == CtrlCommand::Op::NotfCoalRxSet) {
            apply_coalesce(c.coal, std::nullopt);
        } else {
            apply_coalesce(std::nullopt, c.coal);
        }
    });
    if (more) pending_ |= kCtrlWork;  // behind the datapath work already queued
}

template <typename Port>
bool VhostNet<Port>::busy_poll() noexcept {
    if (cfg_.busyloop_usecs == 0) return false;
    uint64_t end = notify::Coalescer::now_ns() + uint64_t{cfg_.busyloop_usecs} * 1000u;
    uint64_t tx_deadline = 0;
    {
        const std::lock_guard<std::mutex> lock(tx_mu_);
        tx_deadline = tx_co_->deadline_ns();
    }
    // A pending coalescing deadline ends the spin early: its timer fd is
    // only seen by the epoll wait. (One the direct path arms meanwhile
    // waits for the spin's end, at most busyloop_usecs.)
    for (const uint64_t d : {rx_co_->deadline_ns(), tx_deadline}) {
        if (d != 0 && d < end) end = d;
    }
    // Notifications stay enabled: a kick that lands meanwhile is consumed by
    // the next epoll wait, never lost.
    for (;;) {
        // One acquire load of avail.idx per ring (pending()), and the port.
        // tx: while the direct path holds tx_mu_ the ring is being served
        // (and the rest comes back as a kick); look again next time.
        if (tx_mu_.try_lock()) {
            const bool tx = tx_->pending() != 0;
            tx_mu_.unlock();
            if (tx) pending_ |= kTxWork;
        }
        if (rx_ready() && port_.rx_pending()) pending_ |= kRxWork;
        if (ctrl_ && ctrl_->pending() != 0) pending_ |= kCtrlWork;
        if (pending_ != 0) {
            stats_.busy_poll_hits.add();
            return true;
        }
        // Stop and control messages are served by the loop, not after the budget.
        if (stop_.load(std::memory_order_relaxed) ||
            coalesce_msg_.epoch.load(std::memory_order_relaxed) != coalesce_epoch_) {
            return false;
        }
        if (notify::Coalescer::now_ns() >= end) break;
        detail::cpu_relax();
    }
    stats_.busy_poll_misses.add();
    return false;
}

template <typename Port>
void VhostNet<Port>::start(int cpu) {
    stop_.store(false, std::memory_order_relaxed);
    thread_ = std::thread([this, cpu] {
        pin_current_thread(cpu);
        worker();
    });
}

template <typename Port>
void VhostNet<Port>::stop() noexcept {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_relaxed);
    wake_.signal();
    thread_.join();
}

template <typename Port>
void VhostNet<Port>::wait_for_work(int timeout_ms) noexcept {
    std::array<uint32_t, 8> tags;
    const std::size_t n = epoll_.wait(tags, timeout_ms);
    if (timeout_ms != 0) stats_.wakeups.add();
    for (std::size_t i = 0; i < n; ++i) {
        const uint32_t w = tags[i];
        if (w & kTxWork) {
            fds_.tx_kick->consume();
            stats_.tx_kicks.add();
        } else if (w & kRxWork) {
            fds_.rx_kick->consume();
            stats_.rx_kicks.add();
        } else if (w == kTxTimer) {
            handle_tx_timer();
        } else if (w == kRxTimer) {
            handle_rx_timer();
        } else if (w == kCtrlWork) {
            ctrl_fds_.kick->consume();
            pending_ |= kCtrlWork;
        } else if (w == 0) {
            wake_.consume();
        }
        if (w & (kRxWork | kPortWork)) pending_ |= kRxWork;
        if (w & kTxWork) pending_ |= kTxWork;
    }
}

template <typename Port>
void VhostNet<Port>::watch_port(bool on) noexcept {
    if constexpr (requires { port_.rx_fd(); }) {
        if (on == port_watched_ || port_.rx_fd() < 0) return;
        // Level-triggered: unwatched, a readable port cannot end the wait.
        if (epoll_.modify(port_.rx_fd(), kPortWork, on)) {
            port_watched_ = on;
            if (!on) stats_.rx_port_unwatched.add();
        }
    }
}

template <typename Port>
void VhostNet<Port>::worker() noexcept {
    // The control queue, when there is one, is served like a ring: at start,
    // on its kick, by busy polling, and in poll mode when it has commands.
    constexpr uint32_t kDataWork = kTxWork | kRxWork;
    pending_ = kDataWork | (ctrl_ ? kCtrlWork : 0u);
    while (!stop_.load(std::memory_order_relaxed)) {
        // ORDER: acquire when it moved (take_coalesce_msg); relaxed peek first.
        if (coalesce_msg_.epoch.load(std::memory_order_relaxed) != coalesce_epoch_) {
            take_coalesce_msg();
        }
        if (cfg_.mode == RunMode::Poll) {
            pending_ = kDataWork | (ctrl_ && ctrl_->pending() != 0 ? kCtrlWork : 0u);
        } else if (pending_ == 0) {
            if (busy_poll()) {
                // Found by spinning: collect, without sleeping, any kick or
                // timer that landed meanwhile, so it is consumed now.
                wait_for_work(0);
            } else {
                // Bounded so a lost wakeup shows as latency in the stats, never a hang.
                wait_for_work(100);
                // A flood port is always readable and has no fd to wait on.
                // The ring first: rx_pending() may be a syscall (TapPort).
                if (rx_ready() && port_.rx_pending()) pending_ |= kRxWork;
                continue;
            }
        } else if ((pending_ & kDataWork) != kDataWork) {
            // A handler requeued itself: collect kicks that came meanwhile
            // without sleeping, as vhost_poll_queue adds work to the list
            // while another handler runs.
            wait_for_work(0);
        }
        const uint32_t work = pending_;
        pending_ = 0;
        // FIFO as vhost's work list: a requeued handler runs after the other.
        if (work & kTxWork) handle_tx();
        if (work & kRxWork) handle_rx();
        if (work & kCtrlWork) handle_ctrl();
        // The port became readable meanwhile (a server answered what tx just
        // sent): queue rx while the guest has buffers for it, as the socket's
        // wakeup queues handle_rx in vhost. Without buffers (or too few for
        // a mergeable packet), the refill kick does.
        if (!(pending_ & kRxWork) && rx_ready() && port_.rx_pending()) {
            pending_ |= kRxWork;
        }
    }
}

}  // namespace pvnet::backend
