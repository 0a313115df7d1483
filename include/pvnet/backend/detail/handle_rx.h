// handle_rx: port → guest. Mirrors handle_rx in Linux drivers/vhost/net.c
// with the packet weight applied as on tx (seed 001), so an rx flood of
// small packets yields to tx after kPktWeight packets.
#pragma once

#include "pvnet/backend/vhost_net.h"

namespace pvnet::backend {

template <typename Port>
void VhostNet<Port>::handle_rx() noexcept {
    pending_ &= ~kRxWork;
    ring::SplitDeviceQueue& q = *rx_;
    if (q.broken()) return;
    stats_.rx_runs.add();
    q.disable_notify();  // poll mode: off for good, never re-armed
    ring::DescChain& c = *chain_;
    uint32_t pkts = 0;
    uint64_t bytes = 0;
    bool requeue = false;
    for (;;) {
        ring::PopStatus st = ring::PopStatus::Ok;
        uint32_t burst = 0;
        bool port_empty = false;
        while (burst < kMaxBurst) {
            if (!port_.rx_pending()) {
                port_empty = true;
                break;
            }
            st = q.pop(c);
            if (st != ring::PopStatus::Ok) break;
            uint32_t len = 0;
            if (c.out_num != 0) {
                // Packet defect: an rx chain is device-writable only.
                stats_.rx_drop_bad_chain.add();
            } else {
                len = port_.recv(c.writable());
                if (len == 0) stats_.rx_drop_no_room.add();
            }
            (void)q.add_used(c.head, len);
            ++burst;
            bytes += len;
            if (cfg_.rx_weight.exceeded(pkts + burst, bytes)) {
                requeue = true;
                break;
            }
        }
        pkts += burst;
        if (burst != 0) {
            q.flush_used();
            signal(rx_sig_, burst);
        }
        if (requeue) {
            pending_ |= kRxWork;
            stats_.rx_weight_requeue.add();
            break;
        }
        if (port_empty || st == ring::PopStatus::Broken) break;
        if (st == ring::PopStatus::Empty) {
            stats_.rx_ring_empty.add();
            if (cfg_.mode == RunMode::Poll) break;
            // Out of guest buffers: wait for the refill kick, unless it came
            // while we were re-arming.
            if (!q.enable_notify()) break;
            q.disable_notify();
        }
    }
    account_run(pkts, bytes, stats_.rx_pkts, stats_.rx_bytes, stats_.rx_max_run_pkts);
}

}  // namespace pvnet::backend
