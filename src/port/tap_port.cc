// TapPort: open and configure a TAP (Linux drivers/net/tun.c: tun_set_iff,
// set_offload, tun_get_user/tun_put_user for the frame formats), then move
// one hdr+frame per readv/writev.
#include "pvnet/port/tap_port.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "pvnet/virtio/virtio_config.h"

namespace pvnet::port {

static_assert(kTunFCsum == TUN_F_CSUM && kTunFTso4 == TUN_F_TSO4 && kTunFTso6 == TUN_F_TSO6 &&
              kTunFTsoEcn == TUN_F_TSO_ECN);

namespace {

constexpr bool has(uint64_t features, unsigned bit) noexcept { return (features >> bit) & 1u; }

/// Marks in TapPort::tx_res_ beside the CQE results (all of which are >= -4095).
constexpr int kResBadLen = INT_MIN;     // never submitted: len disagrees with the iovecs
constexpr int kResNoCqe = INT_MIN + 1;  // submitted (or meant to be), no completion seen

/// The call again while it fails with EINTR: a signal interrupted it before
/// it did anything (glibc's TEMP_FAILURE_RETRY).
template <typename Call>
auto retry_eintr(Call&& call) noexcept {
    auto rc = call();
    while (rc < 0 && errno == EINTR) rc = call();
    return rc;
}

/// ioctl `req` on interface `name` through a socket of the calling thread's
/// namespace (SIOCGIFFLAGS, SIOCSIFFLAGS, SIOCGIFMTU); fails naming `op`.
Status<SysError> if_ioctl(const std::string& name, unsigned long req, ifreq& ifr,
                          const char* op) noexcept {
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return unexpected(SysError{"socket", errno});
    std::memcpy(ifr.ifr_name, name.c_str(), name.size() + 1);
    const int rc = ::ioctl(s, req, &ifr);
    const int err = errno;
    ::close(s);
    if (rc != 0) return unexpected(SysError{op, err});
    return {};
}

/// Sets IFF_UP on `name` in the calling thread's namespace.
Status<SysError> link_up(const std::string& name) noexcept {
    ifreq ifr{};
    if (auto st = if_ioctl(name, SIOCGIFFLAGS, ifr, "SIOCGIFFLAGS"); !st) return st;
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    return if_ioctl(name, SIOCSIFFLAGS, ifr, "SIOCSIFFLAGS");
}

struct OpenedTap {
    int fd = -1;
    uint32_t mtu = 0;
};

/// Opens /dev/net/tun and attaches it to (or creates) the tap, in the
/// calling thread's namespace: tun binds the device to the opener's, and the
/// MTU is read there too.
Status<SysError> open_tap(const TapConfig& cfg, OpenedTap& out) noexcept {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return unexpected(SysError{"open /dev/net/tun", errno});
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, cfg.name.c_str(), cfg.name.size() + 1);
    unsigned flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (cfg.multi_queue) flags |= IFF_MULTI_QUEUE;
    if (cfg.napi) flags |= IFF_NAPI;
    ifr.ifr_flags = static_cast<short>(flags);
    int hdr_bytes = TapPort::kHdrBytes;
    int sndbuf = cfg.sndbuf_bytes;
    const char* op = nullptr;
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
        op = "TUNSETIFF";
    } else if (::ioctl(fd, TUNSETVNETHDRSZ, &hdr_bytes) != 0) {
        op = "TUNSETVNETHDRSZ";
    } else if (::ioctl(fd, TUNSETOFFLOAD, static_cast<unsigned long>(cfg.offloads)) != 0) {
        op = "TUNSETOFFLOAD";
    } else if (sndbuf != 0 && ::ioctl(fd, TUNSETSNDBUF, &sndbuf) != 0) {
        op = "TUNSETSNDBUF";
    }
    if (op != nullptr) {
        const int err = errno;
        ::close(fd);
        return unexpected(SysError{op, err});
    }
    ifreq mtu{};
    auto st = if_ioctl(cfg.name, SIOCGIFMTU, mtu, "SIOCGIFMTU");
    if (st && cfg.link_up) st = link_up(cfg.name);
    if (!st) {
        ::close(fd);
        return st;
    }
    out.fd = fd;
    out.mtu = static_cast<uint32_t>(std::max(mtu.ifr_mtu, 0));
    return {};
}

/// Writes num_buffers = 1 (bytes 10..11 of the header, maybe split over
/// iovecs): tun writes only the 10-byte legacy header, and without
/// MRG_RXBUF a VERSION_1 device reports one buffer per packet.
void set_num_buffers_one(std::span<const iovec> dst) noexcept {
    const std::byte le[2] = {std::byte{1}, std::byte{0}};
    std::size_t off = offsetof(virtio::virtio_net_hdr, num_buffers);
    std::size_t i = 0;
    for (const iovec& v : dst) {
        while (i < 2 && off < v.iov_len) static_cast<std::byte*>(v.iov_base)[off++] = le[i++];
        if (i == 2) return;
        off -= std::min(off, v.iov_len);
    }
}

}  // namespace

unsigned tun_offload_flags(uint64_t f) noexcept {
    if (!has(f, virtio::VIRTIO_NET_F_GUEST_CSUM)) return 0;
    unsigned t = kTunFCsum;
    if (has(f, virtio::VIRTIO_NET_F_GUEST_TSO4)) t |= kTunFTso4;
    if (has(f, virtio::VIRTIO_NET_F_GUEST_TSO6)) t |= kTunFTso6;
    if (has(f, virtio::VIRTIO_NET_F_GUEST_ECN) && (t & (kTunFTso4 | kTunFTso6))) t |= kTunFTsoEcn;
    return t;
}

bool TapPort::set_guest_features(uint64_t features) noexcept {
    const unsigned t = tun_offload_flags(features);
    if (::ioctl(fd_, TUNSETOFFLOAD, static_cast<unsigned long>(t)) != 0) return false;
    offloads_ = t;
    return true;
}

TapErrno tap_errno_reason(int err) noexcept {
    switch (err) {
        case EINVAL:
            return TapErrno::Inval;
        case EIO:
            return TapErrno::Io;
        default:
            return TapErrno::Other;
    }
}

SendResult tap_write_verdict(int err) noexcept {
    // EWOULDBLOCK is EAGAIN on Linux. ENOMEM, which vhost's handle_tx also
    // retries, stays a counted drop: a Retry waits for EPOLLOUT, and a tap
    // whose send buffer is empty is writable at once, so it would spin.
    return err == EAGAIN || err == ENOBUFS || err == EINTR ? SendResult::Retry
                                                           : SendResult::Dropped;
}

Result<std::unique_ptr<TapPort>, SysError> TapPort::open(const TapConfig& cfg) noexcept {
    // IFNAMSIZ includes the NUL; '/' would make a bad sysfs name.
    if (cfg.name.empty() || cfg.name.size() >= IFNAMSIZ ||
        cfg.name.find('/') != std::string::npos) {
        return unexpected(SysError{"tap name", EINVAL});
    }
    if (cfg.tx_batch > kMaxTxBatch) return unexpected(SysError{"tx_batch", EINVAL});
    if (cfg.sndbuf_bytes < 0) return unexpected(SysError{"sndbuf", EINVAL});
    OpenedTap t;
    auto st = run_in_netns(cfg.netns, [&] { return open_tap(cfg, t); });
    if (!st) return unexpected(st.error());
    std::unique_ptr<TapPort> p(new (std::nothrow) TapPort(t.fd, cfg.name, t.mtu, cfg.offloads));
    if (!p) {
        ::close(t.fd);
        return unexpected(SysError{"alloc", ENOMEM});
    }
    if (cfg.tx_batch != 0) {
        // A kernel without io_uring (or with it disabled) still gets a working
        // port: send_batch then writes one frame per writev.
        std::unique_ptr<io_uring, RingDeleter> ring(new (std::nothrow) io_uring{});
        if (ring && io_uring_queue_init(cfg.tx_batch, ring.get(), 0) == 0) {
            p->ring_entries_ = std::min(ring->sq.ring_entries, kMaxTxBatch);
            p->ring_ = std::move(ring);
        }
    }
    return p;
}

void TapPort::RingDeleter::operator()(io_uring* r) const noexcept {
    io_uring_queue_exit(r);
    delete r;
}

TapPort::~TapPort() {
    ring_.reset();  // before the fd its requests name
    ::close(fd_);
}

bool TapPort::rx_pending() noexcept {
    pollfd p{fd_, POLLIN, 0};
    return retry_eintr([&] { return ::poll(&p, 1, 0); }) == 1 && (p.revents & POLLIN) != 0;
}

void TapPort::count_read_error(int err) noexcept {
    if (err == EAGAIN) {
        rx_was_empty_ = true;
        rx_empty.add();
    } else {
        // EINVAL: tun dequeued the frame and freed it (tun_do_read frees what
        // tun_put_user could not write); EBADFD and the like: no queue.
        rx_drop_errno.add(tap_errno_reason(err));
    }
}

uint32_t TapPort::recv(std::span<const iovec> dst) noexcept {
    rx_was_empty_ = false;
    // readv takes at most IOV_MAX pieces, one of them our overflow byte.
    const std::size_t n_iov = std::min<std::size_t>(dst.size(), kMaxRxIov);
    std::size_t room = 0;
    for (std::size_t i = 0; i < n_iov; ++i) room += dst[i].iov_len;
    // Rule: the header must fit. A frame that waits is consumed and counted
    // all the same: left in the queue it would be offered again and again.
    if (room < kHdrBytes) return discard_frame();
    // tun cuts a frame to the room it is given and returns the cut length, so
    // a frame longer than the guest's buffers shows only as a byte landing in
    // one extra piece past them.
    std::copy_n(dst.begin(), n_iov, rx_iov_.begin());
    rx_iov_[n_iov] = iovec{&rx_overflow_, 1};
    const ssize_t n =
        retry_eintr([&] { return ::readv(fd_, rx_iov_.data(), static_cast<int>(n_iov + 1)); });
    if (n < 0) {
        count_read_error(errno);
        return 0;
    }
    const auto got = static_cast<std::size_t>(n);
    if (got < kHdrBytes) {
        rx_drop_short.add();
        return 0;
    }
    if (got > room || got > UINT32_MAX) {
        rx_drop_truncated.add();
        return 0;
    }
    set_num_buffers_one(dst.first(n_iov));
    rx_pkts.add();
    rx_bytes.add(got);
    return static_cast<uint32_t>(got);
}

/// Dequeues the next frame, if any, into the overflow byte alone: less room
/// than the header makes tun fail the read with EINVAL and free the frame
/// (tun_put_user), and the guest's buffers are not touched.
uint32_t TapPort::discard_frame() noexcept {
    iovec one{&rx_overflow_, 1};
    const ssize_t n = retry_eintr([&] { return ::readv(fd_, &one, 1); });
    const int err = errno;
    if (n >= 0 || err == EINVAL) {
        rx_drop_truncated.add();
    } else {
        count_read_error(err);
    }
    return 0;
}

uint32_t TapPort::drain() noexcept {
    uint32_t n = 0;
    for (; n < kMaxDrain; ++n) {
        // As discard_frame: tun frees a frame read into less than its header.
        iovec one{&rx_overflow_, 1};
        const ssize_t r = retry_eintr([&] { return ::readv(fd_, &one, 1); });
        if (r < 0 && errno != EINVAL) break;  // EAGAIN: empty (or the queue is gone)
        rx_drop_no_session.add();
    }
    return n;
}

bool TapPort::len_ok(std::span<const iovec> src, uint32_t len) noexcept {
    std::size_t sum = 0;
    for (const iovec& v : src) sum += v.iov_len;
    return sum == len && len >= kHdrBytes && src.size() <= IOV_MAX;
}

/// The verdict on one write of `len` bytes: n bytes, or -errno.
SendResult TapPort::count_write(ssize_t n, uint32_t len) noexcept {
    if (n < 0) {
        const auto err = static_cast<int>(-n);
        if (tap_write_verdict(err) == SendResult::Retry) {
            tx_retry.add();
            return SendResult::Retry;
        }
        // The kernel's verdict (EINVAL: bad virtio_net_hdr) is final: count, never retry.
        tx_last_errno_.store(err, std::memory_order_relaxed);
        tx_drop_errno.add(tap_errno_reason(err));
        return SendResult::Dropped;
    }
    if (static_cast<std::size_t>(n) != len) {
        tx_drop_bad_len.add();
        return SendResult::Dropped;
    }
    tx_pkts.add();
    tx_bytes.add(len);
    return SendResult::Sent;
}

SendResult TapPort::send(std::span<const iovec> src, uint32_t len) noexcept {
    if (!len_ok(src, len)) {
        tx_drop_bad_len.add();
        return SendResult::Dropped;
    }
    const ssize_t n =
        retry_eintr([&] { return ::writev(fd_, src.data(), static_cast<int>(src.size())); });
    return count_write(n < 0 ? -errno : n, len);
}

SendBatchResult TapPort::send_batch(std::span<const TxFrame> frames) noexcept {
    SendBatchResult out;
    // One frame: a writev, one syscall as an enter is, without the ring's work.
    const bool one = frames.size() == 1;
    while (out.taken < frames.size()) {
        const auto rest = frames.subspan(out.taken);
        SendBatchResult r;
        if (ring_ && !one) {
            r = submit_writes(rest.first(std::min<std::size_t>(rest.size(), ring_entries_)));
        }
        if (r.taken == 0 && !r.retry) {
            // No ring, or its head write did not run (interrupted, or the ring
            // failed): this frame by writev, so every pass makes progress.
            const SendResult s = send(rest[0].iov, rest[0].len);
            const bool sent = s == SendResult::Sent;
            r = {s == SendResult::Retry ? 0u : 1u, sent ? 1u : 0u, sent ? rest[0].len : 0u,
                 s == SendResult::Retry};
        }
        out.taken += r.taken;
        out.sent += r.sent;
        out.sent_bytes += r.sent_bytes;
        if (r.retry) {
            out.retry = true;
            break;
        }
    }
    return out;
}

/// At most ring_entries_ frames: one linked SQE each, one enter, every CQE
/// reaped; returns the leading frames done, as send_batch does. A link
/// (IOSQE_IO_LINK) starts each write after the previous one wrote in full
/// and cancels the rest (-ECANCELED) after one that did not, so a Retry
/// never lets a later frame overtake it; a frame dropped mid-link has its
/// followers submitted again by the caller.
SendBatchResult TapPort::submit_writes(std::span<const TxFrame> frames) noexcept {
    io_uring* ring = ring_.get();
    uint32_t queued = 0;
    io_uring_sqe* last = nullptr;
    for (uint32_t k = 0; k < frames.size(); ++k) {
        // A bad length is counted when the walk below reaches it: not if an
        // earlier frame says Retry, for then it is offered again.
        if (!len_ok(frames[k].iov, frames[k].len)) {
            tx_res_[k] = kResBadLen;
            continue;
        }
        tx_res_[k] = kResNoCqe;
        // Never null: at most ring_entries_ SQEs, and the last call reaped all.
        // RWF_NOWAIT: io_uring ignores the fd's O_NONBLOCK for a pollable file
        // and would park a write that finds no room until EPOLLOUT (seen on
        // 6.18: the enter slept 17 s behind a held bridge port), so a Retry
        // would stall the worker instead of coming back as -EAGAIN.
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        io_uring_prep_writev2(sqe, fd_, frames[k].iov.data(),
                              static_cast<unsigned>(frames[k].iov.size()), 0, RWF_NOWAIT);
        io_uring_sqe_set_data64(sqe, k);
        io_uring_sqe_set_flags(sqe, IOSQE_IO_LINK);
        last = sqe;
        ++queued;
    }
    if (last != nullptr) io_uring_sqe_set_flags(last, 0);  // the link ends here
    // Bounded retries of a submit the kernel refused for now (EINTR, EAGAIN,
    // EBUSY); a tap write completes inline, so each enter waits for all.
    uint32_t submitted = 0;
    for (int tries = 0; submitted < queued && tries < 4; ++tries) {
        const int rc = io_uring_submit_and_wait(ring, queued - submitted);
        if (rc > 0) {
            submitted += static_cast<uint32_t>(rc);
        } else if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            break;
        }
    }
    uint32_t reaped = 0;
    for (uint32_t tries = 0; reaped < submitted && tries < 1000; ++tries) {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(ring, &cqe) != 0) continue;
        const uint64_t k = io_uring_cqe_get_data64(cqe);
        const int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        ++reaped;
        if (k < frames.size()) tx_res_[k] = res;  // else our bug; never index with it
    }
    if (submitted < queued || reaped < submitted) {
        // SQEs the kernel never took cannot be taken back, nor CQEs left
        // behind be told from the next batch's: drop the ring (its exit never
        // submits them); the caller writes from the first frame not seen done.
        tx_batch_ring_failed.add();
        ring_.reset();
    }
    SendBatchResult r;
    for (uint32_t k = 0; k < frames.size(); ++k) {
        const int res = tx_res_[k];
        if (res == kResBadLen) {
            tx_drop_bad_len.add();
        } else if (res == kResNoCqe || res == -ECANCELED || res == -EINTR) {
            break;  // not written: the caller submits it again
        } else if (res == -EOPNOTSUPP) {
            // A kernel whose tun refuses RWF_NOWAIT: not written, and no write
            // through this ring can be; writev from here on.
            if (ring_) tx_batch_ring_failed.add();
            ring_.reset();
            break;
        } else {
            const SendResult s = count_write(res, frames[k].len);
            if (s == SendResult::Retry) {
                r.retry = true;
                break;
            }
            if (s == SendResult::Sent) {
                ++r.sent;
                r.sent_bytes += frames[k].len;
            }
        }
        ++r.taken;
    }
    return r;
}

}  // namespace pvnet::port
