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

/// Sets IFF_UP on `name` through a socket of the calling thread's namespace.
Status<SysError> link_up(const std::string& name) noexcept {
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return unexpected(SysError{"socket", errno});
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, name.c_str(), name.size() + 1);
    int rc = ::ioctl(s, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
        rc = ::ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    const int err = errno;
    ::close(s);
    if (rc != 0) return unexpected(SysError{"SIOCSIFFLAGS", err});
    return {};
}

/// Opens /dev/net/tun and attaches it to (or creates) the tap, in the
/// calling thread's namespace: tun binds the device to the opener's.
Status<SysError> open_tap(const TapConfig& cfg, int& out_fd) noexcept {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return unexpected(SysError{"open /dev/net/tun", errno});
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, cfg.name.c_str(), cfg.name.size() + 1);
    unsigned flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (cfg.multi_queue) flags |= IFF_MULTI_QUEUE;
    if (cfg.napi) flags |= IFF_NAPI;
    ifr.ifr_flags = static_cast<short>(flags);
    int hdr_bytes = TapPort::kHdrBytes;
    const char* op = nullptr;
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
        op = "TUNSETIFF";
    } else if (::ioctl(fd, TUNSETVNETHDRSZ, &hdr_bytes) != 0) {
        op = "TUNSETVNETHDRSZ";
    } else if (::ioctl(fd, TUNSETOFFLOAD, static_cast<unsigned long>(cfg.offloads)) != 0) {
        op = "TUNSETOFFLOAD";
    }
    if (op != nullptr) {
        const int err = errno;
        ::close(fd);
        return unexpected(SysError{op, err});
    }
    if (cfg.link_up) {
        if (auto st = link_up(cfg.name); !st) {
            ::close(fd);
            return st;
        }
    }
    out_fd = fd;
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

Result<std::unique_ptr<TapPort>, SysError> TapPort::open(const TapConfig& cfg) noexcept {
    // IFNAMSIZ includes the NUL; '/' would make a bad sysfs name.
    if (cfg.name.empty() || cfg.name.size() >= IFNAMSIZ ||
        cfg.name.find('/') != std::string::npos) {
        return unexpected(SysError{"tap name", EINVAL});
    }
    if (cfg.tx_batch > kMaxTxBatch) return unexpected(SysError{"tx_batch", EINVAL});
    int fd = -1;
    auto st = run_in_netns(cfg.netns, [&] { return open_tap(cfg, fd); });
    if (!st) return unexpected(st.error());
    std::unique_ptr<TapPort> p(new (std::nothrow) TapPort(fd, cfg.name));
    if (!p) {
        ::close(fd);
        return unexpected(SysError{"alloc", ENOMEM});
    }
    if (cfg.tx_batch != 0) {
        // A kernel without io_uring (or with it disabled) still gets a working
        // port: send_batch then writes one frame per writev.
        std::unique_ptr<io_uring, RingDeleter> ring(new (std::nothrow) io_uring{});
        if (ring && io_uring_queue_init(cfg.tx_batch, ring.get(), 0) == 0) {
            p->ring_entries_ = ring->sq.ring_entries;
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

TapErrno TapPort::classify(int err) noexcept {
    switch (err) {
        case EINVAL:
            return TapErrno::Inval;
        case EAGAIN:
        case ENOBUFS:
            return TapErrno::NoBufs;
        case EIO:
            return TapErrno::Io;
        default:
            return TapErrno::Other;
    }
}

bool TapPort::rx_pending() noexcept {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

uint32_t TapPort::recv(std::span<const iovec> dst) noexcept {
    // readv takes at most IOV_MAX pieces, one of them our overflow byte.
    const std::size_t n_iov = std::min<std::size_t>(dst.size(), kMaxRxIov);
    std::size_t room = 0;
    for (std::size_t i = 0; i < n_iov; ++i) room += dst[i].iov_len;
    // Rule: the header must fit, or tun fails the read and loses the frame.
    if (room < kHdrBytes) {
        rx_drop_truncated.add();
        return 0;
    }
    // tun cuts a frame to the room it is given and returns the cut length, so
    // a frame longer than the guest's buffers shows only as a byte landing in
    // one extra piece past them.
    std::copy_n(dst.begin(), n_iov, rx_iov_.begin());
    rx_iov_[n_iov] = iovec{&rx_overflow_, 1};
    const ssize_t n = ::readv(fd_, rx_iov_.data(), static_cast<int>(n_iov + 1));
    if (n < 0) {
        if (errno == EAGAIN) {
            rx_empty.add();
        } else {
            rx_drop_errno.add(classify(errno));
        }
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

bool TapPort::valid_len(std::span<const iovec> src, uint32_t len) noexcept {
    std::size_t sum = 0;
    for (const iovec& v : src) sum += v.iov_len;
    if (sum != len || len < kHdrBytes || src.size() > IOV_MAX) {
        tx_drop_bad_len.add();
        return false;
    }
    return true;
}

/// The verdict on one write of `len` bytes: n bytes, or -errno.
void TapPort::count_write(ssize_t n, uint32_t len) noexcept {
    if (n < 0) {
        // The kernel's verdict (EINVAL: bad virtio_net_hdr) is final: count, never retry.
        const auto err = static_cast<int>(-n);
        tx_last_errno_.store(err, std::memory_order_relaxed);
        tx_drop_errno.add(classify(err));
    } else if (static_cast<std::size_t>(n) != len) {
        tx_drop_bad_len.add();
    } else {
        tx_pkts.add();
        tx_bytes.add(len);
    }
}

bool TapPort::send(std::span<const iovec> src, uint32_t len) noexcept {
    if (!valid_len(src, len)) return false;
    const ssize_t n = ::writev(fd_, src.data(), static_cast<int>(src.size()));
    count_write(n < 0 ? -errno : n, len);
    return n == static_cast<ssize_t>(len);
}

uint32_t TapPort::send_batch(std::span<const TapTxFrame> frames) noexcept {
    uint32_t sent = 0;
    std::size_t i = 0;
    while (i < frames.size() && ring_) {
        const std::size_t k = std::min<std::size_t>(frames.size() - i, ring_entries_);
        sent += submit_writes(frames.subspan(i, k));
        i += k;
    }
    for (; i < frames.size(); ++i) sent += send(frames[i].iov, frames[i].len) ? 1u : 0u;
    return sent;
}

/// At most ring_entries_ frames: one SQE each, one enter, every CQE reaped.
uint32_t TapPort::submit_writes(std::span<const TapTxFrame> frames) noexcept {
    io_uring* ring = ring_.get();
    uint32_t queued = 0;
    for (uint32_t k = 0; k < frames.size(); ++k) {
        if (!valid_len(frames[k].iov, frames[k].len)) continue;
        // Never null: at most ring_entries_ SQEs, and the last call reaped all.
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        io_uring_prep_writev(sqe, fd_, frames[k].iov.data(),
                             static_cast<unsigned>(frames[k].iov.size()), 0);
        io_uring_sqe_set_data64(sqe, k);
        tx_queued_[queued++] = k;
    }
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
    uint32_t sent = 0, reaped = 0;
    for (uint32_t tries = 0; reaped < submitted && tries < 1000; ++tries) {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(ring, &cqe) != 0) continue;
        const uint64_t k = io_uring_cqe_get_data64(cqe);
        io_uring_cqe_seen(ring, cqe);
        if (k >= frames.size()) continue;  // our bug; never index with it
        count_write(cqe->res, frames[k].len);
        if (cqe->res == static_cast<int>(frames[k].len)) ++sent;
        ++reaped;
    }
    if (submitted < queued || reaped < submitted) {
        // SQEs the kernel never took cannot be taken back, nor CQEs left
        // behind be told from the next batch's: drop the ring (its exit never
        // submits them) and write the untaken frames one by one.
        tx_batch_ring_failed.add();
        ring_.reset();
        for (uint32_t q = submitted; q < queued; ++q) {
            const TapTxFrame& f = frames[tx_queued_[q]];
            sent += send(f.iov, f.len) ? 1u : 0u;
        }
    }
    return sent;
}

}  // namespace pvnet::port
