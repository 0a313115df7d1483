// handle_tx: guest → port. Mirrors handle_tx_copy in Linux
// drivers/vhost/net.c: notifications off while draining, a weight check
// after every packet, the race-free re-enable before stopping. The worker
// and the direct path (process_tx_now) run the same loop, tx_run, under
// tx_mu_.
#pragma once

#include <mutex>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {

template <typename Port>
void VhostNet<Port>::handle_tx() noexcept {
    pending_ &= ~kTxWork;
    const std::lock_guard<std::mutex> lock(tx_mu_);
    (void)tx_run(false);
}

template <typename Port>
bool VhostNet<Port>::process_tx_now() noexcept {
    // ORDER: the mutex's acquire/release orders this run's plain tx state
    // (shadow indexes, coalescer, counters) against the worker's runs; the
    // rings' own order is barrier.h's, as in any run.
    std::unique_lock<std::mutex> lock(tx_mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
        stats_.direct_busy.add();
        return false;
    }
    const uint32_t pkts = tx_run(true);
    stats_.direct_runs.add();
    stats_.direct_pkts.add(pkts);
    return true;
}

template <typename Port>
uint32_t VhostNet<Port>::tx_run(bool direct) noexcept {
    ring::SplitDeviceQueue& q = *tx_;
    if (q.broken()) return 0;
    stats_.tx_runs.add();
    q.disable_notify();  // poll mode: off for good, never re-armed
    ring::DescChain& c = *tx_chain_;
    uint32_t pkts = 0;
    uint64_t bytes = 0;
    bool requeue = false;
    for (;;) {
        ring::PopStatus st = ring::PopStatus::Ok;
        uint32_t burst = 0;
        while (burst < kMaxBurst) {
            st = q.pop(c);
            if (st != ring::PopStatus::Ok) break;
            // Packet defect: a tx chain is device-readable only and starts with
            // the virtio_net_hdr. Drop, count, return the chain used with 0.
            if (c.in_num != 0 || c.out_bytes < sizeof(virtio::virtio_net_hdr)) {
                stats_.tx_drop_bad_chain.add();
            } else {
                port_.send(c.readable(), c.out_bytes);
            }
            (void)q.add_used(c.head, 0);
            ++burst;
            bytes += c.out_bytes;
            if (cfg_.tx_weight.exceeded(pkts + burst, bytes)) {
                requeue = true;
                break;
            }
        }
        pkts += burst;
        if (burst != 0) {
            q.flush_used();
            signal(tx_sig_, burst);
        }
        if (requeue) {
            // pending_ is the worker's: the direct path hands the rest over
            // as a kick would (notifications stay off until the worker's run).
            if (!direct) {
                pending_ |= kTxWork;  // behind the rx work already queued
            } else if (fds_.tx_kick != nullptr) {
                fds_.tx_kick->signal();
            }
            stats_.tx_weight_requeue.add();
            break;
        }
        if (st == ring::PopStatus::Broken) break;
        if (st == ring::PopStatus::Empty) {
            if (cfg_.mode == RunMode::Poll) break;
            // Re-arm; if the driver slipped a chain in meanwhile, go on.
            if (!q.enable_notify()) break;
            q.disable_notify();
        }
    }
    account_run(pkts, bytes, stats_.tx_pkts, stats_.tx_bytes, stats_.tx_max_run_pkts);
    return pkts;
}

}  // namespace pvnet::backend
