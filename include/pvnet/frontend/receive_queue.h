// ReceiveQueue: one rx virtqueue of the guest's virtio-net (Linux
// drivers/net/virtio_net.c struct receive_queue): keeps the ring filled
// from the pair's BufferPool (try_fill_recv), reaps it in a NAPI poll with a
// budget (virtnet_poll / virtnet_receive) and re-arms interrupts race-free
// (napi_complete); busy_poll_rx spins before the caller sleeps
// (net.core.busy_poll).
//
// Large frames: with mergeable_rx (VIRTIO_NET_F_MRG_RXBUF, VIRTIO 1.2
// 5.1.6.4) a received packet spans num_buffers slots and poll_rx_packets
// hands it over as a list of pieces (Linux receive_mergeable).
//
// With clean_tx_at_rx the poll first reaps the pair's SendQueue
// (virtnet_poll_cleantx).
//
// With hash_report (VIRTIO_NET_F_HASH_REPORT) the header is struct
// virtio_net_hdr_v1_hash; the hash and its type are read once from it,
// checked (virtio_net_hash_value / hash_report in Linux's receive_buf) and
// handed over with the packet's first piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pvnet/frontend/buffer_pool.h"
#include "pvnet/frontend/config.h"
#include "pvnet/frontend/send_queue.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/util/clock.h"
#include "pvnet/util/cpu.h"

namespace pvnet::frontend {

/// One buffer of a received packet; the first starts with the virtio_net_hdr
/// (hdr_bytes() of it).
struct RxPiece {
    uint32_t buf_id = 0;
    std::byte* host = nullptr;
    uint32_t len = 0;  ///< bytes the device wrote (checked against the buffer)
    /// The first piece, with hash_report: the device's hash of the packet
    /// (0 unless hash_report is set) and its VIRTIO_NET_HASH_REPORT_* type,
    /// validated (an unknown type reads as NONE, counted). NONE otherwise.
    uint32_t hash_value = 0;
    uint16_t hash_report = virtio::VIRTIO_NET_HASH_REPORT_NONE;
};

class ReceiveQueue {
public:
    /// The queue on the rx ring `vq` at `addrs`, posting buffers of `pool`,
    /// counting into `stats`; `clean_tx` (or null) is the send queue each
    /// poll reaps first. All outlive it.
    ReceiveQueue(const VirtioNetConfig& cfg, const ring::SplitRingAddrs& addrs,
                 std::unique_ptr<ring::SplitDriverQueue> vq, notify::QueueFds fds,
                 BufferPool& pool, VirtioNetStats& stats, SendQueue* clean_tx) noexcept;
    ReceiveQueue(const ReceiveQueue&) = delete;
    ReceiveQueue& operator=(const ReceiveQueue&) = delete;

    const ring::SplitRingAddrs& addrs() const noexcept { return addrs_; }

    /// Posts free buffers until the rx ring is full; kicks if the device wants.
    uint32_t try_fill_recv() noexcept;

    /// NAPI rx poll: reaps up to `budget` packets, calling
    /// `deliver(buf_id, frame_with_hdr, len)` for each; deliver returns true
    /// if it kept the buffer (it must later xmit or free it).
    /// With mergeable_rx a packet in several buffers cannot be delivered
    /// this way: it is dropped (rx_drop_multi_buf); use poll_rx_packets.
    template <typename Deliver>
    uint32_t poll_rx(uint32_t budget, Deliver&& deliver) noexcept;
    /// poll_rx for packets of one or more buffers (mergeable_rx):
    /// `deliver(std::span<const RxPiece>)` gets the pieces in order and
    /// returns true if it kept all of them (each later xmit or freed),
    /// false to give them all back.
    template <typename Deliver>
    uint32_t poll_rx_packets(uint32_t budget, Deliver&& deliver) noexcept;

    /// net.core.busy_poll: spins on the rx ring for up to `usecs`, delivering
    /// up to `budget` packets as poll_rx does. Returns at the first non-empty
    /// reap (a hit) or 0 when the time is up (a miss). Leaves rx interrupts
    /// off: the caller re-arms with napi_complete() before sleeping.
    template <typename Deliver>
    uint32_t busy_poll_rx(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept;
    /// busy_poll_rx with the configured busy_poll_usecs.
    template <typename Deliver>
    uint32_t busy_poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
        return busy_poll_rx(budget, deliver, busy_poll_usecs_);
    }
    /// busy_poll_rx delivering as poll_rx_packets does.
    template <typename Deliver>
    uint32_t busy_poll_rx_packets(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept {
        return busy_poll(budget, deliver, usecs);
    }

    /// napi_complete: re-arm rx interrupts. False if packets are already
    /// pending (poll again instead of sleeping).
    bool napi_complete() noexcept { return vq_->enable_cb(); }
    /// Sleeps on the rx interrupt for at most `timeout_us`.
    void wait_rx(int64_t timeout_us) noexcept;
    void disable_cb() noexcept { vq_->disable_cb(); }

    const ring::SplitDriverQueue& vq() const noexcept { return *vq_; }

private:
    /// The rx reap shared by the poll functions; `sink` takes a packet's pieces.
    template <typename Sink>
    uint32_t receive(uint32_t budget, Sink& sink) noexcept;
    /// A packet sink for the single-buffer `deliver(buf_id, host, len)`.
    template <typename Deliver>
    auto single_buffer(Deliver& deliver) noexcept {
        return [this, &deliver](std::span<const RxPiece> p) noexcept {
            if (p.size() != 1) {
                stats_.rx_drop_multi_buf.add();
                return false;
            }
            return static_cast<bool>(deliver(p[0].buf_id, p[0].host, p[0].len));
        };
    }
    /// The busy-poll loop shared by busy_poll_rx and busy_poll_rx_packets.
    template <typename Sink>
    uint32_t busy_poll(uint32_t budget, Sink& sink, uint32_t usecs) noexcept;
    /// The hash fields of a packet's first buffer (longer than the header),
    /// read once and checked, into `first`.
    void read_hash(RxPiece& first) noexcept;
    /// receive_mergeable: rx_pieces_[0] is a packet's first buffer; reads its
    /// num_buffers and reaps the rest. The piece count, or 0 if dropped
    /// (counted, buffers freed). Adds the bytes to `len`.
    std::size_t collect_mergeable(uint64_t& len) noexcept;

    ring::SplitRingAddrs addrs_;
    std::unique_ptr<ring::SplitDriverQueue> vq_;
    notify::QueueFds fds_;
    BufferPool& pool_;
    VirtioNetStats& stats_;
    SendQueue* clean_tx_;  ///< virtnet_poll_cleantx's send queue, or null
    bool mergeable_rx_;
    bool hash_report_;
    uint32_t hdr_bytes_;  ///< VirtioNetConfig::hdr_bytes()
    uint32_t busy_poll_usecs_;
    std::vector<RxPiece> rx_pieces_;  ///< one packet's buffers: rx_size (mergeable) or 1
};

template <typename Sink>
uint32_t ReceiveQueue::receive(uint32_t budget, Sink& sink) noexcept {
    uint32_t done = 0;
    uint64_t bytes = 0;
    ring::UsedBuf u;
    RxPiece* const pieces = rx_pieces_.data();
    while (done < budget && vq_->get_used(u)) {
        const auto id = static_cast<uint32_t>(u.token);
        ++done;
        // Rule (virtio_net receive_buf): shorter than the header is a defect.
        if (u.len <= hdr_bytes_) {
            stats_.rx_drop_bad_len.add();
            pool_.free(id);
            continue;
        }
        pieces[0] = RxPiece{id, pool_.host(id), u.len};
        if (hash_report_) read_hash(pieces[0]);
        std::size_t n = 1;
        uint64_t len = u.len;
        if (mergeable_rx_) {
            n = collect_mergeable(len);
            if (n == 0) continue;
        }
        bytes += len;
        if (!sink(std::span<const RxPiece>(pieces, n))) {
            for (std::size_t k = 0; k < n; ++k) pool_.free(pieces[k].buf_id);
        }
    }
    stats_.rx_pkts.add(done);
    stats_.rx_bytes.add(bytes);
    return done;
}

template <typename Deliver>
uint32_t ReceiveQueue::poll_rx_packets(uint32_t budget, Deliver&& deliver) noexcept {
    stats_.napi_polls.add();
    vq_->disable_cb();
    if (clean_tx_ != nullptr) clean_tx_->poll_cleantx();
    const uint32_t done = receive(budget, deliver);
    if (done == budget) stats_.napi_budget_exhausted.add();
    return done;
}

template <typename Deliver>
uint32_t ReceiveQueue::poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
    auto single = single_buffer(deliver);
    return poll_rx_packets(budget, single);
}

template <typename Deliver>
uint32_t ReceiveQueue::busy_poll_rx(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept {
    auto single = single_buffer(deliver);
    return busy_poll(budget, single, usecs);
}

template <typename Sink>
uint32_t ReceiveQueue::busy_poll(uint32_t budget, Sink& sink, uint32_t usecs) noexcept {
    // Without a spin budget this is a plain NAPI poll: nothing to count as
    // a busy-poll hit or miss.
    if (usecs == 0) return poll_rx_packets(budget, sink);
    vq_->disable_cb();
    if (clean_tx_ != nullptr) clean_tx_->poll_cleantx();
    // One clock read per empty look: a vDSO call, cheap beside the spin.
    const uint64_t deadline = now_ns() + uint64_t{usecs} * 1000u;
    for (;;) {
        const uint32_t done = receive(budget, sink);
        if (done != 0) {
            stats_.busy_poll_hits.add();
            return done;
        }
        if (vq_->broken() || now_ns() >= deadline) break;
        cpu_relax();
    }
    stats_.busy_poll_misses.add();
    return 0;
}

}  // namespace pvnet::frontend
