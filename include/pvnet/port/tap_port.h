// TapPort: a Linux TAP device as a backend port (DESIGN.md layer 6), the way
// vhost-net and QEMU's tap backend use one: IFF_TAP|IFF_NO_PI|IFF_VNET_HDR,
// a 12-byte virtio_net_hdr (TUNSETVNETHDRSZ) in front of every frame in
// both directions, and TUNSETOFFLOAD from the offloads the guest accepts, so
// GSO frames and partial checksums pass through untouched.
//
// The header is not validated here: tun checks it on write (seed 002,
// "vhost_net: remove virtio_net_hdr validation, let tun/tap do it
// themselves"), and a write it rejects is a counted drop with its errno.
// Frames move with readv/writev between the non-blocking fd and the guest's
// iovecs, no bounce copy. One frame per syscall: a tap has no batched
// read/write; send_batch hands a burst of writes to io_uring in one
// io_uring_enter, which results/2026-11-30/tap-io.txt found 1.3x faster
// than a writev per frame for small frames (reads gain nothing that way).
//
// Port contract of backend::VhostNet (include/pvnet/backend/vhost_net.h).
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
    /// io_uring entries for send_batch (1..kMaxTxBatch; a larger burst goes in
    /// several enters); 0 or no io_uring in the kernel: send_batch writes one by one.
    uint32_t tx_batch = 0;
};

/// One frame of a send_batch: hdr+frame over `iov`, `len` bytes in all.
struct TapTxFrame {
    std::span<const iovec> iov;
    uint32_t len = 0;
};

/// Why a write was rejected or a read failed, by errno.
enum class TapErrno : uint8_t {
    Inval,   ///< EINVAL: tun rejected the virtio_net_hdr or the frame
    NoBufs,  ///< EAGAIN/ENOBUFS on write: no room in the kernel
    Io,      ///< EIO: link down / detached queue
    Other,
    Count
};

class TapPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    static constexpr uint32_t kMaxTxBatch = 256;

    /// Opens (creating if absent) the tap, in cfg.netns if given.
    static Result<std::unique_ptr<TapPort>, SysError> open(const TapConfig& cfg) noexcept;
    ~TapPort();
    TapPort(const TapPort&) = delete;
    TapPort& operator=(const TapPort&) = delete;

    /// A frame waits to be read: a poll() with no timeout. Exact, because the
    /// backend pops a guest buffer before recv and a 0 from recv spends it;
    /// the syscall it costs is measured in results/2026-11-30/tap-io.txt.
    bool rx_pending() noexcept;
    /// Reads one hdr+frame into `dst`; returns its length, 0 if none or dropped.
    uint32_t recv(std::span<const iovec> dst) noexcept;
    /// Writes one hdr+frame of `len` bytes (the sum of src's lengths).
    bool send(std::span<const iovec> src, uint32_t len) noexcept;
    /// Writes every frame, io_uring batched when available, and returns how
    /// many the kernel took; each rejection is counted as send() counts it.
    /// All writes have completed on return: the iovecs may be reused.
    uint32_t send_batch(std::span<const TapTxFrame> frames) noexcept;
    /// send_batch goes through io_uring (false: never set up, or it failed).
    bool tx_batch_uring() const noexcept { return ring_ != nullptr; }
    int rx_fd() const noexcept { return fd_; }
    const std::string& name() const noexcept { return name_; }
    /// errno of the last rejected write (0: none yet).
    int tx_last_errno() const noexcept { return tx_last_errno_.load(std::memory_order_relaxed); }

    Counter rx_pkts, rx_bytes, tx_pkts, tx_bytes;
    Counter rx_empty;           ///< reads that found nothing (EAGAIN)
    Counter rx_drop_short;      ///< frame shorter than the vnet header
    Counter rx_drop_truncated;  ///< frame (or header) larger than the guest's buffers
    Counter tx_drop_bad_len;    ///< len disagrees with the iovecs, or a partial write
    CounterArray<TapErrno> rx_drop_errno, tx_drop_errno;
    Counter tx_batch_ring_failed;  ///< io_uring stopped taking work: one by one from then on

private:
    struct RingDeleter {
        void operator()(io_uring* r) const noexcept;
    };

    TapPort(int fd, std::string name) noexcept : fd_(fd), name_(std::move(name)) {}
    static TapErrno classify(int err) noexcept;
    bool valid_len(std::span<const iovec> src, uint32_t len) noexcept;
    void count_write(ssize_t n, uint32_t len) noexcept;
    uint32_t submit_writes(std::span<const TapTxFrame> frames) noexcept;

    /// IOV_MAX (1024, the ring's kMaxIov too) less recv's overflow piece.
    static constexpr std::size_t kMaxRxIov = 1023;

    int fd_;
    std::string name_;
    std::array<iovec, kMaxRxIov + 1> rx_iov_{};  ///< recv's pieces + the overflow byte
    std::byte rx_overflow_{};
    std::unique_ptr<io_uring, RingDeleter> ring_;
    uint32_t ring_entries_ = 0;
    std::array<uint32_t, kMaxTxBatch> tx_queued_{};  ///< frame index of each SQE, in order
    std::atomic<int> tx_last_errno_{0};
};

}  // namespace pvnet::port
