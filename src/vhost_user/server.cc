// The socket side of vhost_user::Server: listen (or connect), one front-end
// at a time, each message read whole with its fds under a stall deadline,
// handed to a BackendSession, its reply written back.
#include "pvnet/vhost_user/server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "pvnet/util/fd_passing.h"
#include "pvnet/vhost_user/backend_session.h"
#include "pvnet/vhost_user/unix_socket.h"

namespace pvnet::vhost_user {

namespace {

using Clock = std::chrono::steady_clock;

/// poll() until `fd` has `events`, the stop fd fires or `deadline` passes.
enum class Wait : uint8_t { Ready, Stop, Timeout, Error };
Wait wait_fd(int fd, short events, int stop_fd, Clock::time_point deadline) noexcept {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                                 Clock::now());
        if (left.count() <= 0) return Wait::Timeout;
        pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
        const int n = ::poll(p, 2, static_cast<int>(std::min<int64_t>(left.count() + 1, 60000)));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Wait::Error;
        if ((p[1].revents & POLLIN) != 0) return Wait::Stop;
        if (p[0].revents != 0) return Wait::Ready;
    }
}

}  // namespace

struct Server::Impl {
    ServerConfig cfg;
    backend::NetDevice& dev;
    SessionStats stats;
    int listen_fd = -1;
    int stop_fd = -1;
    bool created_file = false;
    std::thread thread;
    std::atomic<bool> connected{false};
    std::atomic<uint16_t> mtu{0};

    Impl(const ServerConfig& c, backend::NetDevice& d) : cfg(c), dev(d) {}
    ~Impl() {
        if (listen_fd >= 0) ::close(listen_fd);
        if (stop_fd >= 0) ::close(stop_fd);
    }

    bool stopping() const noexcept {
        pollfd p{stop_fd, POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }
    void run() noexcept;
    int next_connection() noexcept;
    void serve(int conn) noexcept;
    enum class Read : uint8_t { Ok, Eof, Close, Stop };
    /// Reads `len` bytes and their fds. `deadline` is set when a message's
    /// first byte arrives (epoch: none yet, wait idle without one).
    Read read_exact(int conn, std::byte* buf, std::size_t len, std::vector<int>& fds,
                    Clock::time_point& deadline) noexcept;
    /// Accepts and closes a second front-end; false when accept fails (the
    /// listening socket is then left unwatched for this session, no spin).
    bool reject_busy() noexcept;
    bool watch_listen = true;
    /// Sends `len` bytes; `fd` (when >= 0) rides with the first of them (SCM_RIGHTS).
    bool write_all(int conn, const std::byte* buf, std::size_t len, int fd) noexcept;
};

Result<std::unique_ptr<Server>, std::string> Server::create(const ServerConfig& cfg,
                                                            backend::NetDevice& dev) {
    auto impl = std::make_unique<Impl>(cfg, dev);
    const auto addr = unix_addr(cfg.path);
    if (!addr) {
        return unexpected("vhost-user socket path '" + cfg.path + "' is empty or too long");
    }
    impl->stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (impl->stop_fd < 0) return unexpected(std::string("eventfd: ") + std::strerror(errno));
    if (!cfg.client) {
        auto fd = listen_unix(cfg.path, true, 4);
        if (!fd) return unexpected(fd.error());
        impl->listen_fd = *fd;
        impl->created_file = true;
    }
    return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

Server::~Server() {
    stop();
    if (impl_->created_file) ::unlink(impl_->cfg.path.c_str());
}

void Server::start() {
    if (impl_->thread.joinable()) return;
    impl_->thread = std::thread([this] { impl_->run(); });
}

void Server::stop() noexcept {
    const uint64_t one = 1;
    (void)!::write(impl_->stop_fd, &one, sizeof one);
    if (impl_->thread.joinable()) impl_->thread.join();
    if (impl_->created_file) {
        ::unlink(impl_->cfg.path.c_str());
        impl_->created_file = false;
    }
}

const SessionStats& Server::stats() const noexcept { return impl_->stats; }
bool Server::connected() const noexcept { return impl_->connected.load(); }
uint16_t Server::mtu() const noexcept { return impl_->mtu.load(); }
const std::string& Server::path() const noexcept { return impl_->cfg.path; }

void Server::Impl::run() noexcept {
    while (!stopping()) {
        const int conn = next_connection();
        if (conn < 0) continue;
        stats.connections.add();
        connected = true;
        watch_listen = true;
        mtu = 0;
        serve(conn);
        // Counted before the close the front-end sees (the session is already gone).
        connected = false;
        stats.disconnects.add();
        ::close(conn);
    }
}

int Server::Impl::next_connection() noexcept {
    if (cfg.client) {
        const auto addr = unix_addr(cfg.path);
        // Non-blocking: a front-end whose backlog is full answers EAGAIN, not a wait.
        const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s >= 0 && ::connect(s, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) == 0) {
            return s;
        }
        if (s >= 0) ::close(s);
        pollfd p{stop_fd, POLLIN, 0};
        (void)::poll(&p, 1, static_cast<int>(cfg.retry_ms));
        return -1;
    }
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(p, 2, -1) <= 0 || (p[1].revents & POLLIN) != 0) return -1;
    const int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0 && errno != EAGAIN && errno != EINTR) {
        // Out of fds (EMFILE) leaves the socket readable: back off instead of spinning.
        pollfd sp{stop_fd, POLLIN, 0};
        (void)::poll(&sp, 1, static_cast<int>(cfg.retry_ms));
    }
    return c;
}

bool Server::Impl::reject_busy() noexcept {
    const int extra = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (extra < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    stats.busy_rejected.add();  // before the close the rejected peer sees
    ::close(extra);
    return true;
}

Server::Impl::Read Server::Impl::read_exact(int conn, std::byte* buf, std::size_t len,
                                            std::vector<int>& fds,
                                            Clock::time_point& deadline) noexcept {
    std::size_t got = 0;
    bool ctrunc = false;
    while (got < len) {
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
        iovec iov{buf + got, len - got};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        const ssize_t n = ::recvmsg(conn, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n > 0) {
            take_rights(mh, fds);
            if ((mh.msg_flags & MSG_CTRUNC) != 0) ctrunc = true;
            if (deadline == Clock::time_point{}) {
                deadline = Clock::now() + std::chrono::milliseconds(cfg.stall_ms);
            }
            got += static_cast<std::size_t>(n);
            continue;
        }
        if (n == 0) return deadline == Clock::time_point{} ? Read::Eof : Read::Close;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return Read::Close;
        if (deadline == Clock::time_point{}) {
            // Idle between messages: wait without a deadline, but wake for stop()
            // and for a second front-end knocking.
            pollfd p[3] = {{conn, POLLIN, 0}, {stop_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}};
            const nfds_t np = listen_fd >= 0 && watch_listen ? 3 : 2;
            if (::poll(p, np, -1) < 0 && errno != EINTR) return Read::Close;
            if ((p[1].revents & POLLIN) != 0) return Read::Stop;
            // Busy only while the current front-end is alive: one that hung up (or
            // sent more) is read first, so a reconnect right after a close waits in
            // the backlog for the next session instead of being reset.
            if (np == 3 && p[0].revents == 0 && (p[2].revents & POLLIN) != 0) {
                watch_listen = reject_busy();
            }
            continue;
        }
        const Wait w = wait_fd(conn, POLLIN, stop_fd, deadline);
        if (w == Wait::Stop) return Read::Stop;
        if (w == Wait::Timeout) {
            stats.stalled.add();
            return Read::Close;
        }
        if (w == Wait::Error) return Read::Close;
    }
    if (ctrunc) {
        stats.bad_fds.add();
        return Read::Close;
    }
    return Read::Ok;
}

bool Server::Impl::write_all(int conn, const std::byte* buf, std::size_t len, int fd) noexcept {
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg.stall_ms);
    std::size_t done = 0;
    while (done < len) {
        iovec iov{const_cast<std::byte*>(buf + done), len - done};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
        if (fd >= 0) put_rights(mh, cbuf, std::span(&fd, 1));
        const ssize_t n = ::sendmsg(conn, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            fd = -1;  // sent with those bytes
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        const Wait w = wait_fd(conn, POLLOUT, stop_fd, deadline);
        if (w == Wait::Timeout) stats.stalled.add();
        if (w != Wait::Ready) return false;
    }
    return true;
}

void Server::Impl::serve(int conn) noexcept {
    BackendSession session(dev, cfg, stats);
    std::vector<int> fds;
    fds.reserve(2 * kMaxFds);
    std::array<std::byte, kMaxPayload> payload{};
    const auto close_all = [&fds] {
        for (const int fd : fds) ::close(fd);
        fds.clear();
    };
    for (;;) {
        MsgHeader h;
        Clock::time_point deadline{};
        Read r = read_exact(conn, reinterpret_cast<std::byte*>(&h), sizeof h, fds, deadline);
        if (r == Read::Ok && !session.header_ok(h)) r = Read::Close;
        if (r == Read::Ok && h.size != 0) {
            r = read_exact(conn, payload.data(), h.size, fds, deadline);
        }
        if (r != Read::Ok) {
            close_all();
            return;
        }
        // handle() owns the fds from here, kept or closed.
        const Outcome out = session.handle(h, std::span(payload.data(), h.size), fds);
        fds.clear();
        mtu = session.mtu();
        if (out.reply_len != 0 && !write_all(conn, out.reply.data(), out.reply_len, out.reply_fd)) {
            return;
        }
        if (out.close) return;
    }
}

}  // namespace pvnet::vhost_user
