// TapPort: a Linux TAP device as a backend port (DESIGN.md layer 6), the way
// vhost-net and QEMU's tap backend use one: IFF_TAP|IFF_NO_PI|IFF_VNET_HDR,
// a 12-byte virtio_net_hdr (TUNSETVNETHDRSZ) in front of every frame in
// both directions, and TUNSETOFFLOAD from the offloads the guest accepts, so
// GSO frames and partial checksums pass through untouched.
//
// The header is not validated here: tun checks it on write (seed 002,
// "vhost_net: remove virtio_net_hdr validation, let tun/tap do it
// themselves"), and a write it rejects is a counted drop with its errno.
// A write that finds no room in the kernel (EAGAIN/ENOBUFS: the tap's send
// buffer, TUNSETSNDBUF, is full) is back-pressure, not a drop: send() says
// Retry and the device offers the same packet again once tx_fd() is
// writable, as vhost's handle_tx does. EINTR is retried in place.
// Frames move with readv/writev between the non-blocking fd and the guest's
// iovecs, no bounce copy. One frame per syscall: a tap has no batched
// read/write; send_batch hands a burst of writes to io_uring in one
// io_uring_enter, which results/2026-11-30/tap-io.txt found 1.3x faster
// than a writev per frame for small frames (reads gain nothing that way;
// measured before issue 9 linked the writes of an enter and made them
// RWF_NOWAIT, which pvnet-tapbench should confirm).
//
// Accounting: every frame read is delivered (rx_pkts) or counted in
// rx_drops(); every packet offered is, once, sent (tx_pkts) or counted in
// tx_drops(); each Retry is one tx_retry and the packet comes again.
//
// Port contract: include/pvnet/port/port.h (Port, HasRxFd, HasTxFd, HasMaxFrame,
// HasRecvEmpty: a read that says EAGAIN is the emptiness test, no poll first;
// HasSendBatch).
// One thread uses a TapPort's data path; counters may be read from any.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "pvnet/port/netns.h"
#include "pvnet/port/port.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"
#include "pvnet/virtio/virtio_net.h"

struct io_uring;  // liburing's ring; only tap_port.cc includes liburing.h

namespace pvnet::port {

/// Linux's TUN_F_* (linux/if_tun.h): what TUNSETOFFLOAD lets the tap hand us.
inline constexpr unsigned kTunFCsum = 0x01;
inline constexpr unsigned kTunFTso4 = 0x02;
inline constexpr unsigned kTunFTso6 = 0x04;
inline constexpr unsigned kTunFTsoEcn = 0x08;
/// CSUM + TSO4/6: what lets 64 KiB GSO frames and partial checksums through
/// (the relay's offload set, both taps).
inline constexpr unsigned kTunFGso = kTunFCsum | kTunFTso4 | kTunFTso6;

/// The TUN_F_* set for a guest's negotiated virtio features: what the tap may
/// give us is what the guest accepts on receive (GUEST_CSUM, GUEST_TSO4/6,
/// GUEST_ECN), as QEMU's tap_fd_set_offload maps them. TSO needs CSUM (tun
/// rejects TSO alone), so without GUEST_CSUM the set is empty.
unsigned tun_offload_flags(uint64_t virtio_features) noexcept;

struct TapConfig {
    std::string name;          ///< interface name, 1..15 bytes; attached to if it exists
    std::string netns;         ///< /var/run/netns/<netns>; empty: the caller's namespace
    unsigned offloads = 0;     ///< TUN_F_* for TUNSETOFFLOAD (tun_offload_flags)
    bool multi_queue = false;  ///< IFF_MULTI_QUEUE: one TapPort per queue pair
    bool napi = false;  ///< IFF_NAPI: writes through NAPI/GRO (slower for small frames: tap-io.txt)
    bool link_up = false;  ///< set IFF_UP (SIOCSIFFLAGS) in the tap's namespace
    /// TUNSETSNDBUF: bytes of written frames the kernel may still hold (queued
    /// past the tap, e.g. on a bridge port's qdisc) before a write says EAGAIN,
    /// QEMU's tap `sndbuf=`; 0 keeps tun's default (no limit: never EAGAIN).
    int sndbuf_bytes = 0;
    /// io_uring entries for send_batch (1..kMaxTxBatch; a larger burst goes in
    /// several enters); 0 or no io_uring in the kernel: send_batch writes one by one.
    uint32_t tx_batch = 0;
};

/// Why a write was rejected or a read failed, by errno (EAGAIN/ENOBUFS on a
/// write is a Retry and EINTR is retried: neither is counted here).
enum class TapErrno : uint8_t {
    Inval,  ///< EINVAL: tun rejected the virtio_net_hdr or the frame (a read: tun freed it)
    Io,     ///< EIO: link down
    Other,  ///< e.g. EBADFD: the queue was detached
    Count
};

/// The reason a failed read or write is counted under.
TapErrno tap_errno_reason(int err) noexcept;

/// What a write that failed with `err` means for the packet: Retry for
/// EAGAIN/EWOULDBLOCK and ENOBUFS (no room in the kernel now: vhost's
/// handle_tx discards the descriptor and waits) and for EINTR (nothing was
/// written; TapPort retries that call itself first); Dropped for the rest
/// (EINVAL: tun's verdict on the header, final; EIO: link down).
SendResult tap_write_verdict(int err) noexcept;

class TapPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    static constexpr uint32_t kMaxTxBatch = 256;
    /// Ethernet header + one 802.1Q tag: what a frame carries beyond the MTU.
    static constexpr uint32_t kL2HdrBytes = 14 + 4;

    /// Opens (creating if absent) the tap, in cfg.netns if given.
    static Result<std::unique_ptr<TapPort>, SysError> open(const TapConfig& cfg) noexcept;
    ~TapPort();
    TapPort(const TapPort&) = delete;
    TapPort& operator=(const TapPort&) = delete;

    /// A frame waits to be read: a poll() with no timeout. The backend asks
    /// only when the guest has no buffer to try a read into (recv_was_empty).
    bool rx_pending() noexcept;
    /// Reads one hdr+frame into `dst`; returns its length, or 0 if none
    /// waited (rx_empty, recv_was_empty()) or it was dropped (consumed and
    /// counted in rx_drops(): e.g. less room than the header, or a frame
    /// longer than `dst`).
    uint32_t recv(std::span<const iovec> dst) noexcept;
    /// The last recv() found nothing (EAGAIN): port::HasRecvEmpty.
    bool recv_was_empty() const noexcept { return rx_was_empty_; }
    /// Writes one hdr+frame of `len` bytes (the sum of src's lengths): Sent,
    /// Dropped (counted in tx_drops()) or Retry (no room: tx_retry, not written).
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept;
    /// Writes the frames in order, io_uring batched when available, up to the
    /// first that must be retried (port::SendBatchResult: a Retry is one
    /// tx_retry, EAGAIN/ENOBUFS); one frame alone is a writev. Each frame taken is
    /// counted as send() counts it. The io_uring writes of one enter are
    /// linked (IOSQE_IO_LINK), so none runs after one that failed, and
    /// RWF_NOWAIT, so none waits for room. All writes have completed on
    /// return: the iovecs may be reused.
    SendBatchResult send_batch(std::span<const TxFrame> frames) noexcept;
    /// send_batch goes through io_uring (false: never set up, or it failed).
    bool tx_batch_uring() const noexcept { return ring_ != nullptr; }
    int rx_fd() const noexcept { return fd_; }
    /// The fd to wait on for EPOLLOUT after a Retry (the tap's, as rx_fd()).
    int tx_fd() const noexcept { return fd_; }
    /// The largest frame (no virtio_net_hdr) the tap hands over while no GSO
    /// offload is set: its MTU (SIOCGIFMTU at open) + kL2HdrBytes. With
    /// offloads() holding TSO, frames up to 64 KiB + kL2HdrBytes come too.
    uint32_t max_frame_bytes() const noexcept { return mtu_ + kL2HdrBytes; }
    /// The TUN_F_* set of the last TUNSETOFFLOAD (at open, or set_guest_features).
    unsigned offloads() const noexcept { return offloads_; }
    /// TUNSETOFFLOAD to tun_offload_flags(features): the tap hands over only
    /// the GSO frames and partial checksums the guest accepts (port::HasGuestFeatures).
    bool set_guest_features(uint64_t features) noexcept;
    const std::string& name() const noexcept { return name_; }
    /// port::HasSession. What the tap queued for a guest whose session ended
    /// is read and dropped (rx_drop_no_session), so the next guest on this
    /// device does not get it. A start drops nothing: it also comes when the
    /// same guest restarts its rx vring, and what reaches the link after a
    /// session ended is the link's next owner's, as with a kernel tap.
    void session_start() noexcept {}
    void session_end() noexcept { (void)drain(); }
    /// errno of the last rejected write (0: none yet; a Retry is no rejection).
    int tx_last_errno() const noexcept { return tx_last_errno_.load(std::memory_order_relaxed); }

    /// Frames read and not delivered, each consumed from the tap (but for the
    /// rare rx_drop_errno of a read that found no queue, e.g. EBADFD: detached).
    uint64_t rx_drops() const noexcept {
        return rx_drop_short.get() + rx_drop_truncated.get() + rx_drop_errno.total() +
               rx_drop_no_session.get();
    }
    /// Packets offered and rejected for good.
    uint64_t tx_drops() const noexcept { return tx_drop_bad_len.get() + tx_drop_errno.total(); }

    Counter rx_pkts, rx_bytes, tx_pkts, tx_bytes;
    Counter rx_empty;           ///< reads that found nothing (EAGAIN)
    Counter rx_drop_short;      ///< frame shorter than the vnet header
    Counter rx_drop_truncated;  ///< frame (or header) larger than the guest's buffers
    Counter rx_drop_no_session;  ///< read and dropped at a session's end (drain)
    Counter tx_drop_bad_len;    ///< len disagrees with the iovecs, or a partial write
    CounterArray<TapErrno> rx_drop_errno, tx_drop_errno;
    Counter tx_retry;  ///< writes that found no room (EAGAIN/ENOBUFS): back-pressure, not drops
    Counter tx_batch_ring_failed;  ///< io_uring stopped taking work: one by one from then on

private:
    struct RingDeleter {
        void operator()(io_uring* r) const noexcept;
    };

    TapPort(int fd, std::string name, uint32_t mtu, unsigned offloads) noexcept
        : fd_(fd), name_(std::move(name)), mtu_(mtu), offloads_(offloads) {}
    static bool len_ok(std::span<const iovec> src, uint32_t len) noexcept;
    SendResult count_write(ssize_t n, uint32_t len) noexcept;
    uint32_t discard_frame() noexcept;
    /// Dequeues and frees every waiting frame, at most kMaxDrain; how many.
    uint32_t drain() noexcept;
    void count_read_error(int err) noexcept;
    SendBatchResult submit_writes(std::span<const TxFrame> frames) noexcept;

    /// IOV_MAX (1024, the ring's kMaxIov too) less recv's overflow piece.
    static constexpr std::size_t kMaxRxIov = 1023;
    /// A tap queues at most its txqueuelen (1000 by default): a bound
    /// against a peer that writes as fast as we read.
    static constexpr uint32_t kMaxDrain = 1u << 16;

    int fd_;
    std::string name_;
    uint32_t mtu_;
    unsigned offloads_;
    std::array<iovec, kMaxRxIov + 1> rx_iov_{};  ///< recv's pieces + the overflow byte
    std::byte rx_overflow_{};
    bool rx_was_empty_ = false;
    std::unique_ptr<io_uring, RingDeleter> ring_;
    uint32_t ring_entries_ = 0;
    std::array<int, kMaxTxBatch> tx_res_{};  ///< submit_writes: each frame's CQE result (or a mark)
    std::atomic<int> tx_last_errno_{0};
};

static_assert(Port<TapPort> && HasRxFd<TapPort> && HasTxFd<TapPort> && HasMaxFrame<TapPort> &&
              HasSession<TapPort> && HasRecvEmpty<TapPort> && HasSendBatch<TapPort>);

}  // namespace pvnet::port
