// Guest-side virtio-net: layout, rx refill, the rx interrupt wait. Transmit
// and tx completion are in xmit.cc, control commands in ctrl.cc.
#include "pvnet/frontend/virtio_net.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
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

uint16_t tx_max_pieces(const VirtioNetConfig& cfg) noexcept {
    return std::clamp<uint16_t>(cfg.tx_max_pieces, 1, cfg.tx_size);
}

/// xmit_sg's indirect tables: one per tx slot (SplitDriverQueue's layout).
uint64_t indirect_bytes(const VirtioNetConfig& cfg) noexcept {
    const uint16_t n = tx_max_pieces(cfg);
    return cfg.indirect_desc && n > 1 ? uint64_t{cfg.tx_size} * n * 16u : 0;
}

}  // namespace

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
    off += align_up(uint64_t{cfg.n_bufs} * cfg.buf_bytes, 4096);
    const uint16_t max_pieces = tx_max_pieces(cfg);

    ring::DriverQueueConfig rq;
    rq.addrs = d->rx_addrs_;
    rq.event_idx = cfg.event_idx;
    ring::DriverQueueConfig tq = rq;
    tq.addrs = d->tx_addrs_;
    tq.indirect = indirect_bytes(cfg) != 0;
    tq.indirect_max = max_pieces;
    tq.indirect_area = base + off;
    auto rx = ring::SplitDriverQueue::create(table, rq);
    auto tx = ring::SplitDriverQueue::create(table, tq);
    if (!rx || !tx) return unexpected(FrontendError::RingSetup);
    d->rx_ = std::move(*rx);
    d->tx_ = std::move(*tx);
    // Free-on-xmit: tx completions are reaped on the next transmit, so the
    // tx interrupt stays off (virtio_net without napi_tx). Napi leaves it on.
    if (cfg.tx_mode == TxMode::FreeOnXmit) d->tx_->disable_cb();
    d->clean_tx_at_rx_ = cfg.clean_tx_at_rx && cfg.tx_mode == TxMode::Napi;
    // check_sq_full_and_disable keeps room for the largest chain: one
    // descriptor when it goes indirect.
    d->tx_max_descs_ = tq.indirect ? 1 : max_pieces;
    d->tx_wake_descs_ = cfg.tx_wake_descs == 0 ? d->tx_max_descs_
                                                : std::min(cfg.tx_wake_descs, cfg.tx_size);

    d->pool_.resize(cfg.n_bufs);
    d->tx_recs_.resize(cfg.n_bufs);
    d->rx_pieces_.resize(cfg.mergeable_rx ? cfg.rx_size : 1u);
    d->tx_sg_bufs_.resize(max_pieces);
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

std::size_t QueuePair::collect_mergeable(uint64_t& len) noexcept {
    // VALIDATED: the first buffer holds more than the header (receive checked
    // its used len); num_buffers is read once, into a local.
    uint16_t le = 0;
    std::memcpy(&le, rx_pieces_[0].host + offsetof(virtio::virtio_net_hdr, num_buffers), sizeof le);
    const uint16_t num = virtio::le_to_host(le);
    // Rule (5.1.6.4.2): num_buffers is at least 1, and the device uses all of
    // a packet's buffers together — no more than the ring holds, all there now.
    const bool sane = num != 0 && num <= rx_pieces_.size();
    std::size_t n = 1;
    ring::UsedBuf u;
    while (sane && n < num && rx_->get_used(u)) {
        const auto id = static_cast<uint32_t>(u.token);
        rx_pieces_[n++] = RxPiece{id, buf_host(id), u.len};
        len += u.len;
    }
    if (!sane || n < num) {
        // Linux: "rx error: %d buffers missing" (rx_length_errors).
        stats_.rx_length_errors.add();
        for (std::size_t k = 0; k < n; ++k) free_buf(rx_pieces_[k].buf_id);
        return 0;
    }
    if (n > 1) stats_.rx_merged_pkts.add();
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
    const uint64_t per_pair = QueuePair::area_bytes(cfg);
    d->pairs_.reserve(cfg.queue_pairs);
    for (uint16_t i = 0; i < cfg.queue_pairs; ++i) {
        auto qp = QueuePair::create(table, base + i * per_pair, per_pair, cfg, fds[i]);
        if (!qp) return unexpected(qp.error());
        d->pairs_.push_back(std::move(*qp));
    }
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

}  // namespace pvnet::frontend
