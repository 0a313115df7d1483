// Guest-side virtio-net: the queue pair's layout in guest memory and the
// device's pairs. The pieces are in buffer_pool.cc, receive_queue.cc and
// send_queue.cc, control commands in ctrl.cc.
#include "pvnet/frontend/virtio_net.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>

namespace pvnet::frontend {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) noexcept { return (v + a - 1) / a * a; }

uint32_t pool_size(const VirtioNetConfig& cfg) noexcept {
    // Both rings full and as many again in flight through the guest: rx can
    // always be refilled while tx holds a full ring (no io-forward deadlock).
    return cfg.n_bufs != 0 ? cfg.n_bufs : 2u * (uint32_t{cfg.rx_size} + cfg.tx_size);
}

/// xmit_sg's indirect tables: one per tx slot (SplitDriverQueue's layout).
uint64_t indirect_bytes(const VirtioNetConfig& cfg) noexcept {
    return SendQueue::uses_indirect(cfg)
               ? uint64_t{cfg.tx_size} * SendQueue::max_pieces(cfg) * 16u
               : 0;
}

}  // namespace

QueuePair::QueuePair(const VirtioNetConfig& cfg, const VirtioNetFds& fds, BufferPool pool,
                     const ring::SplitRingAddrs& rx_addrs,
                     std::unique_ptr<ring::SplitDriverQueue> rx,
                     const ring::SplitRingAddrs& tx_addrs,
                     std::unique_ptr<ring::SplitDriverQueue> tx) noexcept
    : pool_(std::move(pool)),
      sq_(cfg, tx_addrs, std::move(tx), {fds.tx_kick, fds.tx_call}, pool_, stats_),
      rq_(cfg, rx_addrs, std::move(rx), {fds.rx_kick, fds.rx_call}, pool_, stats_,
          // virtnet_poll_cleantx: only tx NAPI has completions for rx to reap.
          cfg.clean_tx_at_rx && cfg.tx_mode == TxMode::Napi ? &sq_ : nullptr) {}

uint64_t QueuePair::area_bytes(const VirtioNetConfig& cfg) noexcept {
    return align_up(ring::split_ring_bytes(cfg.rx_size), 4096) +
           align_up(ring::split_ring_bytes(cfg.tx_size), 4096) +
           align_up(uint64_t{pool_size(cfg)} * cfg.buf_bytes, 4096) +
           align_up(indirect_bytes(cfg), 4096);
}

Result<std::unique_ptr<QueuePair>, FrontendError> QueuePair::create(
    const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
    const VirtioNetConfig& cfg_in, const VirtioNetFds& fds) noexcept {
    VirtioNetConfig cfg = cfg_in;
    cfg.n_bufs = pool_size(cfg);
    if (bytes < area_bytes(cfg) || base.value % 4096 != 0) {
        return unexpected(FrontendError::AreaTooSmall);
    }
    // The rx ring, the tx ring, the buffers, the tx indirect tables.
    uint64_t off = 0;
    const ring::SplitRingAddrs rx_addrs = ring::split_ring_addrs_at(base, cfg.rx_size);
    off += align_up(ring::split_ring_bytes(cfg.rx_size), 4096);
    const ring::SplitRingAddrs tx_addrs = ring::split_ring_addrs_at(base + off, cfg.tx_size);
    off += align_up(ring::split_ring_bytes(cfg.tx_size), 4096);
    auto pool = BufferPool::create(table, base + off, cfg.n_bufs, cfg.buf_bytes, cfg.shared_pool);
    if (!pool) return unexpected(pool.error());
    off += align_up(uint64_t{cfg.n_bufs} * cfg.buf_bytes, 4096);

    ring::DriverQueueConfig rq;
    rq.addrs = rx_addrs;
    rq.event_idx = cfg.event_idx;
    ring::DriverQueueConfig tq = rq;
    tq.addrs = tx_addrs;
    tq.indirect = SendQueue::uses_indirect(cfg);
    tq.indirect_max = SendQueue::max_pieces(cfg);
    tq.indirect_area = base + off;
    auto rx = ring::SplitDriverQueue::create(table, rq);
    auto tx = ring::SplitDriverQueue::create(table, tq);
    if (!rx || !tx) return unexpected(FrontendError::RingSetup);
    std::unique_ptr<QueuePair> d(new (std::nothrow) QueuePair(
        cfg, fds, std::move(*pool), rx_addrs, std::move(*rx), tx_addrs, std::move(*tx)));
    if (!d) return unexpected(FrontendError::AreaTooSmall);
    return d;
}

uint64_t VirtioNet::ctrl_area_bytes(const VirtioNetConfig& cfg) noexcept {
    return cfg.ctrl_vq ? align_up(ring::split_ring_bytes(cfg.ctrl_size), 4096) + 4096 : 0;
}

Result<std::unique_ptr<VirtioNet>, FrontendError> VirtioNet::create(
    const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
    const VirtioNetConfig& cfg, std::span<const VirtioNetFds> fds,
    const notify::QueueFds& ctrl_fds) noexcept {
    if (cfg.queue_pairs == 0 || fds.size() != cfg.queue_pairs || bytes < area_bytes(cfg) ||
        (cfg.ctrl_vq && (ctrl_fds.kick == nullptr || ctrl_fds.call == nullptr))) {
        return unexpected(FrontendError::AreaTooSmall);
    }
    std::unique_ptr<VirtioNet> d(new (std::nothrow) VirtioNet());
    if (!d) return unexpected(FrontendError::AreaTooSmall);
    d->hdr_bytes_ = cfg.hdr_bytes();
    const uint64_t per_pair = QueuePair::area_bytes(cfg);
    d->pairs_.reserve(cfg.queue_pairs);
    for (uint16_t i = 0; i < cfg.queue_pairs; ++i) {
        auto qp = QueuePair::create(table, base + i * per_pair, per_pair, cfg, fds[i]);
        if (!qp) return unexpected(qp.error());
        d->pairs_.push_back(std::move(*qp));
    }
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    d->xps_.reset(new (std::nothrow) Xps(
        cfg.queue_pairs, cfg.queue_pairs,
        static_cast<uint16_t>(std::clamp<long>(cpus, 1, kXpsMaxBits))));
    if (!d->xps_) return unexpected(FrontendError::AreaTooSmall);
    d->xps_->virtnet_set_affinity(cfg.queue_pairs);
    if (!cfg.ctrl_vq) return d;

    // The control ring, then its command page, after the last pair.
    const mem::GuestAddr ctrl_base = base + uint64_t{cfg.queue_pairs} * per_pair;
    d->ctrl_addrs_ = ring::split_ring_addrs_at(ctrl_base, cfg.ctrl_size);
    d->ctrl_cmd_gpa_ = ctrl_base + align_up(ring::split_ring_bytes(cfg.ctrl_size), 4096);
    auto host = table.translate_contiguous(d->ctrl_cmd_gpa_, 4096, mem::Access::ReadWrite);
    if (!host) return unexpected(FrontendError::AreaUnmapped);
    d->ctrl_cmd_host_ = *host;
    ring::DriverQueueConfig cq;
    cq.addrs = d->ctrl_addrs_;
    cq.event_idx = cfg.event_idx;
    auto ctrl = ring::SplitDriverQueue::create(table, cq);
    // A command is a chain of 3 descriptors (hdr, data, ack).
    if (!ctrl || cfg.ctrl_size < 4) return unexpected(FrontendError::RingSetup);
    d->ctrl_ = std::move(*ctrl);
    d->ctrl_fds_ = ctrl_fds;
    d->ctrl_timeout_us_ = cfg.ctrl_timeout_us;
    return d;
}

XpsPick VirtioNet::pick_tx(const Flow& flow, uint32_t hash) const noexcept {
    const int cpu = sched_getcpu();
    return xps_->pick(flow.rx_queue(), cpu < 0 ? 0u : static_cast<unsigned>(cpu), hash);
}

}  // namespace pvnet::frontend
