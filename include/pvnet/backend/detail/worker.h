// The worker thread: vhost_worker's loop. Work comes from the handlers'
// own requeues (weights) and, in event mode, from the kick eventfds and
// the port's fd, waited on with epoll.
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <cstdio>
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
    if (!wake) return unexpected(ring::RingError::Count);
    std::unique_ptr<VhostNet> d(new (std::nothrow) VhostNet(
        cfg, fds, port, std::move(*rx), std::move(*tx), std::move(*wake)));
    if (!d || !d->chain_ || d->epoll_fd_ < 0) return unexpected(ring::RingError::Count);
    return d;
}

template <typename Port>
VhostNet<Port>::VhostNet(const VhostNetConfig& cfg, const VhostNetFds& fds, Port& port,
                         std::unique_ptr<ring::SplitDeviceQueue> rx,
                         std::unique_ptr<ring::SplitDeviceQueue> tx, notify::EventFd wake)
    : cfg_(cfg),
      fds_(fds),
      port_(port),
      rx_(std::move(rx)),
      tx_(std::move(tx)),
      chain_(new (std::nothrow) ring::DescChain),
      wake_(std::move(wake)),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)) {
    auto watch = [this](int fd, uint32_t work) {
        if (fd < 0 || epoll_fd_ < 0) return;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = work;
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    };
    watch(fds_.tx_kick ? fds_.tx_kick->fd() : -1, kTxWork);
    watch(fds_.rx_kick ? fds_.rx_kick->fd() : -1, kRxWork);
    watch(wake_.fd(), 0);
    if constexpr (requires { port.rx_fd(); }) watch(port.rx_fd(), kPortWork);
}

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
    if (epoll_fd_ >= 0) {
        close(epoll_fd_);
        epoll_fd_ = -1;
    }
}

template <typename Port>
void VhostNet<Port>::wait_for_work(int timeout_ms) noexcept {
    epoll_event ev[4];
    const int n = epoll_wait(epoll_fd_, ev, 4, timeout_ms);
    if (timeout_ms != 0) stats_.wakeups.add();
    for (int i = 0; i < n; ++i) {
        const uint32_t w = ev[i].data.u32;
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
