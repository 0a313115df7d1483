// handle_tx: guest → port. Mirrors handle_tx_copy in Linux
// drivers/vhost/net.c: notifications off while draining, a weight check
// after every packet, the race-free re-enable before stopping.
#pragma once

#include "pvnet/backend/vhost_net.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {

template <typename Port>
void VhostNet<Port>::handle_tx() noexcept {
    pending_ &= ~kTxWork;
    ring::SplitDeviceQueue& q = *tx_;
    if (q.broken()) return;
    stats_.tx_runs.add();
    q.disable_notify();  // poll mode: off for good, never re-armed
    ring::DescChain& c = *chain_;
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
            pending_ |= kTxWork;  // behind the rx work already queued
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
}

}  // namespace pvnet::backend
