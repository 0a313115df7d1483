// Mergeable rx buffers (VIRTIO_NET_F_MRG_RXBUF, VIRTIO 1.2 5.1.6.4): a packet
// fills several single-buffer chains, the first one's header says how many
// (num_buffers), as vhost's get_rx_bufs and handle_rx do. These are the
// port-independent steps; the loop that calls the port is handle_rx.h.
// Chains popped for a packet and left unfilled are held for the run's next
// packet instead of being given back and popped again (vhost's handle_rx
// discards them, but knows each length from peek_head_len; a tap reader
// does not, and gathers 64 KiB for every frame).
#include <algorithm>
#include <cstddef>
#include <span>

#include "pvnet/backend/net_device.h"
#include "pvnet/util/iov.h"

namespace pvnet::backend {

ring::PopStatus NetDevice::get_rx_bufs(Pair& p, uint32_t need, uint16_t& nheads,
                                       std::size_t& niov, uint64_t& room,
                                       bool& at_iov_limit) noexcept {
    ring::SplitDeviceQueue& q = *p.rx.q;
    ring::DescChain& c = *p.rx_chain;
    RxBufs& b = *p.rx_bufs;
    // The chains an earlier packet of this run left come first: they are the
    // last popped, so whatever follows keeps the gathered ones in pop order.
    nheads = b.held;
    niov = b.held_iov;
    room = b.held_bytes;
    b.held = 0;
    b.held_iov = 0;
    b.held_bytes = 0;
    at_iov_limit = false;
    while (room < need) {
        if (niov == b.iov.size()) {
            at_iov_limit = true;
            break;
        }
        const ring::PopStatus st = q.pop(c);
        if (st == ring::PopStatus::Broken) return st;
        if (st == ring::PopStatus::Empty) {
            // Ran dry: what was gathered is the caller's to use or give back.
            return nheads == 0 ? st : ring::PopStatus::Ok;
        }
        if (c.out_num != 0) {
            // Packet defect, as on the single-buffer path: every chain taken
            // for this packet goes back used with 0 (the driver drops each
            // as too short); the packet stays at the port.
            p.stats.rx_drop_bad_chain.add();
            for (uint16_t k = 0; k < nheads; ++k) (void)q.add_used(b.heads[k].id, 0);
            (void)q.add_used(c.head, 0);
            nheads = static_cast<uint16_t>(nheads + 1);
            niov = 0;
            return ring::PopStatus::Ok;
        }
        // One packet maps to at most kMaxIov pieces (Linux get_rx_bufs'
        // UIO_MAXIOV). Tiny buffers are legal, not a ring violation: a
        // chain that would pass the limit waits for the next packet, and
        // this one is received into what was gathered.
        if (c.in_num > b.iov.size() - niov) {
            q.unpop(1);
            at_iov_limit = true;
            break;
        }
        // Field by field, not memcpy: walk_chain has just stored each iovec as
        // two 8-byte words, and a 16-byte load of them cannot be forwarded, so
        // it waited for the store buffer to drain behind the stores into guest
        // memory (44 % of serve --macswap's CPU at 64 B; docs/performance.md).
        const std::span<const iovec> w = c.writable();
        for (std::size_t k = 0; k < w.size(); ++k) {
            b.iov[niov + k].iov_base = w[k].iov_base;
            b.iov[niov + k].iov_len = w[k].iov_len;
        }
        niov += c.in_num;
        b.heads[nheads] = ring::UsedElem{c.head, c.in_bytes};
        b.head_iovs[nheads] = c.in_num;
        ++nheads;
        room += c.in_bytes;
    }
    return ring::PopStatus::Ok;
}

uint32_t NetDevice::finish_mergeable(Pair& p, uint16_t nheads, std::size_t niov,
                                     uint32_t len) noexcept {
    ring::SplitDeviceQueue& q = *p.rx.q;
    RxBufs& b = *p.rx_bufs;
    // The chains the packet filled; the rest wait for the run's next packet
    // (with no length to peek, a small frame fills one of the 64 KiB's worth
    // gathered). A drop (len 0) keeps them all.
    uint16_t filled = 0;
    for (uint32_t left = len; left != 0 && filled < nheads; ++filled) {
        left -= std::min(left, b.heads[filled].len);
    }
    if (len < kHdrBytes) {
        // A drop, or a port that wrote no header: nothing tells the driver
        // how many buffers; each filled chain goes back as a short one.
        p.stats.rx_drop_no_room.add();
        for (uint16_t k = 0; k < filled; ++k) (void)q.add_used(b.heads[k].id, 0);
        hold_rx_bufs(p, filled, nheads, niov);
        return filled;
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
    if (filled > 1) p.stats.rx_merged_pkts.add();
    hold_rx_bufs(p, filled, nheads, niov);  // after num_buffers: it moves the pieces
    return filled;
}

void NetDevice::hold_rx_bufs(Pair& p, uint16_t first, uint16_t nheads, std::size_t niov) noexcept {
    RxBufs& b = *p.rx_bufs;
    std::size_t off = 0;  // pieces of the chains before `first`
    for (uint16_t k = 0; k < first; ++k) off += b.head_iovs[k];
    const auto n = static_cast<uint16_t>(nheads - first);
    if (first != 0 && n != 0) {
        std::memmove(b.heads.data(), b.heads.data() + first, n * sizeof b.heads[0]);
        std::memmove(b.head_iovs.data(), b.head_iovs.data() + first, n * sizeof b.head_iovs[0]);
        std::memmove(b.iov.data(), b.iov.data() + off, (niov - off) * sizeof b.iov[0]);
    }
    uint64_t bytes = 0;
    for (uint16_t k = 0; k < n; ++k) bytes += b.heads[k].len;
    b.held = n;
    b.held_iov = niov - off;
    b.held_bytes = bytes;
}

void NetDevice::release_rx_bufs(Pair& p) noexcept {
    RxBufs& b = *p.rx_bufs;
    if (b.held == 0) return;
    // Held chains are the last popped (get_rx_bufs takes them before popping
    // more), so unpop gives back exactly them, each unused.
    p.rx.q->unpop(b.held);
    b.held = 0;
    b.held_iov = 0;
    b.held_bytes = 0;
}

}  // namespace pvnet::backend
