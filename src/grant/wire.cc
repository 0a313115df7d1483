#include "pvnet/grant/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pvnet/mem/grant_table.h"
#include "pvnet/grant/handshake.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/util/fd_passing.h"

namespace pvnet::grant {

namespace {

constexpr std::size_t kMaxFds = 8;

std::string errno_text(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

uint64_t ring_used_off(uint16_t size) noexcept {
    // avail: flags, idx, ring[size], used_event.
    const uint64_t avail_end = ring_avail_off(size) + 6u + 2u * uint64_t{size};
    return (avail_end + 3u) & ~uint64_t{3};
}

uint64_t ring_bytes(uint16_t size) noexcept {
    // used: flags, idx, ring[size] of 8 bytes, avail_event.
    return ring_used_off(size) + 6u + 8u * uint64_t{size};
}

Result<GrantHello, std::string> parse_hello(std::span<const std::byte> msg, std::size_t nfds) {
    GrantHello h;
    if (msg.size() != sizeof h) {
        return unexpected("hello: " + std::to_string(msg.size()) + " bytes, want " +
                          std::to_string(sizeof h));
    }
    std::memcpy(&h, msg.data(), sizeof h);
    if (h.magic != kHelloMagic) return unexpected(std::string("hello: bad magic"));
    if (h.version != kWireVersion) {
        return unexpected("hello: version " + std::to_string(h.version) + ", want " +
                          std::to_string(kWireVersion));
    }
    if (auto d = check_domid(h.domid); !d) return unexpected("hello: " + d.error());
    if (h.ring_size == 0 || h.ring_size > kMaxRingSize || (h.ring_size & (h.ring_size - 1)) != 0) {
        return unexpected("hello: ring_size " + std::to_string(h.ring_size) +
                          " not a power of two in 1.." + std::to_string(kMaxRingSize));
    }
    if (h.frame_bytes < port::kMinFrameBytes || h.frame_bytes > port::kMaxFrameBytes) {
        return unexpected("hello: frame_bytes " + std::to_string(h.frame_bytes) + " out of range");
    }
    if (h.grant_entries == 0 || h.grant_entries > kMaxGrantEntries) {
        return unexpected("hello: grant_entries " + std::to_string(h.grant_entries) +
                          " out of range");
    }
    if (h.shared_bytes == 0 || h.shared_bytes > kMaxDataBytes) {
        return unexpected(std::string("hello: shared_bytes out of range"));
    }
    const uint64_t table_bytes = uint64_t{h.grant_entries} * sizeof(mem::GrantEntry);
    const uint64_t rb = ring_bytes(h.ring_size);
    // Each part inside the shared memfd and apart from the others; the
    // sizes are bounded above, so none of these sums can wrap.
    const auto inside = [&](uint64_t off, uint64_t len) {
        return off <= h.shared_bytes && len <= h.shared_bytes - off;
    };
    if (!inside(0, table_bytes)) return unexpected(std::string("hello: grant table past shared memory"));
    if (h.rx_ring_off % 16 != 0 || !inside(h.rx_ring_off, rb) || h.rx_ring_off < table_bytes) {
        return unexpected(std::string("hello: rx ring misplaced"));
    }
    if (h.tx_ring_off % 16 != 0 || !inside(h.tx_ring_off, rb) || h.tx_ring_off < table_bytes ||
        (h.tx_ring_off < h.rx_ring_off + rb && h.rx_ring_off < h.tx_ring_off + rb)) {
        return unexpected(std::string("hello: tx ring misplaced"));
    }
    if (h.data_bytes == 0 || h.data_bytes > kMaxDataBytes ||
        h.data_bytes % mem::kGrantPageBytes != 0) {
        return unexpected(std::string("hello: data_bytes not whole pages up to 1 GiB"));
    }
    if (nfds != kHelloFds) {
        return unexpected("hello: " + std::to_string(nfds) + " fds, want " +
                          std::to_string(static_cast<std::size_t>(kHelloFds)));
    }
    return h;
}

Status<std::string> send_msg(int sock, std::span<const std::byte> msg, std::span<const int> fds) {
    if (fds.size() > kMaxFds) return unexpected(std::string("too many fds"));
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)]{};
    iovec iov{const_cast<std::byte*>(msg.data()), msg.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    put_rights(mh, cbuf, fds);
    for (;;) {
        if (::sendmsg(sock, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size())) return {};
        if (errno != EINTR) return unexpected(errno_text("sendmsg"));
    }
}

Result<std::vector<std::byte>, std::string> recv_msg(int sock, std::size_t max,
                                                     std::vector<int>& fds, int timeout_ms) {
    pollfd p{sock, POLLIN, 0};
    int r;
    do {
        r = ::poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return unexpected(errno_text("poll"));
    if (r == 0) return unexpected(std::string("timed out waiting for the peer's message"));
    // One byte more than allowed: a longer message shows as MSG_TRUNC.
    std::vector<std::byte> buf(max + 1);
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
    iovec iov{buf.data(), buf.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    ssize_t n;
    do {
        n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return unexpected(errno_text("recvmsg"));
    take_rights(mh, fds);
    const auto close_fds = [&] {
        for (const int fd : fds) ::close(fd);
        fds.clear();
    };
    if (n == 0) {
        close_fds();
        return unexpected(std::string("peer closed the connection"));
    }
    if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        close_fds();
        return unexpected(std::string("message or its fds too long"));
    }
    buf.resize(static_cast<std::size_t>(n));
    return buf;
}

}  // namespace pvnet::grant
