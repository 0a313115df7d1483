// handle_tx: guest → port. Mirrors handle_tx_copy in Linux
// drivers/vhost/net.c: notifications off while draining, a weight check
// after every packet, the race-free re-enable before stopping. A port with
// no room (SendResult::Retry, vhost's -EAGAIN) gets the chain back on the
// ring (vhost_discard_vq_desc) and the run stops until the port is
// writable. The worker and the direct path (process_tx_now) run this loop
// under the pair's tx_mu. With VIRTIO_NET_F_HASH_REPORT the driver's header
// is struct virtio_net_hdr_v1_hash: the port gets the chain without its hash
// fields (the spec has the device ignore them on tx). A started but disabled
// vring (vhost-user SET_VRING_ENABLE 0) is served the same way, its frames
// discarded, never handed to the port.
#pragma once

#include "pvnet/backend/vhost_net.h"

namespace pvnet::backend {

template <port::Port P>
uint32_t VhostNet<P>::run_tx(Pair& p, bool direct) noexcept {
    ring::SplitDeviceQueue& q = *p.tx.q;
    if (q.broken()) return 0;
    VhostNetStats& s = p.stats;
    s.tx_runs.add();
    q.disable_notify();  // poll mode: off for good, never re-armed
    ring::DescChain& c = *p.tx_chain;
    P& port = *ports_[p.index];
    uint32_t pkts = 0;  // chains consumed (the weight counts them all)
    uint32_t sent = 0;
    uint64_t bytes = 0;
    uint64_t sent_bytes = 0;
    bool requeue = false;
    bool retry = false;
    const bool hash_report = hash_report_;  // hoisted: one register test per packet
    const bool discard = !p.tx.setup.enabled;  // started but disabled (under tx_mu)
    const uint32_t hdr_bytes = kHdrBytes + hdr_extra_;
    for (;;) {
        ring::PopStatus st = ring::PopStatus::Ok;
        uint32_t burst = 0;
        while (burst < kMaxBurst) {
            st = q.pop(c);
            if (st != ring::PopStatus::Ok) break;
            // Packet defect: a tx chain is device-readable only and starts with
            // the virtio_net_hdr. Drop, count, return the chain used with 0.
            if (c.in_num != 0 || c.out_bytes < hdr_bytes) {
                s.tx_drop_bad_chain.add();
            } else if (discard) {
                s.tx_discarded.add();
            } else {
                std::span<const iovec> src = c.readable();
                uint32_t len = c.out_bytes;
                if (hash_report) {
                    src = {p.tx_cut->data(), cut_hash_fields(src, *p.tx_cut)};
                    len -= hdr_extra_;
                }
                const port::SendResult r = port.send(src, len);
                if (r == port::SendResult::Retry) {
                    q.unpop(1);  // the same packet, offered again later
                    s.tx_retry.add();
                    retry = true;
                    break;
                }
                if (r == port::SendResult::Sent) {
                    ++sent;
                    sent_bytes += len;  // what the port got (without hash fields)
                } else {
                    s.tx_drop_port.add();
                }
            }
            (void)q.add_used(c.head, 0);
            ++burst;
            bytes += c.out_bytes;
            if (opt_.tx_weight.exceeded(pkts + burst, bytes)) {
                requeue = true;
                break;
            }
        }
        pkts += burst;
        if (burst != 0) {
            if constexpr (port::HasTxFlush<P>) port.flush_tx();
            q.flush_used();
            signal(p.tx, burst);
        }
        if (retry) {
            // Notifications stay off: the port's writability resumes us.
            if (!direct) {
                wait_port_writable(p);
            } else if (p.tx.setup.kick != nullptr) {
                p.tx.setup.kick->signal();  // the worker waits for the port
            }
            break;
        }
        if (requeue) {
            // pending is the worker's: the direct path hands the rest over
            // as a kick would (notifications stay off until the worker's run).
            if (!direct) {
                p.pending |= kTxWork;  // behind the rx work already queued
            } else if (p.tx.setup.kick != nullptr) {
                p.tx.setup.kick->signal();
            }
            s.tx_weight_requeue.add();
            break;
        }
        if (st == ring::PopStatus::Broken) break;
        if (st == ring::PopStatus::Empty) {
            if (opt_.mode == RunMode::Poll) break;
            // Re-arm; if the driver slipped a chain in meanwhile, go on.
            if (!q.enable_notify()) break;
            q.disable_notify();
        }
    }
    account_run(sent, sent_bytes, pkts, s.tx_pkts, s.tx_bytes, s.tx_max_run_pkts);
    return pkts;
}

}  // namespace pvnet::backend
