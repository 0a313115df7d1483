// Busy polling (vhost's busyloop_timeout, vhost_net_busy_poll): before
// sleeping, the worker spins on the rings, the ports and the control queue
// for up to busyloop_usecs, so work that arrives within the budget costs
// no kick, no interrupt and no wake-up.
#include "pvnet/backend/net_device.h"
#include "pvnet/util/clock.h"
#include "pvnet/util/cpu.h"

namespace pvnet::backend {

bool NetDevice::busy_poll(Worker& w) noexcept {
    if (opt_.busyloop_usecs == 0) return false;
    uint64_t end = now_ns() + uint64_t{opt_.busyloop_usecs} * 1000u;
    // A pending coalescing deadline ends the spin early: its timer fd is
    // only seen by the epoll wait. (One the direct path arms meanwhile
    // waits for the spin's end, at most busyloop_usecs.)
    for (Pair* p : w.pairs) {
        uint64_t tx_deadline = 0;
        {
            const std::lock_guard<std::mutex> lock(p->tx_mu);
            tx_deadline = p->tx.co->deadline_ns();
        }
        for (const uint64_t d : {p->rx.co->deadline_ns(), tx_deadline}) {
            if (d != 0 && d < end) end = d;
        }
    }
    // Notifications stay enabled: a kick that lands meanwhile is consumed by
    // the next epoll wait, never lost.
    for (;;) {
        bool found = false;
        for (Pair* pp : w.pairs) {
            Pair& p = *pp;
            // One acquire load of avail.idx per ring, and the port.
            if (tx_ready(p)) p.pending |= kTxWork;
            if (rx_ready(p) && port_rx_pending(p)) p.pending |= kRxWork;
            found = found || p.pending != 0;
        }
        if (w.index == 0 && ctrl_ready()) ctrl_pending_ = true;
        if (found || (w.index == 0 && ctrl_pending_)) {
            count(dstats_.busy_poll_hits);
            return true;
        }
        // Stop, control calls and messages are served by the loop, not after the budget.
        if (stop_.load(std::memory_order_relaxed) ||
            ctl_waiting_.load(std::memory_order_relaxed) != 0 ||
            coalesce_msg_.epoch.load(std::memory_order_relaxed) != w.coalesce_epoch) {
            return false;
        }
        if (now_ns() >= end) break;
        cpu_relax();
    }
    count(dstats_.busy_poll_misses);
    return false;
}

bool NetDevice::tx_ready(Pair& p) noexcept {
    if (!p.tx.running() || p.tx_wait_writable.load(std::memory_order_relaxed)) return false;
    // While the direct path holds tx_mu the ring is being served (and the
    // rest comes back as a kick); look again next time.
    if (!p.tx_mu.try_lock()) return false;
    const bool more = p.tx.q->pending() != 0;
    p.tx_mu.unlock();
    if (p.tx.q->broken()) check_broken(p);  // found here: nothing else would report it
    return more;
}

bool NetDevice::ctrl_ready() noexcept {
    if (!ctrl_ || ctrl_->queue().broken()) return false;
    const bool more = ctrl_->pending() != 0;
    check_ctrl_broken();  // found here: nothing else would report it
    return more;
}

}  // namespace pvnet::backend
