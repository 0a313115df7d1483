// PeerPort (see peer_port.h): the validated hand-over of a frame from one
// device's handle_tx to the other's handle_rx through an SPSC byte ring.
//
// Record: a uint32 length (hdr + frame bytes) in an 8-byte word, then the
// bytes, padded to 8. A record never wraps: when it does not fit before the
// arena's end, a kWrapMark word sends the reader back to offset 0. head_
// and tail_ are free-running byte counts (64-bit: they never wrap).
#include "pvnet/port/peer_port.h"

#include <cstring>
#include <new>

#include "pvnet/ring/barrier.h"
#include "pvnet/util/iov.h"

namespace pvnet::port {

namespace {

constexpr uint32_t kWrapMark = 0xffffffff;

bool valid_arena_bytes(uint32_t n) noexcept {
    return n >= PeerPort::kMinArenaBytes && n <= PeerPort::kMaxArenaBytes && (n & (n - 1)) == 0;
}

}  // namespace

Result<PeerPort::Pair, PortError> PeerPort::create_pair(const PeerPortConfig& a,
                                                        const PeerPortConfig& b) noexcept {
    if (!valid_arena_bytes(a.arena_bytes) || !valid_arena_bytes(b.arena_bytes)) {
        return unexpected(PortError::BadArenaSize);
    }
    auto ev_a = notify::EventFd::create();
    auto ev_b = notify::EventFd::create();
    if (!ev_a || !ev_b) return unexpected(PortError::SystemError);
    auto pa = make_end(a, std::move(*ev_a));
    auto pb = make_end(b, std::move(*ev_b));
    if (!pa || !pb) return unexpected(PortError::SystemError);
    pa->peer_ = pb.get();
    pb->peer_ = pa.get();
    return Pair(std::move(pa), std::move(pb));
}

std::unique_ptr<PeerPort> PeerPort::make_end(const PeerPortConfig& cfg,
                                             notify::EventFd ev) noexcept {
    // Zeroed once here, so the pages are touched at setup, not per packet.
    std::unique_ptr<std::byte[]> arena(new (std::nothrow) std::byte[cfg.arena_bytes]());
    if (!arena) return nullptr;
    return std::unique_ptr<PeerPort>(new (std::nothrow) PeerPort(std::move(ev), std::move(arena),
                                                                 cfg.arena_bytes, cfg.tx_offloads));
}

PeerPort::PeerPort(notify::EventFd ev, std::unique_ptr<std::byte[]> arena, uint32_t arena_bytes,
                   const net::Offloads& tx_offloads) noexcept
    : rx_event_(std::move(ev)),
      arena_(std::move(arena)),
      mask_(arena_bytes - 1),
      tx_offloads_(tx_offloads) {}

SendResult PeerPort::drop(Counter& why) noexcept {
    why.add();
    stats.tx_pkts.add();
    return SendResult::Dropped;
}

SendResult PeerPort::send(std::span<const iovec> src, uint32_t len) noexcept {
    // Read the header once, into a local; only the copy is checked and used.
    // A packet that comes again after a Retry is checked again, on a new copy.
    virtio::virtio_net_hdr hdr;
    if (len < kHdrBytes || iov_bytes(src) < len ||
        !copy_from_iov(src, 0, std::as_writable_bytes(std::span(&hdr, 1)))) {
        return drop(stats.tx_drop_short);
    }
    const uint32_t frame_bytes = len - kHdrBytes;
    if (frame_bytes > kMaxFrameBytes) return drop(stats.tx_drop_oversize);
    const auto checked = net::validate_tx_hdr(hdr, frame_bytes, tx_offloads_);
    if (!checked) {
        stats.tx_drop_bad_hdr.add(checked.error());
        stats.tx_pkts.add();
        return SendResult::Dropped;
    }

    PeerPort& in = *peer_;  // we are the only producer of the peer's queue
    const uint64_t cap = uint64_t{in.mask_} + 1;
    const uint32_t need = record_bytes(len);
    uint64_t tail = in.tail_.load(std::memory_order_relaxed);  // our own word
    const uint64_t to_end = cap - (tail & in.mask_);
    const uint64_t pad = need > to_end ? to_end : 0;
    if (tail + pad + need - in.head_seen_ > cap) {
        // ORDER: acquire pairs with recv()'s release of head_: the reader is
        // done with every byte before head_, so they may be overwritten.
        in.head_seen_ = in.head_.load(std::memory_order_acquire);
        if (tail + pad + need - in.head_seen_ > cap) {
            // Room comes back as the peer reads: a record of the largest frame
            // plus the worst wrap pad (less than one record) fits an empty arena.
            static_assert(2 * record_bytes(kHdrBytes + kMaxFrameBytes) <= kMinArenaBytes);
            stats.tx_retry_queue_full.add();
            return SendResult::Retry;
        }
    }
    if (pad != 0) {
        std::memcpy(in.arena_.get() + (tail & in.mask_), &kWrapMark, sizeof kWrapMark);
        tail += pad;
    }
    std::byte* rec = in.arena_.get() + (tail & in.mask_);
    std::memcpy(rec, &len, sizeof len);
    std::memcpy(rec + kRecordAlign, &checked.value(), kHdrBytes);
    // The frame is copied once from guest memory; nothing in it was used to
    // size or address this copy (len came from the ring layer's chain).
    (void)copy_from_iov(src, kHdrBytes,
                        std::span<std::byte>(rec + kRecordAlign + kHdrBytes, frame_bytes));
    // ORDER: release pairs with rx_pending()/recv()'s acquire of tail_: the
    // record (and any wrap mark) is written before it becomes visible.
    in.tail_.store(tail + need, std::memory_order_release);
    stats.tx_pkts.add();
    stats.tx_bytes.add(len);
    // ORDER: store tail_ -> load armed_; partner: rx_pending()'s full_fence
    // between its store of armed_ and its re-load of tail_. One of the two
    // sees the other's store, so the reader is never left asleep.
    ring::full_fence();
    if (in.armed_.load(std::memory_order_relaxed) &&
        in.armed_.exchange(false, std::memory_order_relaxed)) {
        in.rx_event_.signal();
    }
    return SendResult::Sent;
}

bool PeerPort::rx_pending() noexcept {
    const uint64_t head = head_.load(std::memory_order_relaxed);  // our own word
    if (tail_seen_ != head) return true;
    // ORDER: acquire pairs with send()'s release of tail_.
    tail_seen_ = tail_.load(std::memory_order_acquire);
    if (tail_seen_ != head) return true;
    if (!armed_.load(std::memory_order_relaxed)) {
        // Empty: clear stale wakeups, arm, then look again (a frame may have
        // come before the producer could see armed_).
        rx_event_.consume();
        armed_.store(true, std::memory_order_relaxed);
        // ORDER: store armed_ -> load tail_; partner: send()'s full_fence.
        ring::full_fence();
        tail_seen_ = tail_.load(std::memory_order_acquire);
    }
    return tail_seen_ != head;
}

/// The oldest record: its offset (`head`, past a wrap mark) and length;
/// false if the queue is empty. Consumer side only.
bool PeerPort::next_record(uint64_t& head, uint32_t& len) noexcept {
    head = head_.load(std::memory_order_relaxed);  // our own word
    if (tail_seen_ == head) {
        // ORDER: acquire pairs with send()'s release of tail_.
        tail_seen_ = tail_.load(std::memory_order_acquire);
        if (tail_seen_ == head) return false;
    }
    // Records are written by our own send() code and published by tail_, so
    // their length words are trusted: they were bounded before being written.
    std::memcpy(&len, arena_.get() + (head & mask_), sizeof len);
    if (len == kWrapMark) {
        head += uint64_t{mask_} + 1 - (head & mask_);
        std::memcpy(&len, arena_.get(), sizeof len);
    }
    return true;
}

uint32_t PeerPort::peek_len() noexcept {
    uint64_t head;
    uint32_t len;
    return next_record(head, len) ? len : 0;
}

uint32_t PeerPort::recv(std::span<const iovec> dst) noexcept {
    uint64_t head;
    uint32_t len;
    if (!next_record(head, len)) return 0;
    const std::byte* rec = arena_.get() + (head & mask_);
    const bool fits = copy_to_iov(dst, 0, std::span<const std::byte>(rec + kRecordAlign, len));
    // ORDER: release pairs with send()'s acquire of head_: our reads of the
    // record are done before the producer may reuse its bytes.
    head_.store(head + record_bytes(len), std::memory_order_release);
    if (!fits) {
        stats.rx_drop_no_room.add();
        return 0;
    }
    stats.rx_pkts.add();
    stats.rx_bytes.add(len);
    return len;
}

}  // namespace pvnet::port
