// The plain tun relay: poll both taps, one read and one write per frame.
#include "pvnet/relay/plain_relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "pvnet/util/thread.h"

namespace pvnet::relay {

uint64_t PlainDirStats::write_errors() const noexcept {
    uint64_t n = 0;
    for (const Counter& c : write_errno) n += c.get();
    return n;
}

Result<std::unique_ptr<PlainRelay>, port::SysError> PlainRelay::open(const PlainRelayConfig& cfg) {
    std::unique_ptr<PlainRelay> r(new (std::nothrow) PlainRelay(cfg.cpu));
    if (!r) return unexpected(port::SysError{"alloc", ENOMEM});
    r->buf_.reset(new (std::nothrow) std::byte[kBufBytes]);
    if (!r->buf_) return unexpected(port::SysError{"alloc", ENOMEM});
    for (auto [tap_cfg, out] : {std::pair{&cfg.guest, &r->guest_}, std::pair{&cfg.host, &r->host_}}) {
        port::TapConfig c = *tap_cfg;
        c.link_up = true;  // the contract: both links up, no addresses
        auto tap = port::TapPort::open(c);
        if (!tap) return unexpected(tap.error());
        *out = std::move(*tap);
    }
    return r;
}

void PlainRelay::relay_one(int from_fd, int to_fd, PlainDirStats& st) noexcept {
    const ssize_t n = ::read(from_fd, buf_.get(), kBufBytes);
    if (n < 0) {
        (errno == EAGAIN ? st.read_eagain : st.read_errors).add();
        return;
    }
    st.reads.add();
    const auto len = static_cast<std::size_t>(n);
    if (len == kBufBytes) {
        st.read_truncated.add();
        return;
    }
    // Header and frame go as read: tun validates the header on this write.
    const ssize_t w = ::write(to_fd, buf_.get(), len);
    if (w < 0) {
        // EAGAIN/ENOBUFS is the kernel's queue being full: drop, as a NIC
        // would, and never retry (a retry loop would stall the other direction).
        if (errno == EAGAIN || errno == ENOBUFS) {
            st.write_eagain.add();
        } else {
            const auto slot = static_cast<std::size_t>(errno);
            st.write_errno[slot < PlainDirStats::kErrnoSlots ? slot : PlainDirStats::kErrnoSlots - 1]
                .add();
        }
    } else if (static_cast<std::size_t>(w) != len) {
        st.write_short.add();
    } else {
        st.frames.add();
        st.bytes.add(len);
    }
}

Status<port::SysError> PlainRelay::run(const std::atomic<bool>& stop) noexcept {
    pin_current_thread(cpu_);
    const int g = guest_->rx_fd(), h = host_->rx_fd();
    pollfd fds[2] = {{g, POLLIN, 0}, {h, POLLIN, 0}};
    // The timeout only bounds how late a stop request is seen.
    constexpr int kStopCheckMs = 100;
    while (!stop.load(std::memory_order_relaxed)) {
        const int rc = ::poll(fds, 2, kStopCheckMs);
        if (rc < 0) {
            if (errno == EINTR) continue;
            return unexpected(port::SysError{"poll", errno});
        }
        if (rc == 0) continue;
        stats_.polls.add();
        for (const pollfd& p : fds) {
            // A tap whose device is gone polls as an error forever: stop, do not spin.
            if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
                return unexpected(port::SysError{"tap gone", EIO});
            }
        }
        if ((fds[0].revents & POLLIN) != 0) relay_one(g, h, stats_.guest_to_host);
        if ((fds[1].revents & POLLIN) != 0) relay_one(h, g, stats_.host_to_guest);
    }
    return {};
}

}  // namespace pvnet::relay
