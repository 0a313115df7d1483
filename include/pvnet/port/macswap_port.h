// MacswapPort: testpmd's macswap forwarding behind a vhost-user socket.
// Every frame the guest sends (handle_tx → send) comes back to it (recv →
// handle_rx) with its destination and source MAC addresses swapped and a
// zeroed virtio_net_hdr (the device offers no offloads with this port, so
// nothing the guest wrote in its header is handed back).
//
// Accounting: every send() is taken (tx_pkts: queued, or dropped with a
// reason) or a Retry (queue full, queue().stats.retry_full); every queued
// frame is delivered (queue().stats.rx_pkts), dropped at recv()
// (rx_drop_no_room) or at the session's end (drop_session_end). Port contract: include/pvnet/port/port.h.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>

#include "pvnet/port/port.h"
#include "pvnet/port/reply_queue.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port {

class MacswapPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    static constexpr uint32_t kEthHdrBytes = 14;
    static constexpr uint32_t kDefaultSlots = 256;

    /// Frames up to `max_frame_bytes` (no virtio header); `slots` queued at most.
    static Result<std::unique_ptr<MacswapPort>, PortError> create(
        uint32_t max_frame_bytes, uint32_t slots = kDefaultSlots,
        ReplyQueue::Publish publish = ReplyQueue::Publish::EachFrame) noexcept;

    bool rx_pending() noexcept { return q_->pending(); }
    uint32_t peek_len() noexcept { return q_->peek_len(); }
    uint32_t recv(std::span<const iovec> dst) noexcept { return q_->pop(dst); }
    /// Queues the frame MAC-swapped: Sent; Dropped (counted); Retry when full.
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept;
    /// HasTxFlush: publishes the burst's frames (ReplyQueue::Publish::PerBurst).
    void flush_tx() noexcept { q_->publish(); }
    int rx_fd() const noexcept { return q_->rx_fd(); }
    uint32_t max_frame_bytes() const noexcept { return max_frame_; }
    /// HasSession: replies still queued at a session's end are the departed
    /// guest's; they are dropped (queue().stats.drop_session_end), never
    /// handed to the next one.
    void session_start() noexcept {}
    void session_end() noexcept { (void)q_->drain(); }

    const ReplyQueue& queue() const noexcept { return *q_; }

    Counter tx_pkts;           ///< packets taken: queued or dropped (not Retry)
    Counter tx_drop_short;     ///< shorter than hdr + Ethernet header, or iovecs short of len
    Counter tx_drop_oversize;  ///< frame longer than max_frame_bytes()

private:
    explicit MacswapPort(std::unique_ptr<ReplyQueue> q, uint32_t max_frame) noexcept
        : q_(std::move(q)), max_frame_(max_frame) {}
    std::unique_ptr<ReplyQueue> q_;
    uint32_t max_frame_;
};

static_assert(Port<MacswapPort> && HasRxFd<MacswapPort> && HasPeekLen<MacswapPort> &&
              HasMaxFrame<MacswapPort> && HasSession<MacswapPort> && HasTxFlush<MacswapPort>);

}  // namespace pvnet::port
