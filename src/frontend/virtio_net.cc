// Guest-side virtio-net: layout, rx refill, free-on-xmit transmit.
#include "pvnet/frontend/virtio_net.h"

#include <new>

#include "pvnet/virtio/virtio_net.h"

namespace pvnet::frontend {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) noexcept { return (v + a - 1) / a * a; }

uint32_t pool_size(const VirtioNetConfig& cfg) noexcept {
    // Both rings full and as many again in flight through the guest: rx can
    // always be refilled while tx holds a full ring (no io-forward deadlock).
    return cfg.n_bufs != 0 ? cfg.n_bufs : 2u * (uint32_t{cfg.rx_size} + cfg.tx_size);
}

}  // namespace

uint64_t QueuePair::area_bytes(const VirtioNetConfig& cfg) noexcept {
    return align_up(ring::split_ring_bytes(cfg.rx_size), 4096) +
           align_up(ring::split_ring_bytes(cfg.tx_size), 4096) +
           align_up(uint64_t{pool_size(cfg)} * cfg.buf_bytes, 4096);
}

Result<std::unique_ptr<QueuePair>, FrontendError> QueuePair::create(
    const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
    const VirtioNetConfig& cfg_in, const VirtioNetFds& fds) noexcept {
    VirtioNetConfig cfg = cfg_in;
    cfg.n_bufs = pool_size(cfg);
    if (bytes < area_bytes(cfg) || base.value % 4096 != 0) {
        return unexpected(FrontendError::AreaTooSmall);
    }
    std::unique_ptr<QueuePair> d(new (std::nothrow) QueuePair());
    if (!d) return unexpected(FrontendError::AreaTooSmall);
    d->cfg_ = cfg;
    d->fds_ = fds;
    uint64_t off = 0;
    d->rx_addrs_ = ring::split_ring_addrs_at(base, cfg.rx_size);
    off += align_up(ring::split_ring_bytes(cfg.rx_size), 4096);
    d->tx_addrs_ = ring::split_ring_addrs_at(base + off, cfg.tx_size);
    off += align_up(ring::split_ring_bytes(cfg.tx_size), 4096);
    d->bufs_gpa_ = base + off;
    auto host = table.translate_contiguous(d->bufs_gpa_, uint64_t{cfg.n_bufs} * cfg.buf_bytes,
                                           mem::Access::ReadWrite);
    if (!host) return unexpected(FrontendError::AreaUnmapped);
    d->bufs_host_ = *host;

    ring::DriverQueueConfig rq;
    rq.addrs = d->rx_addrs_;
    rq.event_idx = cfg.event_idx;
    ring::DriverQueueConfig tq = rq;
    tq.addrs = d->tx_addrs_;
    auto rx = ring::SplitDriverQueue::create(table, rq);
    auto tx = ring::SplitDriverQueue::create(table, tq);
    if (!rx || !tx) return unexpected(FrontendError::RingSetup);
    d->rx_ = std::move(*rx);
    d->tx_ = std::move(*tx);
    // Free-on-xmit: tx completions are reaped on the next transmit, so the
    // tx interrupt stays off (virtio_net without napi_tx).
    d->tx_->disable_cb();

    d->pool_.resize(cfg.n_bufs);
    for (uint32_t i = 0; i < cfg.n_bufs; ++i) d->pool_[i] = cfg.n_bufs - 1 - i;
    d->pool_top_ = cfg.n_bufs;
    return d;
}

uint32_t QueuePair::try_fill_recv() noexcept {
    uint32_t added = 0;
    while (rx_->num_free() > 0) {
        if (pool_top_ == 0) {
            stats_.refill_empty_pool.add();
            break;
        }
        const uint32_t id = pool_[--pool_top_];
        const ring::Buf b{bufs_gpa_ + uint64_t{id} * cfg_.buf_bytes, cfg_.buf_bytes};
        if (rx_->add({}, std::span<const ring::Buf>(&b, 1), id) != ring::AddStatus::Ok) {
            free_buf(id);
            break;
        }
        ++added;
    }
    if (added != 0 && rx_->kick_prepare()) {
        fds_.rx_kick->signal();
        stats_.rx_kicks.add();
    }
    return added;
}

bool QueuePair::xmit(uint32_t buf_id, uint32_t len) noexcept {
    if (!PVNET_ASSERT(buf_id < cfg_.n_bufs && len > 0 && len <= cfg_.buf_bytes)) return false;
    const ring::Buf b{bufs_gpa_ + uint64_t{buf_id} * cfg_.buf_bytes, len};
    if (tx_->add(std::span<const ring::Buf>(&b, 1), {}, buf_id) != ring::AddStatus::Ok) {
        stats_.tx_drop_ring_full.add();
        free_buf(buf_id);
        return false;
    }
    stats_.tx_pkts.add();
    stats_.tx_bytes.add(len);
    return true;
}

void QueuePair::tx_flush() noexcept {
    if (tx_->kick_prepare()) {
        fds_.tx_kick->signal();
        stats_.tx_kicks.add();
    }
}

uint32_t QueuePair::free_old_xmit() noexcept {
    uint32_t n = 0;
    ring::UsedBuf u;
    while (tx_->get_used(u)) {
        free_buf(static_cast<uint32_t>(u.token));
        ++n;
    }
    return n;
}

void QueuePair::wait_rx(int64_t timeout_us) noexcept {
    if (fds_.rx_call->wait(timeout_us)) {
        fds_.rx_call->consume();
        stats_.rx_interrupts.add();
    } else {
        stats_.wait_timeouts.add();
    }
}

Result<std::unique_ptr<VirtioNet>, FrontendError> VirtioNet::create(
    const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
    const VirtioNetConfig& cfg, std::span<const VirtioNetFds> fds) noexcept {
    if (cfg.queue_pairs == 0 || fds.size() != cfg.queue_pairs || bytes < area_bytes(cfg)) {
        return unexpected(FrontendError::AreaTooSmall);
    }
    std::unique_ptr<VirtioNet> d(new (std::nothrow) VirtioNet());
    if (!d) return unexpected(FrontendError::AreaTooSmall);
    const uint64_t per_pair = QueuePair::area_bytes(cfg);
    d->pairs_.reserve(cfg.queue_pairs);
    for (uint16_t i = 0; i < cfg.queue_pairs; ++i) {
        auto qp = QueuePair::create(table, base + i * per_pair, per_pair, cfg, fds[i]);
        if (!qp) return unexpected(qp.error());
        d->pairs_.push_back(std::move(*qp));
    }
    return d;
}

}  // namespace pvnet::frontend
