// GenLoopPort: the backend-side port of the PVP experiment. Its receive
// side is a FrameGen flood (a packet is always waiting: the traffic
// generator offers frames as fast as the backend takes them); its send side
// is a FrameSink that checks order, loss and payload of what the guest
// forwarded back. Frames cross the rings behind a zeroed virtio_net_hdr.
//
// Accounting: each recv() generates one frame (a seq), delivered or counted
// by the generator as a drop, so generated() = gen().stats().gen_pkts +
// gen_drop_no_room; each send() is checked by the sink and counted by its
// verdict (a valid frame, a duplicate, or a drop by reason: BadLen for a
// packet too short to hold a header). send() never says Retry.
//
// Port contract: include/pvnet/port/port.h (Port, HasPeekLen, HasMaxFrame).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstring>
#include <span>

#include "pvnet/port/gen_port.h"
#include "pvnet/port/port.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port {

class GenLoopPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    /// iovecs a frame may span after the header is skipped.
    static constexpr std::size_t kMaxPieces = 64;

    explicit GenLoopPort(const FrameFormat& fmt) noexcept : gen_(fmt), sink_(fmt) {}

    bool rx_pending() const noexcept { return !stopped_.load(std::memory_order_relaxed); }
    /// hdr + the next frame's bytes (all frames are one size).
    uint32_t peek_len() const noexcept { return kHdrBytes + gen_.frame_bytes(); }
    /// All frames are one size.
    uint32_t max_frame_bytes() const noexcept { return gen_.frame_bytes(); }

    /// Writes hdr + the next frame into `dst`; 0 if it does not fit.
    uint32_t recv(std::span<const iovec> dst) noexcept {
        if (!dst.empty() && dst[0].iov_len >= kHdrBytes + gen_.frame_bytes()) [[likely]] {
            auto* p = static_cast<std::byte*>(dst[0].iov_base);
            std::memset(p, 0, kHdrBytes);
            const uint32_t n = gen_.write_frame(seq_++, p + kHdrBytes,
                                                static_cast<uint32_t>(dst[0].iov_len - kHdrBytes));
            return n == 0 ? 0 : n + kHdrBytes;
        }
        // A frame that does not fit is still generated and counted as the
        // generator's drop, so the sink sees the gap: sent = delivered + drops.
        // No pieces to use (none, no room for the header, or more than
        // kMaxPieces needed) is an empty destination: no room either.
        std::array<iovec, kMaxPieces> rest;
        const std::size_t k = skip_hdr(dst, gen_.frame_bytes(), rest, /*zero=*/true);
        const uint32_t n = gen_.write_frame(seq_++, std::span<const iovec>(rest.data(), k));
        return n == 0 ? 0 : n + kHdrBytes;
    }

    /// Checks one forwarded packet (hdr + frame, `len` bytes): Sent if the
    /// sink found a valid frame, else Dropped (counted by the sink's verdict).
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        // Too short for a header, or no bytes at all: a wrong length.
        if (len < kHdrBytes || src.empty()) {
            return verdict(sink_.check_frame(std::span<const iovec>{}, 0));
        }
        SinkResult r;
        if (src[0].iov_len >= len) [[likely]] {
            r = sink_.check_frame(static_cast<const std::byte*>(src[0].iov_base) + kHdrBytes,
                                  len - kHdrBytes);
        } else {
            std::array<iovec, kMaxPieces> rest;
            const std::size_t k = skip_hdr(src, len - kHdrBytes, rest, /*zero=*/false);
            r = sink_.check_frame(std::span<const iovec>(rest.data(), k), len - kHdrBytes);
        }
        return verdict(r);
    }

    /// Ends the flood (from any thread); frames generated are [0, generated()),
    /// read by the worker's owner once the worker is quiet.
    void stop() noexcept { stopped_.store(true, std::memory_order_relaxed); }
    uint64_t generated() const noexcept { return seq_; }
    FrameGen& gen() noexcept { return gen_; }
    FrameSink& sink() noexcept { return sink_; }
    const FrameGen& gen() const noexcept { return gen_; }
    const FrameSink& sink() const noexcept { return sink_; }

private:
    static SendResult verdict(SinkResult r) noexcept {
        return is_valid(r) ? SendResult::Sent : SendResult::Dropped;
    }

    // Copies the first `need` bytes of `src` after its first kHdrBytes into
    // `out` (zeroing the header bytes when generating); returns the piece
    // count, 0 if it cannot. Pieces past `need` bytes are not looked at.
    static std::size_t skip_hdr(std::span<const iovec> src, std::size_t need,
                                std::array<iovec, kMaxPieces>& out, bool zero) noexcept {
        std::size_t skip = kHdrBytes;
        std::size_t k = 0;
        for (const iovec& v : src) {
            if (skip == 0 && need == 0) break;
            std::size_t off = 0;
            if (skip != 0) {
                off = skip < v.iov_len ? skip : v.iov_len;
                if (zero) std::memset(v.iov_base, 0, off);
                skip -= off;
                if (off == v.iov_len) continue;
            }
            if (need == 0) break;
            if (k == out.size()) return 0;
            const std::size_t n = v.iov_len - off < need ? v.iov_len - off : need;
            out[k++] = iovec{static_cast<std::byte*>(v.iov_base) + off, n};
            need -= n;
        }
        return skip == 0 ? k : 0;
    }

    FrameGen gen_;
    FrameSink sink_;
    uint64_t seq_ = 0;
    std::atomic<bool> stopped_{false};
};

static_assert(Port<GenLoopPort> && HasPeekLen<GenLoopPort> && HasMaxFrame<GenLoopPort>);

}  // namespace pvnet::port
