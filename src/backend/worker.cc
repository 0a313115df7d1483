// The worker thread: vhost_worker's loop. Work comes from the handlers'
// own requeues (weights) and, in event mode, from the kick eventfds, the
// ports' fds, the coalescing timers and the control queue's kick, waited
// on with epoll, or found by busy polling (busy_poll.cc) before the worker
// sleeps. Every round collects every ready event source without blocking
// before it runs the handlers, so a two-way flood that keeps both
// directions past their weights still serves kicks, timers and control
// commands (vhost_poll_queue adds work to the list while a handler runs).
#include <algorithm>
#include <array>
#include <cstdio>
#include <thread>
#include <utility>

#include "pvnet/backend/net_device.h"
#include "pvnet/util/thread.h"

namespace pvnet::backend {

void NetDevice::start(int cpu) {
    stop_.store(false, std::memory_order_relaxed);
    const auto ncpu = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (auto& wp : workers_) {
        Worker& w = *wp;
        const int at = cpu < 0 ? -1 : (cpu + w.index) % ncpu;
        w.thread = std::thread([this, &w, at] {
            pin_current_thread(at);
            worker(w);
        });
    }
}

void NetDevice::stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& w : workers_) {
        if (!w->thread.joinable()) continue;
        w->wake->signal();
        w->thread.join();
    }
}

void NetDevice::handle_tx(uint16_t pair) noexcept {
    const std::lock_guard<std::mutex> lock(workers_[pairs_[pair]->worker]->mu);
    do_tx(*pairs_[pair]);
}

void NetDevice::handle_rx(uint16_t pair) noexcept {
    const std::lock_guard<std::mutex> lock(workers_[pairs_[pair]->worker]->mu);
    do_rx(*pairs_[pair]);
}

void NetDevice::do_tx(Pair& p) noexcept {
    p.pending &= ~kTxWork;
    if (!p.tx.running()) {
        check_broken(p);  // the direct path may have broken it
        return;
    }
    {
        const std::lock_guard<std::mutex> lock(p.tx_mu);
        (void)run_tx(p, false);
    }
    check_broken(p);
}

void NetDevice::do_rx(Pair& p) noexcept {
    p.pending &= ~kRxWork;
    if (!rx_serving(p)) return;  // not running, port dead, or the pair out of use
    run_rx(p);
    check_broken(p);
}

bool NetDevice::process_tx_now(uint16_t pair) noexcept {
    Pair& p = *pairs_[pair];
    // ORDER: the mutex's acquire/release orders this run's plain tx state
    // (shadow indexes, coalescer, counters) against the worker's runs; the
    // rings' own order is barrier.h's, as in any run.
    std::unique_lock<std::mutex> lock(p.tx_mu, std::try_to_lock);
    if (!lock.owns_lock()) {
        p.stats.direct_busy.add();
        return false;
    }
    // A stopped or broken ring, or one waiting for the port: the worker's.
    // ORDER: relaxed; the worker sets the flag under tx_mu, so a wait begun
    // before we took it is seen (net_device.h).
    if (!p.tx.running() || p.tx_wait_writable.load(std::memory_order_relaxed)) return false;
    const uint32_t pkts = run_tx(p, true);
    p.stats.direct_runs.add();
    p.stats.direct_pkts.add(pkts);
    // A break this run found is reported by the worker (its epoll set, its
    // counters), which the wake sends to check_broken.
    if (p.tx.q->broken()) workers_[p.worker]->wake->signal();
    return true;
}

bool NetDevice::rx_ready(Pair& p) noexcept {
    if (!rx_serving(p)) return false;
    const uint16_t n = p.rx.q->pending();
    if (p.rx.q->broken()) {
        check_broken(p);  // found here: nothing else would report it
        return false;
    }
    return n > p.rx_short_pending;
}

void NetDevice::watch_port_rx(Pair& p, bool on) noexcept {
    if (p.port_want_rx == on) return;
    p.port_want_rx = on;
    sync_port_watch(p);
    // As port_hangup: counted after the watch changed.
    if (!on && p.port.rx_fd >= 0) p.stats.rx_port_unwatched.add();
}

void NetDevice::wait_port_writable(Pair& p) noexcept {
    if (p.port.tx_fd < 0 || opt_.mode == RunMode::Poll) {
        p.pending |= kTxWork;  // no fd to wait on: the next round retries
        return;
    }
    p.tx_wait_writable.store(true, std::memory_order_relaxed);  // under tx_mu (run_tx)
    sync_port_watch(p);  // EPOLLOUT into the wait: nothing else resumes tx
}

void NetDevice::sync_port_watch(Pair& p) noexcept {
    if (opt_.mode == RunMode::Poll) return;
    const bool rx_on = p.port_want_rx && rx_serving(p);
    const bool tx_on =
        p.tx_wait_writable.load(std::memory_order_relaxed) && p.tx.running() && !p.port_dead;
    const bool shared = p.port.tx_fd >= 0 && p.port.tx_fd == p.port.rx_fd;
    // Not wanted at all: out of the epoll set, so an error or hang-up
    // (which epoll reports even for no events) cannot spin us.
    auto apply = [this, &p](int fd, uint32_t& cur, uint32_t want) {
        if (fd < 0 || cur == want) return;
        const uint32_t t = tag(p.index, kTagPort);
        if (want == 0) {
            epoll_forget(fd, t);
        } else if (cur == 0) {
            epoll_watch(fd, t, want);
        } else {
            (void)workers_[p.worker]->epoll->modify(fd, t, want);
        }
        cur = want;
    };
    apply(p.port.rx_fd, p.rx_reg_events,
          (rx_on ? notify::kEpollIn : 0u) | (shared && tx_on ? notify::kEpollOut : 0u));
    if (!shared) apply(p.port.tx_fd, p.tx_reg_events, tx_on ? notify::kEpollOut : 0u);
}

void NetDevice::port_hangup(Pair& p) noexcept {
    if (p.port_dead) return;
    p.port_dead = true;
    p.tx_wait_writable.store(false, std::memory_order_relaxed);
    sync_port_watch(p);
    // Counted once the fd is out of the wait: a reader that sees the count
    // sees the port unwatched (hostile_guest_test checks exactly that).
    count(dstats_.port_hangups);
    std::fprintf(stderr, "pvnet backend: pair %u: port fd reported an error or hang-up; "
                 "no longer watched\n", unsigned{p.index});
}

void NetDevice::on_event(Worker& w, uint32_t t, uint32_t events) noexcept {
    const uint32_t pi = t >> kTagShift;
    if (pi >= pairs_.size()) return;
    Pair& p = *pairs_[pi];
    const auto kind = static_cast<Tag>(t & ((1u << kTagShift) - 1u));
    // An event for a ring the direct path broke: report it, which also takes
    // its kick (level-triggered, it would spin) and port fd out of the wait.
    if (kind != kTagWake) check_broken(p);
    // A vring stopped while we slept: its fds may be gone; the event is stale.
    switch (kind) {
        case kTagWake:
            w.wake->consume();
            // process_tx_now's wake after its run broke the ring.
            for (Pair* q : w.pairs) check_broken(*q);
            break;
        case kTagTxKick:
            if (p.tx.running() && p.tx.setup.kick != nullptr) {
                p.tx.setup.kick->consume();
                p.stats.tx_kicks.add();
                p.pending |= kTxWork;
            }
            break;
        case kTagRxKick:
            if (p.rx.running() && p.rx.setup.kick != nullptr) {
                p.rx.setup.kick->consume();
                p.stats.rx_kicks.add();
                p.pending |= kRxWork;
            }
            break;
        case kTagPort:
            if ((events & (notify::kEpollErr | notify::kEpollHup)) != 0) {
                port_hangup(p);
                break;
            }
            if ((events & notify::kEpollIn) != 0) p.pending |= kRxWork;
            if ((events & notify::kEpollOut) != 0 &&
                p.tx_wait_writable.load(std::memory_order_relaxed)) {
                p.tx_wait_writable.store(false, std::memory_order_relaxed);
                sync_port_watch(p);
                p.pending |= kTxWork;
            }
            break;
        case kTagTxTimer:
            handle_tx_timer(static_cast<uint16_t>(pi));
            break;
        case kTagRxTimer:
            handle_rx_timer(static_cast<uint16_t>(pi));
            break;
        case kTagCtrlKick:
            if (ctrl_ && ctrl_setup_.kick != nullptr) {
                ctrl_setup_.kick->consume();
                ctrl_pending_ = true;
            }
            break;
    }
}

void NetDevice::wait_for_work(Worker& w, std::unique_lock<std::mutex>& lock,
                              int timeout_ms) noexcept {
    std::array<notify::EpollEvent, 16> ev;
    std::size_t n = 0;
    if (timeout_ms == 0) {
        n = w.epoll->wait(ev, 0);
    } else {
        // Control calls run while we sleep; what we wake for is checked
        // against the state they left.
        lock.unlock();
        n = w.epoll->wait(ev, timeout_ms);
        lock.lock();
        count(dstats_.wakeups);
    }
    for (std::size_t i = 0; i < n; ++i) on_event(w, ev[i].tag, ev[i].events);
}

void NetDevice::run_work(Worker& w) noexcept {
    // FIFO as vhost's work list: a handler that requeues itself runs after
    // the others queued in this round.
    for (std::size_t i = 0; i < w.pairs.size(); ++i) {
        w.round_work[i] = std::exchange(w.pairs[i]->pending, 0u);
    }
    const bool ctrl = w.index == 0 && ctrl_pending_;
    for (std::size_t i = 0; i < w.pairs.size(); ++i) {
        Pair& p = *w.pairs[i];
        const uint32_t work = w.round_work[i];
        if (work & kTxWork) do_tx(p);
        if (work & kRxWork) do_rx(p);
    }
    if (ctrl) do_ctrl();
    for (Pair* pp : w.pairs) {
        Pair& p = *pp;
        // The port became readable meanwhile (a server answered what tx just
        // sent): queue rx while the guest has buffers for it, as the socket's
        // wakeup queues handle_rx in vhost. Without buffers (or too few for a
        // mergeable packet), the refill kick does.
        if (!(p.pending & kRxWork) && rx_ready(p) && port_rx_pending(p)) p.pending |= kRxWork;
    }
    count(dstats_.rounds);
}

void NetDevice::worker(Worker& w) noexcept {
    std::unique_lock<std::mutex> lock(w.mu);
    const bool ctrl_owner = w.index == 0;
    for (Pair* p : w.pairs) {
        if (p->tx.q) p->pending |= kTxWork;
        if (p->rx.q) p->pending |= kRxWork;
    }
    if (ctrl_owner) ctrl_pending_ = ctrl_ != nullptr;
    auto any_pending = [this, &w, ctrl_owner] {
        for (Pair* p : w.pairs) {
            if (p->pending != 0) return true;
        }
        return ctrl_owner && ctrl_pending_;
    };
    while (!stop_.load(std::memory_order_relaxed)) {
        if (ctl_waiting_.load(std::memory_order_relaxed) != 0) {
            // Step aside for a control call; it takes our mutex once we let go.
            lock.unlock();
            while (ctl_waiting_.load(std::memory_order_relaxed) != 0) std::this_thread::yield();
            lock.lock();
            continue;
        }
        // ORDER: acquire when it moved (take_coalesce_msg); relaxed peek first.
        if (coalesce_msg_.epoch.load(std::memory_order_relaxed) != w.coalesce_epoch) {
            take_coalesce_msg(w);
        }
        if (opt_.mode == RunMode::Poll) {
            for (Pair* p : w.pairs) {
                check_broken(*p);  // the direct path's wake is not read in poll mode
                if (p->tx.running()) p->pending |= kTxWork;
                if (p->rx.running()) p->pending |= kRxWork;
            }
            if (ctrl_owner && ctrl_ready()) ctrl_pending_ = true;
        } else if (!any_pending()) {
            if (busy_poll(w)) {
                // Found by spinning: collect, without sleeping, any kick or
                // timer that landed meanwhile, so it is consumed now.
                wait_for_work(w, lock, 0);
            } else {
                // Bounded so a lost wakeup shows as latency in the stats, never a hang.
                wait_for_work(w, lock, 100);
                // A port without an fd to wait on (a flood) is looked at here.
                for (Pair* p : w.pairs) {
                    if (p->port.rx_fd < 0 && rx_ready(*p) && port_rx_pending(*p)) {
                        p->pending |= kRxWork;
                    }
                }
                continue;
            }
        } else {
            wait_for_work(w, lock, 0);
        }
        run_work(w);
    }
}

}  // namespace pvnet::backend
