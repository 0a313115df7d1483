// The listening socket of vhost-user's server side (unix_socket.h).
#include "pvnet/vhost_user/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pvnet::vhost_user {

std::optional<sockaddr_un> unix_addr(const std::string& path) noexcept {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof a.sun_path) return std::nullopt;
    std::memcpy(a.sun_path, path.data(), path.size());
    return a;
}

Result<int, std::string> listen_unix(const std::string& path, bool nonblock, int backlog) {
    const auto addr = unix_addr(path);
    if (!addr) return unexpected("vhost-user socket path '" + path + "' is empty or too long");
    const auto* sa = reinterpret_cast<const sockaddr*>(&*addr);
    struct stat st{};
    if (::lstat(path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            return unexpected("vhost-user socket path '" + path +
                              "' exists and is not a socket; not removing it");
        }
        // A socket nobody listens on is stale (a previous run's). The probe is
        // non-blocking: a listener that never accepts, its backlog full, answers
        // EAGAIN at once where a blocking connect() would wait without end.
        const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (probe < 0) {
            return unexpected("vhost-user socket '" + path + "': " + std::strerror(errno));
        }
        const int rc = ::connect(probe, sa, sizeof *addr);
        const int e = rc == 0 ? 0 : errno;
        ::close(probe);
        if (rc == 0 || e == EAGAIN) {
            return unexpected("vhost-user socket '" + path + "' is in use" +
                              (rc == 0 ? "" : " (its listener accepts nothing: backlog full)"));
        }
        // Only "nobody listens" proves it stale; anything else (EACCES) leaves it alone.
        if (e != ECONNREFUSED && e != ENOENT) {
            return unexpected("vhost-user socket '" + path + "': probing it: " +
                              std::strerror(e) + "; not removing it");
        }
        ::unlink(path.c_str());
    }
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) return unexpected("vhost-user socket '" + path + "': " + std::strerror(errno));
    if (::bind(fd, sa, sizeof *addr) != 0) {
        const int e = errno;
        ::close(fd);
        return unexpected("vhost-user socket '" + path + "': " + std::strerror(e));
    }
    if (::listen(fd, backlog) != 0) {
        const int e = errno;
        ::close(fd);
        ::unlink(path.c_str());
        return unexpected("vhost-user socket '" + path + "': listen: " + std::strerror(e));
    }
    return fd;
}

}  // namespace pvnet::vhost_user
