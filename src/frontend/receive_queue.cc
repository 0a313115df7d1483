// ReceiveQueue (receive_queue.h): the rx refill, mergeable reassembly and
// the rx interrupt wait; the polls are templates in the header.
#include "pvnet/frontend/receive_queue.h"

#include <cstddef>
#include <cstring>
#include <utility>

#include "pvnet/virtio/virtio_net.h"

namespace pvnet::frontend {

ReceiveQueue::ReceiveQueue(const VirtioNetConfig& cfg, const ring::SplitRingAddrs& addrs,
                           std::unique_ptr<ring::SplitDriverQueue> vq, notify::QueueFds fds,
                           BufferPool& pool, VirtioNetStats& stats, SendQueue* clean_tx) noexcept
    : addrs_(addrs),
      vq_(std::move(vq)),
      fds_(fds),
      pool_(pool),
      stats_(stats),
      clean_tx_(clean_tx),
      mergeable_rx_(cfg.mergeable_rx),
      hash_report_(cfg.hash_report),
      hdr_bytes_(cfg.hdr_bytes()),
      busy_poll_usecs_(cfg.busy_poll_usecs),
      rx_pieces_(cfg.mergeable_rx ? cfg.rx_size : 1u) {}

uint32_t ReceiveQueue::try_fill_recv() noexcept {
    uint32_t added = 0;
    uint32_t id = 0;
    while (vq_->num_free() > 0) {
        if (!pool_.alloc(id)) {
            stats_.refill_empty_pool.add();
            break;
        }
        const ring::Buf b{pool_.gpa(id), pool_.buf_bytes()};
        if (vq_->add({}, std::span<const ring::Buf>(&b, 1), id) != ring::AddStatus::Ok) {
            pool_.free(id);
            break;
        }
        ++added;
    }
    if (added != 0 && vq_->kick_prepare()) {
        fds_.kick->signal();
        stats_.rx_kicks.add();
    }
    return added;
}

void ReceiveQueue::read_hash(RxPiece& first) noexcept {
    // VALIDATED: the buffer holds more than the header (receive checked its
    // used len); the fields are read once, into a local, and checked there.
    virtio::virtio_net_hdr_v1_hash h{};
    std::memcpy(&h, first.host, sizeof h);
    const uint16_t report = h.hash_report.get();
    // Rule ("Hash reporting for incoming packets"): the device reports one
    // of the VIRTIO_NET_HASH_REPORT_* values; anything else is not trusted.
    if (report > virtio::VIRTIO_NET_HASH_REPORT_UDPv6_EX) {
        stats_.rx_hash_report_unknown.add();
        return;
    }
    first.hash_report = report;
    if (report != virtio::VIRTIO_NET_HASH_REPORT_NONE) first.hash_value = h.hash_value.get();
}

std::size_t ReceiveQueue::collect_mergeable(uint64_t& len) noexcept {
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
    while (sane && n < num && vq_->get_used(u)) {
        const auto id = static_cast<uint32_t>(u.token);
        rx_pieces_[n++] = RxPiece{id, pool_.host(id), u.len};
        len += u.len;
    }
    if (!sane || n < num) {
        // Linux: "rx error: %d buffers missing" (rx_length_errors).
        stats_.rx_length_errors.add();
        for (std::size_t k = 0; k < n; ++k) pool_.free(rx_pieces_[k].buf_id);
        return 0;
    }
    if (n > 1) stats_.rx_merged_pkts.add();
    return n;
}

void ReceiveQueue::wait_rx(int64_t timeout_us) noexcept {
    if (fds_.call->wait(timeout_us)) {
        fds_.call->consume();
        stats_.rx_interrupts.add();
    } else {
        stats_.wait_timeouts.add();
    }
}

}  // namespace pvnet::frontend
