// handle_rx: port → guest. Mirrors handle_rx in Linux drivers/vhost/net.c
// with the packet weight applied as on tx (seed 001), so an rx flood of
// small packets yields to tx after kPktWeight packets. With mergeable rx
// buffers a packet fills as many single-buffer chains as it needs
// (get_rx_bufs); chains popped but not needed go back to the ring.
// Out of guest buffers, the port's fd leaves the worker's epoll until a run
// drains the port again (vhost_net_disable_vq / vhost_net_enable_vq): a
// readable port the guest has no room for must not spin the worker.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/util/iov.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {


template <typename Port>
void VhostNet<Port>::handle_rx() noexcept {
    pending_ &= ~kRxWork;
    ring::SplitDeviceQueue& q = *rx_;
    if (q.broken()) return;
    stats_.rx_runs.add();
    q.disable_notify();  // poll mode: off for good, never re-armed
    rx_short_pending_ = 0;
    const bool mergeable = cfg_.mergeable_rx;
    ring::DescChain& c = *chain_;
    uint32_t pkts = 0;
    uint64_t bytes = 0;
    bool requeue = false;
    for (;;) {
        ring::PopStatus st = ring::PopStatus::Ok;
        uint32_t burst = 0;
        uint32_t used = 0;        // used entries staged in this burst
        uint16_t given_back = 0;  // chains too few for the packet, back on the ring
        bool port_empty = false;
        while (burst < kMaxBurst) {
            if (!port_.rx_pending()) {
                port_empty = true;
                break;
            }
            uint32_t len = 0;
            if (mergeable) {
                uint32_t n = 0;
                st = recv_mergeable(len, n, given_back);
                if (st != ring::PopStatus::Ok) break;
                used += n;
            } else {
                st = q.pop(c);
                if (st != ring::PopStatus::Ok) break;
                if (c.out_num != 0) {
                    // Packet defect: an rx chain is device-writable only.
                    stats_.rx_drop_bad_chain.add();
                } else {
                    len = port_.recv(c.writable());
                    if (len == 0) stats_.rx_drop_no_room.add();
                }
                (void)q.add_used(c.head, len);
                ++used;
            }
            ++burst;
            bytes += len;
            if (cfg_.rx_weight.exceeded(pkts + burst, bytes)) {
                requeue = true;
                break;
            }
        }
        pkts += burst;
        if (used != 0) {
            q.flush_used();
            signal(rx_sig_, used);
        }
        if (requeue) {
            pending_ |= kRxWork;
            stats_.rx_weight_requeue.add();
            break;
        }
        if (port_empty) {
            watch_port(true);  // buffers were there for all of it
            break;
        }
        if (st == ring::PopStatus::Broken) break;
        if (st == ring::PopStatus::Empty) {
            // With chains given back, the ring had too few bytes for the
            // packet: wait for buffers past those, not for them.
            (given_back != 0 ? stats_.rx_ring_short : stats_.rx_ring_empty).add();
            if (cfg_.mode == RunMode::Poll) break;
            // Out of guest buffers: wait for the refill kick, unless it came
            // while we were re-arming.
            if (given_back == 0 ? !q.enable_notify() : !q.enable_notify_for_more()) {
                rx_short_pending_ = given_back;
                watch_port(false);  // until the refill kick's run drains the port
                break;
            }
            q.disable_notify();
        }
    }
    account_run(pkts, bytes, stats_.rx_pkts, stats_.rx_bytes, stats_.rx_max_run_pkts);
}

template <typename Port>
ring::PopStatus VhostNet<Port>::get_rx_bufs(uint32_t need, uint16_t& nheads,
                                            std::size_t& niov) noexcept {
    ring::SplitDeviceQueue& q = *rx_;
    ring::DescChain& c = *chain_;
    RxBufs& b = *rx_bufs_;
    nheads = 0;
    niov = 0;
    uint64_t room = 0;
    while (room < need) {
        const ring::PopStatus st = q.pop(c);
        if (st == ring::PopStatus::Broken) return st;
        if (st == ring::PopStatus::Empty) {
            q.unpop(nheads);  // nheads now tells how many went back
            return st;
        }
        if (c.out_num != 0) {
            // Packet defect, as on the single-buffer path: every chain taken
            // for this packet goes back used with 0 (the driver drops each
            // as too short); the packet stays at the port.
            stats_.rx_drop_bad_chain.add();
            for (uint16_t k = 0; k < nheads; ++k) (void)q.add_used(b.heads[k].id, 0);
            (void)q.add_used(c.head, 0);
            nheads = static_cast<uint16_t>(nheads + 1);
            niov = 0;
            return ring::PopStatus::Ok;
        }
        // Rule: one packet maps to at most kMaxIov pieces (Linux get_rx_bufs'
        // UIO_MAXIOV); only buffers smaller than kMaxRxPacketBytes / kMaxIov
        // (64 bytes) get here.
        if (c.in_num > b.iov.size() - niov) {
            q.mark_broken(ring::RingError::TooManyIovs);
            return ring::PopStatus::Broken;
        }
        std::memcpy(b.iov.data() + niov, c.writable().data(), c.in_num * sizeof(iovec));
        niov += c.in_num;
        b.heads[nheads] = ring::UsedElem{c.head, c.in_bytes};
        ++nheads;
        room += c.in_bytes;
    }
    return ring::PopStatus::Ok;
}

template <typename Port>
ring::PopStatus VhostNet<Port>::recv_mergeable(uint32_t& bytes, uint32_t& used,
                                               uint16_t& given_back) noexcept {
    ring::SplitDeviceQueue& q = *rx_;
    RxBufs& b = *rx_bufs_;
    uint32_t need = kMaxRxPacketBytes;
    if constexpr (requires { port_.peek_len(); }) {
        if (const uint32_t n = port_.peek_len(); n != 0) need = n;
    }
    uint16_t nheads = 0;
    std::size_t niov = 0;
    const ring::PopStatus st = get_rx_bufs(need, nheads, niov);
    bytes = 0;
    used = 0;
    if (st == ring::PopStatus::Empty) given_back = nheads;
    if (st != ring::PopStatus::Ok) return st;
    used = nheads;
    if (niov == 0) return st;  // a bad chain: all returned used with 0

    const uint32_t len = port_.recv(std::span<const iovec>(b.iov.data(), niov));
    // The chains the packet filled; the rest go back to the ring. A drop
    // (len 0) gives them all back.
    uint16_t filled = 0;
    for (uint32_t left = len; left != 0 && filled < nheads; ++filled) {
        left -= std::min(left, b.heads[filled].len);
    }
    q.unpop(static_cast<uint16_t>(nheads - filled));
    used = filled;
    if (len < sizeof(virtio::virtio_net_hdr)) {
        // A drop, or a port that wrote no header: nothing to tell the driver
        // how many buffers; each filled chain goes back as a short one.
        stats_.rx_drop_no_room.add();
        for (uint16_t k = 0; k < filled; ++k) (void)q.add_used(b.heads[k].id, 0);
        return st;
    }
    // num_buffers (le16) in the first buffer's header, which may itself be
    // split over pieces (the driver need not align its buffers).
    const uint16_t num = virtio::host_to_le(filled);
    (void)copy_to_iov(std::span<const iovec>(b.iov.data(), niov),
                      offsetof(virtio::virtio_net_hdr, num_buffers),
                      std::as_bytes(std::span(&num, 1)));
    uint32_t left = len;
    for (uint16_t k = 0; k < filled; ++k) {
        const uint32_t n = std::min(left, b.heads[k].len);
        (void)q.add_used(b.heads[k].id, n);
        left -= n;
    }
    if (filled > 1) stats_.rx_merged_pkts.add();
    bytes = len;
    return st;
}

}  // namespace pvnet::backend
