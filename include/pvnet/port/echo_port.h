// EchoPort: the server side of a request/response experiment behind the
// backend. Every frame the guest sends (handle_tx → send) is a request of
// some flow; the port queues a response frame of the same flow and sequence
// number, which handle_rx then delivers to the guest (recv). One
// outstanding request per flow in RR means the queue never holds more than
// the number of flows; it is bounded anyway, and a request whose response
// finds it full is not taken: send() says Retry, as a server that stops
// reading would push back, and the device offers it again once recv() has
// drained some.
//
// Accounting: every send() is a request taken (requests), a bad one
// dropped (drop_bad_request) or a Retry (retry_queue_full, nothing else
// counted). requests = responses + drop_no_room + unanswered + pending() +
// drop_session_end.
//
// Port contract: include/pvnet/port/port.h (Port, HasPeekLen, HasMaxFrame).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "pvnet/port/gen_port.h"
#include "pvnet/port/port.h"
#include "pvnet/util/counters.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port {

class EchoPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    static constexpr std::size_t kMaxPending = 4096;

    /// Responses are `frame_bytes` long; flows 0..flows-1. With
    /// `answer_every` k > 1 only every k-th request of a flow is answered
    /// (a stream's delayed ACKs: k = 2), the rest are consumed silently.
    static Result<std::unique_ptr<EchoPort>, PortError> create(uint32_t frame_bytes, uint16_t flows,
                                                               uint32_t answer_every = 1) {
        if (answer_every == 0) return unexpected(PortError::BadFrameSize);
        std::unique_ptr<EchoPort> p(new EchoPort());
        p->answer_every_ = answer_every;
        p->frame_bytes_ = frame_bytes;
        p->seen_.assign(flows, 0);
        p->gens_.reserve(flows);
        for (uint16_t f = 0; f < flows; ++f) {
            auto fmt = FrameFormat::create(frame_bytes, f);
            if (!fmt) return unexpected(fmt.error());
            p->gens_.push_back(std::make_unique<FrameGen>(*fmt));
        }
        p->queue_.resize(kMaxPending);
        return p;
    }

    /// Work per request, spent spinning in send(): the cost a host stack
    /// pays to receive a frame (a 1514-byte TCP segment through tun, the
    /// stack and the copy to the reader is on the order of 0.3-1 us). 0: none.
    void set_work_ns(uint32_t ns) noexcept { work_ns_ = ns; }

    bool rx_pending() const noexcept { return head_ != tail_; }
    /// hdr + the oldest queued response's bytes; 0 if none is queued.
    uint32_t peek_len() const noexcept {
        if (head_ == tail_) return 0;
        return kHdrBytes + gens_[queue_[head_ % kMaxPending].flow]->frame_bytes();
    }

    /// Every response is one frame of this size.
    uint32_t max_frame_bytes() const noexcept { return frame_bytes_; }
    /// Responses queued, not yet received.
    uint64_t pending() const noexcept { return tail_ - head_; }

    /// Delivers the oldest queued response (hdr + frame); 0 if none, or if it
    /// does not fit dst's first piece (then consumed and counted, drop_no_room).
    uint32_t recv(std::span<const iovec> dst) noexcept {
        if (head_ == tail_) return 0;
        const Pending r = queue_[head_ % kMaxPending];
        ++head_;
        if (dst.empty() || dst[0].iov_len < kHdrBytes) {
            drop_no_room.add();
            return 0;
        }
        auto* p = static_cast<std::byte*>(dst[0].iov_base);
        std::memset(p, 0, kHdrBytes);
        const uint32_t n = gens_[r.flow]->write_frame(
            r.seq, p + kHdrBytes, static_cast<uint32_t>(dst[0].iov_len - kHdrBytes));
        if (n == 0) {
            drop_no_room.add();
            return 0;
        }
        responses.add();
        return n + kHdrBytes;
    }

    /// HasSession: responses still queued at a session's end are dropped
    /// (drop_session_end) and each flow's count starts again.
    void session_start() noexcept {}
    void session_end() noexcept {
        drop_session_end.add(tail_ - head_);
        head_ = tail_;
        std::fill(seen_.begin(), seen_.end(), 0);
    }

    /// Takes a request (hdr + frame, in src's first piece) and queues its
    /// response: Sent; Dropped (drop_bad_request); Retry when the response
    /// queue is full (retry_queue_full, and nothing else done or counted).
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        if (src.empty() || src[0].iov_len < len || len < kHdrBytes + kSeqOffset + 8) {
            drop_bad_request.add();
            return SendResult::Dropped;
        }
        const auto* frame = static_cast<const std::byte*>(src[0].iov_base) + kHdrBytes;
        // UDP source port at 34 (after Ethernet 14 + IPv4 20), big-endian.
        const auto flow = static_cast<uint16_t>(
            ((std::to_integer<unsigned>(frame[34]) << 8) | std::to_integer<unsigned>(frame[35])) -
            kUdpSrcPortBase);
        uint64_t seq_be;
        std::memcpy(&seq_be, frame + kSeqOffset, sizeof seq_be);
        if (flow >= gens_.size()) {
            drop_bad_request.add();
            return SendResult::Dropped;
        }
        const bool answer = (seen_[flow] + 1) % answer_every_ == 0;
        if (answer && tail_ - head_ == kMaxPending) {
            retry_queue_full.add();
            return SendResult::Retry;
        }
        requests.add();
        if (work_ns_ != 0) spin(work_ns_);
        ++seen_[flow];
        if (!answer) {
            unanswered.add();
            return SendResult::Sent;
        }
        queue_[tail_ % kMaxPending] = Pending{flow, __builtin_bswap64(seq_be)};
        ++tail_;
        return SendResult::Sent;
    }

    Counter requests;          ///< requests taken
    Counter responses;         ///< responses delivered by recv()
    Counter drop_bad_request;  ///< too short, not in one piece, or of no known flow
    Counter retry_queue_full;  ///< send() found the response queue full: Retry
    Counter drop_no_room;      ///< a response did not fit recv()'s first piece
    Counter unanswered;        ///< requests answer_every left without a response
    Counter drop_session_end;  ///< responses still queued when the session ended

private:
    EchoPort() = default;
    static void spin(uint32_t ns) noexcept {
        using clock = std::chrono::steady_clock;
        const auto until = clock::now() + std::chrono::nanoseconds(ns);
        while (clock::now() < until) {
        }
    }

    struct Pending {
        uint16_t flow;
        uint64_t seq;
    };
    std::vector<std::unique_ptr<FrameGen>> gens_;  ///< one per flow, made at setup
    std::vector<Pending> queue_;                   ///< ring of kMaxPending, sized once
    std::vector<uint64_t> seen_;                   ///< requests per flow
    uint32_t answer_every_ = 1;
    uint32_t frame_bytes_ = 0;
    uint32_t work_ns_ = 0;
    uint64_t head_ = 0, tail_ = 0;
};

static_assert(Port<EchoPort> && HasPeekLen<EchoPort> && HasMaxFrame<EchoPort> &&
              HasSession<EchoPort>);

}  // namespace pvnet::port
