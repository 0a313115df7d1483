// PeerPort: one end of a two-port switch joining two devices with no kernel
// in between (DESIGN.md layer 6). What one end's send() takes (hdr + frame,
// from a VhostNet's handle_tx) is queued for the other end's recv() (into a
// VhostNet's handle_rx). With no tun to check the virtio_net_hdr (seed 002),
// send() validates it with the kernel's rules (net::validate_tx_hdr); a bad
// header is a counted drop, per reason, and is never forwarded.
//
// Each end owns its inbound queue: a single-producer (the peer's send) /
// single-consumer (own recv) ring of variable records in a byte arena
// preallocated at create_pair(), so a 64 KiB GSO frame and a 64-byte one
// both fit without per-packet allocation. A full queue is back-pressure:
// send() says Retry (the device offers the packet again once the peer's
// recv() has made room), never a drop; any frame that passes the checks fits
// an empty queue, so room always comes once the peer drains it.
// An eventfd per end (rx_fd(), for the worker's epoll in event mode) is
// signalled when the queue gains a frame after its reader found it empty.
//
// Accounting, per direction: every packet taken by one end's send() is
// dropped there (tx_drops()) or queued; every queued frame is delivered by
// the other end's recv() (rx_pkts) or dropped there (rx_drop_no_room), so
// once the queue is empty a.tx_pkts = a.tx_drops() + b.rx_pkts + b.rx_drop_no_room.
//
// Port contract: include/pvnet/port/port.h (Port, HasRxFd, HasPeekLen).
// send() runs on one thread, rx_pending()/peek_len()/recv() on one (maybe
// other) thread per end; counters may be read from any.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "pvnet/net/vnet_hdr.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/port/port.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port {

struct PeerPortConfig {
    /// Bytes of this end's inbound queue: a power of two, at least
    /// PeerPort::kMinArenaBytes (two largest frames).
    uint32_t arena_bytes = 4u << 20;
    /// What frames sent from this end may use: the intersection of the
    /// sending driver's HOST_* and the receiving driver's GUEST_* offloads.
    net::Offloads tx_offloads;
};

struct PeerPortStats {
    /// Packets taken: queued for the peer, or dropped (counted by reason). A
    /// Retry is not counted here: the same packet comes again.
    Counter tx_pkts;
    Counter tx_bytes;          ///< hdr + frame bytes queued for the peer
    Counter tx_drop_short;     ///< len shorter than the header, or iovecs short of len
    Counter tx_drop_oversize;  ///< frame longer than kMaxFrameBytes
    CounterArray<net::HdrError> tx_drop_bad_hdr;  ///< per rule broken
    Counter tx_retry_queue_full;  ///< send() found the peer's queue full: Retry, not a drop
    Counter rx_pkts;              ///< frames handed to recv()'s buffers
    Counter rx_bytes;             ///< hdr + frame bytes of those
    Counter rx_drop_no_room;      ///< recv()'s buffers shorter than the frame

    /// Packets taken and rejected for good.
    uint64_t tx_drops() const noexcept {
        return tx_drop_short.get() + tx_drop_oversize.get() + tx_drop_bad_hdr.total();
    }
};

class PeerPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    /// A 64 KiB GSO frame: the largest IP total length plus Ethernet and one VLAN tag.
    static constexpr uint32_t kMaxFrameBytes = 0xffff + 14 + 4;
    /// Each queued frame: an 8-byte length word, then hdr + frame, 8-aligned.
    static constexpr uint32_t kRecordAlign = 8;
    static constexpr uint32_t kMinArenaBytes = 256u << 10;
    static constexpr uint32_t kMaxArenaBytes = 1u << 30;

    using Pair = std::pair<std::unique_ptr<PeerPort>, std::unique_ptr<PeerPort>>;
    /// Two connected ends: `a` configures the first, `b` the second.
    static Result<Pair, PortError> create_pair(const PeerPortConfig& a,
                                               const PeerPortConfig& b) noexcept;

    PeerPort(const PeerPort&) = delete;
    PeerPort& operator=(const PeerPort&) = delete;

    /// A frame waits in this end's queue. When it finds the queue empty it
    /// arms rx_fd() so the peer's next send wakes this end's worker.
    bool rx_pending() noexcept;
    /// hdr + frame bytes of the oldest frame (what recv() will need), 0 if none waits.
    uint32_t peek_len() noexcept;
    /// Delivers the oldest frame (validated hdr + frame) into `dst`; returns
    /// its length, 0 if none waits or it does not fit (then dropped, counted).
    uint32_t recv(std::span<const iovec> dst) noexcept;
    /// Validates hdr + frame (`len` bytes over `src`) and queues it for the
    /// peer: Sent; Dropped (counted by reason); Retry if the peer's queue is
    /// full (tx_retry_queue_full; nothing counted in tx_pkts).
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept;
    /// Readable when a frame arrived after rx_pending() found the queue empty.
    int rx_fd() const noexcept { return rx_event_.fd(); }

    PeerPortStats stats;

private:
    PeerPort(notify::EventFd ev, std::unique_ptr<std::byte[]> arena, uint32_t arena_bytes,
             const net::Offloads& tx_offloads) noexcept;
    static std::unique_ptr<PeerPort> make_end(const PeerPortConfig& cfg,
                                              notify::EventFd ev) noexcept;
    static constexpr uint32_t record_bytes(uint32_t len) noexcept {
        return kRecordAlign + ((len + kRecordAlign - 1) & ~(kRecordAlign - 1));
    }
    SendResult drop(Counter& why) noexcept;
    bool next_record(uint64_t& head, uint32_t& len) noexcept;

    // Inbound queue. tail_ is written by the peer's send(), head_ by our
    // recv(); each side keeps a private copy of the other's word and
    // re-reads it only when the copy says empty/full.
    alignas(64) std::atomic<uint64_t> tail_{0};
    uint64_t head_seen_ = 0;  ///< producer's copy of head_
    alignas(64) std::atomic<uint64_t> head_{0};
    uint64_t tail_seen_ = 0;  ///< consumer's copy of tail_
    /// Set by the consumer when it found the queue empty; the producer that
    /// clears it signals rx_event_.
    alignas(64) std::atomic<bool> armed_{false};
    notify::EventFd rx_event_;
    std::unique_ptr<std::byte[]> arena_;
    uint32_t mask_;
    net::Offloads tx_offloads_;  ///< checked on our send()
    PeerPort* peer_ = nullptr;
};

static_assert(Port<PeerPort> && HasRxFd<PeerPort> && HasPeekLen<PeerPort>);

}  // namespace pvnet::port
