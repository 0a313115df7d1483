// The worker thread: vhost_worker's loop. Work comes from the handlers'
// own requeues (weights) and, in event mode, from the kick eventfds and
// the port's fd, waited on with epoll.
#pragma once

#include <array>
#include <new>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/util/thread.h"

namespace pvnet::backend {

template <typename Port>
Result<std::unique_ptr<VhostNet<Port>>, ring::RingError> VhostNet<Port>::create(
    const mem::MemoryTable& table, const VhostNetConfig& cfg, const VhostNetFds& fds,
    Port& port) noexcept {
    auto rx = ring::SplitDeviceQueue::create(table, cfg.rx);
    if (!rx) return unexpected(rx.error());
    auto tx = ring::SplitDeviceQueue::create(table, cfg.tx);
    if (!tx) return unexpected(tx.error());
    auto wake = notify::EventFd::create();
    auto ep = notify::Epoll::create();
    if (!wake || !ep) return unexpected(ring::RingError::Count);
    bool watched = ep->add(wake->fd(), 0).has_value();
    if (fds.tx_kick) watched = watched && ep->add(fds.tx_kick->fd(), kTxWork).has_value();
    if (fds.rx_kick) watched = watched && ep->add(fds.rx_kick->fd(), kRxWork).has_value();
    if constexpr (requires { port.rx_fd(); }) {
        if (port.rx_fd() >= 0) watched = watched && ep->add(port.rx_fd(), kPortWork).has_value();
    }
    if (!watched) return unexpected(ring::RingError::Count);
    std::unique_ptr<VhostNet> d(new (std::nothrow) VhostNet(
        cfg, fds, port, std::move(*rx), std::move(*tx), std::move(*wake), std::move(*ep)));
    if (!d || !d->chain_) return unexpected(ring::RingError::Count);
    return d;
}

template <typename Port>
VhostNet<Port>::VhostNet(const VhostNetConfig& cfg, const VhostNetFds& fds, Port& port,
                         std::unique_ptr<ring::SplitDeviceQueue> rx,
                         std::unique_ptr<ring::SplitDeviceQueue> tx, notify::EventFd wake,
                         notify::Epoll epoll)
    : cfg_(cfg),
      fds_(fds),
      port_(port),
      rx_(std::move(rx)),
      tx_(std::move(tx)),
      chain_(new (std::nothrow) ring::DescChain),
      wake_(std::move(wake)),
      epoll_(std::move(epoll)) {}

template <typename Port>
void VhostNet<Port>::signal(ring::SplitDeviceQueue& q, const notify::EventFd* call,
                            Counter& calls) noexcept {
    if (cfg_.mode == RunMode::Poll || call == nullptr) return;
    if (q.should_signal()) {
        call->signal();
        calls.add();
    }
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
    std::array<uint32_t, 4> tags;
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
        } else if (w == 0) {
            wake_.consume();
        }
        if (w & (kRxWork | kPortWork)) pending_ |= kRxWork;
        if (w & kTxWork) pending_ |= kTxWork;
    }
}

template <typename Port>
void VhostNet<Port>::worker() noexcept {
    pending_ = kTxWork | kRxWork;
    while (!stop_.load(std::memory_order_relaxed)) {
        if (cfg_.mode == RunMode::Poll) {
            pending_ = kTxWork | kRxWork;
        } else if (pending_ == 0) {
            // Bounded so a lost wakeup shows as latency in the stats, never a hang.
            wait_for_work(100);
            // A flood port is always readable and has no fd to wait on.
            if (port_.rx_pending() && !rx_->broken()) pending_ |= kRxWork;
            continue;
        } else if (pending_ != (kTxWork | kRxWork)) {
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
    }
}

}  // namespace pvnet::backend
