// handle_rx: port → guest. Mirrors handle_rx in Linux drivers/vhost/net.c
// with the packet weight applied as on tx (seed 001), so an rx flood of
// small packets yields to tx after kPktWeight packets. Every pass of the
// loop counts against the weight, a retry after "re-armed, found more"
// included (Linux's ++recv_pkts), so a guest that adds one buffer at a
// time cannot stretch one run.
//
// Mergeable rx (VIRTIO_NET_F_MRG_RXBUF): a packet fills as many
// single-buffer chains as it needs. A port that peeks (PeerPort) gives the
// exact length: too few buffers for it and rx waits for the refill kick,
// as vhost does; when the next chain alone holds it (any small frame), it
// is received straight into that chain (recv_one_buffer), nothing gathered.
// A port that cannot tell (a tap) gets room for the largest frame that can
// arrive — 64 KiB with GUEST_TSO4/6/UFO, else the port's MTU — and when the
// guest's posted buffers hold less, the frame is received into them anyway: a
// drop is counted only when the frame that arrived does not fit. Out of guest
// buffers, the port's fd leaves the worker's epoll until a run drains the port
// again (vhost_net_disable_vq / vhost_net_enable_vq): a readable port the
// guest has no room for must not spin the worker.
//
// With VIRTIO_NET_F_HASH_REPORT the port writes into the chain without the
// hash fields, which report_hash (hash_report.cc) then fills in.
#pragma once

#include <cstddef>
#include <cstring>

#include "pvnet/backend/vhost_net.h"

namespace pvnet::backend {

/// The port's last recv() returned 0 because nothing waited (HasRecvEmpty).
template <port::Port P>
bool recv_found_empty(const P& port) noexcept {
    if constexpr (port::HasRecvEmpty<P>) {
        return port.recv_was_empty();
    } else {
        return false;
    }
}

template <port::Port P>
void VhostNet<P>::run_rx(Pair& p) noexcept {
    ring::SplitDeviceQueue& q = *p.rx.q;
    if (q.broken()) return;
    VhostNetStats& s = p.stats;
    s.rx_runs.add();
    q.disable_notify();  // poll mode: off for good, never re-armed
    p.rx_short_pending = 0;
    P& port = *ports_[p.index];
    ring::DescChain& c = *p.rx_chain;
    uint32_t passes = 0;  // what the weight counts: packets and retry passes
    uint32_t delivered = 0;
    uint64_t bytes = 0;
    bool requeue = false;
    const bool hash_report = hash_report_;  // hoisted: one register test per packet
    // A port whose empty read is cheap is read without asking first: its
    // EAGAIN is the test (rx_pending() only when the guest has no buffer).
    constexpr bool try_read = port::HasRecvEmpty<P>;
    for (;;) {
        ring::PopStatus st = ring::PopStatus::Ok;
        uint32_t burst = 0;
        uint32_t used = 0;        // used entries staged in this burst
        uint16_t given_back = 0;  // chains too few for the packet, back on the ring
        bool port_empty = false;
        while (burst < kMaxBurst) {
            if (!try_read && !port.rx_pending()) {
                port_empty = true;
                break;
            }
            uint32_t len = 0;
            if (mergeable_rx_) {
                uint32_t n = 0;
                st = recv_mergeable(p, len, n, given_back);
                if (st != ring::PopStatus::Ok) break;
                if (n == 0 && recv_found_empty(port)) {  // its chains are held
                    port_empty = true;
                    break;
                }
                used += n;
            } else {
                st = q.pop(c);
                if (st != ring::PopStatus::Ok) break;
                if (c.out_num != 0) {
                    // Packet defect: an rx chain is device-writable only.
                    s.rx_drop_bad_chain.add();
                } else {
                    len = hash_report ? recv_hashed(p, c.writable()) : port.recv(c.writable());
                    if (len == 0 && recv_found_empty(port)) {
                        q.unpop(1);  // unused: the next run pops it again
                        port_empty = true;
                        break;
                    }
                    if (len == 0) s.rx_drop_no_room.add();
                }
                (void)q.add_used(c.head, len);
                ++used;
            }
            ++burst;
            if (len != 0) {
                ++delivered;
                bytes += len;
            }
            if (opt_.rx_weight.exceeded(passes + burst, bytes)) {
                requeue = true;
                break;
            }
        }
        // Out of guest buffers before the port was asked: ask it now, so that
        // an empty port is not taken for a guest that must refill.
        if (try_read && st == ring::PopStatus::Empty && given_back == 0 && !port.rx_pending()) {
            port_empty = true;
        }
        passes += burst;
        if (used != 0) {
            q.flush_used();
            signal(p.rx, used);
        }
        if (requeue) break;
        if (port_empty) {
            watch_port_rx(p, true);  // buffers were there for all of it
            break;
        }
        if (st == ring::PopStatus::Broken) break;
        if (st == ring::PopStatus::Empty) {
            // With chains given back, the ring had too few bytes for a packet
            // of known length: wait for buffers past those, not for them.
            (given_back != 0 ? s.rx_ring_short : s.rx_ring_empty).add();
            if (opt_.mode == RunMode::Poll) break;
            // Out of guest buffers: wait for the refill kick, unless it came
            // while we were re-arming.
            if (given_back == 0 ? !q.enable_notify() : !q.enable_notify_for_more()) {
                p.rx_short_pending = given_back;
                watch_port_rx(p, false);  // until the refill kick's run drains the port
                break;
            }
            q.disable_notify();
            if (opt_.rx_weight.exceeded(++passes, bytes)) {
                requeue = true;
                break;
            }
        }
    }
    if (mergeable_rx_) release_rx_bufs(p);  // chains held past the run's last packet
    if (requeue) {
        p.pending |= kRxWork;
        s.rx_weight_requeue.add();
    }
    account_run(delivered, bytes, passes, s.rx_pkts, s.rx_bytes, s.rx_max_run_pkts);
}

template <port::Port P>
ring::PopStatus VhostNet<P>::recv_mergeable(Pair& p, uint32_t& bytes, uint32_t& used,
                                            uint16_t& given_back) noexcept {
    P& port = *ports_[p.index];
    bytes = 0;
    used = 0;
    given_back = 0;
    uint32_t need = 0;
    bool exact = false;
    if constexpr (port::HasPeekLen<P>) {
        if (const uint32_t n = port.peek_len(); n != 0) {
            // Not past held chains: they must stay the last popped (release_rx_bufs).
            if (ring::PopStatus st;
                !hash_report_ && p.rx_bufs->held == 0 && recv_one_buffer(p, n, st, bytes, used)) {
                return st;
            }
            need = n + hdr_extra_;
            exact = true;
        }
    }
    if (!exact) need = rx_need_bytes(p);
    uint16_t nheads = 0;
    std::size_t niov = 0;
    uint64_t room = 0;
    bool at_iov_limit = false;
    const ring::PopStatus st = get_rx_bufs(p, need, nheads, niov, room, at_iov_limit);
    if (st != ring::PopStatus::Ok) return st;
    if (niov == 0) {  // a bad chain: all returned used with 0
        used = nheads;
        return st;
    }
    if (room < need) {
        // A known length that more buffers would hold: wait for them. (At the
        // kMaxIov limit no more would help: receive, and let it drop.)
        if (exact && !at_iov_limit) {
            p.rx.q->unpop(nheads);
            given_back = nheads;
            return ring::PopStatus::Empty;
        }
        p.stats.rx_short_recv.add();
    }
    const std::span<const iovec> bufs(p.rx_bufs->iov.data(), niov);
    const uint32_t len = hash_report_ ? recv_hashed(p, bufs) : port.recv(bufs);
    if (len == 0 && recv_found_empty(port)) {
        hold_rx_bufs(p, 0, nheads, niov);  // nothing came: all kept for the next try
        return st;
    }
    used = finish_mergeable(p, nheads, niov, len);
    bytes = len < kHdrBytes ? 0 : len;
    return st;
}

template <port::Port P>
bool VhostNet<P>::recv_one_buffer(Pair& p, uint32_t need, ring::PopStatus& st, uint32_t& bytes,
                                  uint32_t& used) noexcept {
    ring::SplitDeviceQueue& q = *p.rx.q;
    ring::DescChain& c = *p.rx_chain;
    st = q.pop(c);  // every descriptor rule checked, as on the general path
    if (st != ring::PopStatus::Ok) return true;  // nothing gathered: as get_rx_bufs
    if (c.out_num != 0 || c.in_bytes < need || c.writable()[0].iov_len < kHdrBytes) {
        q.unpop(1);
        return false;
    }
    const uint32_t len = ports_[p.index]->recv(c.writable());
    // As finish_mergeable: a drop gives the chain back; a port that wrote no
    // header returns it used with 0.
    if (len < kHdrBytes) {
        p.stats.rx_drop_no_room.add();
        if (len == 0) {
            q.unpop(1);
        } else {
            (void)q.add_used(c.head, 0);
            used = 1;
        }
        return true;
    }
    // num_buffers (le16) = 1, into the header the port just wrote (its first
    // piece holds the whole header, checked above).
    const uint16_t one = virtio::host_to_le(uint16_t{1});
    std::memcpy(static_cast<std::byte*>(c.writable()[0].iov_base) +
                    offsetof(virtio::virtio_net_hdr, num_buffers),
                &one, sizeof one);
    (void)q.add_used(c.head, len);
    used = 1;
    bytes = len;
    return true;
}

template <port::Port P>
uint32_t VhostNet<P>::recv_hashed(Pair& p, std::span<const iovec> chain) noexcept {
    CutIov& cut = *p.rx_cut;
    const std::size_t n = cut_hash_fields(chain, cut);
    // A chain shorter than the header: the port finds no room (a drop).
    const uint32_t len = ports_[p.index]->recv(std::span<const iovec>(cut.data(), n));
    return report_hash(p, chain, len);
}

}  // namespace pvnet::backend
