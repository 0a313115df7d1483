// handle_tx: guest → port. Mirrors handle_tx_copy in Linux
// drivers/vhost/net.c: notifications off while draining, a weight check
// after every packet, the race-free re-enable before stopping. A port with
// no room (SendResult::Retry, vhost's -EAGAIN) gets the chain back on the
// ring (vhost_discard_vq_desc) and the run stops until the port is
// writable. The worker and the direct path (process_tx_now) run this loop
// under the pair's tx_mu. A port with send_batch (a tap's io_uring) gets
// each burst in one call; what it does not take goes back the same way.
// With VIRTIO_NET_F_HASH_REPORT the driver's header
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
    // A port that takes a burst in one call (HasSendBatch) gets the burst's
    // packets staged and handed over together: its chains stay the last
    // popped until then, so what it does not take goes back with unpop.
    constexpr bool batch = port::HasSendBatch<P>;
    for (;;) {
        ring::PopStatus st = ring::PopStatus::Ok;
        uint32_t burst = 0;
        while (burst < kMaxBurst) {
            st = q.pop(c);
            if (st != ring::PopStatus::Ok) break;
            // Packet defect: a tx chain is device-readable only and starts with
            // the virtio_net_hdr. Drop, count, return the chain used with 0.
            const bool bad = c.in_num != 0 || c.out_bytes < hdr_bytes;
            std::span<const iovec> src = c.readable();
            uint32_t len = c.out_bytes;
            if (!bad && !discard && hash_report) {
                src = {p.tx_cut->data(), cut_hash_fields(src, *p.tx_cut)};
                len -= hdr_extra_;
            }
            if constexpr (batch) {
                TxBatch& b = *p.tx_batch;
                // The staged go first when this chain is used now (bad,
                // discarded) or its pieces would not fit: used in pop order.
                if (b.n != 0 && (bad || discard || b.iov.size() - b.niov < src.size())) {
                    if (const uint32_t back = flush_tx_batch(p, 1, sent, sent_bytes, bytes)) {
                        burst -= back;
                        retry = true;
                        break;
                    }
                }
                if (!bad && !discard) {
                    std::copy(src.begin(), src.end(),
                              b.iov.begin() + static_cast<std::ptrdiff_t>(b.niov));
                    b.frames[b.n] = port::TxFrame{{b.iov.data() + b.niov, src.size()}, len};
                    b.heads[b.n] = c.head;
                    b.chain_bytes[b.n] = c.out_bytes;
                    b.niov += src.size();
                    ++b.n;
                }
            }
            if (bad) {
                s.tx_drop_bad_chain.add();
            } else if (discard) {
                s.tx_discarded.add();
            } else if constexpr (!batch) {
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
            if (bad || discard || !batch) (void)q.add_used(c.head, 0);
            ++burst;
            bytes += c.out_bytes;
            if (opt_.tx_weight.exceeded(pkts + burst, bytes)) {
                requeue = true;
                break;
            }
        }
        if constexpr (batch) {
            if (!retry && p.tx_batch->n != 0) {
                if (const uint32_t back = flush_tx_batch(p, 0, sent, sent_bytes, bytes)) {
                    burst -= back;
                    retry = true;
                    requeue = false;  // the port's writability resumes us, not the weight
                }
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

template <port::Port P>
uint32_t VhostNet<P>::flush_tx_batch(Pair& p, uint16_t after, uint32_t& sent,
                                     uint64_t& sent_bytes, uint64_t& bytes) noexcept {
    TxBatch& b = *p.tx_batch;
    ring::SplitDeviceQueue& q = *p.tx.q;
    const uint32_t n = b.n;
    b.n = 0;
    b.niov = 0;
    const port::SendBatchResult r =
        ports_[p.index]->send_batch(std::span<const port::TxFrame>(b.frames.data(), n));
    // A port that took fewer without saying Retry broke its contract: the
    // rest go back all the same, never lost.
    const uint32_t taken = std::min(r.taken, n);
    for (uint32_t k = 0; k < taken; ++k) (void)q.add_used(b.heads[k], 0);
    sent += r.sent;
    sent_bytes += r.sent_bytes;  // what the port got (without hash fields)
    p.stats.tx_drop_port.add(taken - std::min(r.sent, taken));
    if (taken == n) return 0;  // the `after` chains are the caller's to go on with
    // The packets not taken are the last popped but `after`: back in order.
    q.unpop(static_cast<uint16_t>(n - taken + after));
    for (uint32_t k = taken; k < n; ++k) bytes -= b.chain_bytes[k];
    p.stats.tx_retry.add();
    return n - taken;
}

}  // namespace pvnet::backend
