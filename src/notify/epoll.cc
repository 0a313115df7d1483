// epoll(7) wrapper for event-mode loops.
#include "pvnet/notify/epoll.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace pvnet::notify {

Result<Epoll, NotifyError> Epoll::create() noexcept {
    const int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) {
        std::fprintf(stderr, "pvnet notify: epoll_create1: %s\n", std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    return Epoll(fd);
}

Epoll::Epoll(Epoll&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

Epoll& Epoll::operator=(Epoll&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) close(fd_);
        fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
}

Epoll::~Epoll() {
    if (fd_ >= 0) close(fd_);
}

Status<NotifyError> Epoll::add(int fd, uint32_t tag) noexcept {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    if (epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        std::fprintf(stderr, "pvnet notify: epoll_ctl: %s\n", std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    return {};
}

Status<NotifyError> Epoll::modify(int fd, uint32_t tag, bool readable) noexcept {
    epoll_event ev{};
    ev.events = readable ? EPOLLIN : 0u;
    ev.data.u32 = tag;
    if (epoll_ctl(fd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
        std::fprintf(stderr, "pvnet notify: epoll_ctl mod: %s\n", std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    return {};
}

std::size_t Epoll::wait(std::span<uint32_t> tags, int timeout_ms) noexcept {
    std::array<epoll_event, 16> ev;
    const int max = static_cast<int>(std::min(tags.size(), ev.size()));
    int n;
    do {
        n = epoll_wait(fd_, ev.data(), max, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return 0;
    for (int i = 0; i < n; ++i) tags[static_cast<std::size_t>(i)] = ev[static_cast<std::size_t>(i)].data.u32;
    return static_cast<std::size_t>(n);
}

}  // namespace pvnet::notify
