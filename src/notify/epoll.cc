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

static_assert(kEpollIn == EPOLLIN && kEpollOut == EPOLLOUT && kEpollErr == EPOLLERR &&
              kEpollHup == EPOLLHUP);

namespace {
Status<NotifyError> ctl(int epfd, int op, int fd, uint32_t tag, uint32_t events) noexcept {
    epoll_event ev{};
    ev.events = events;
    ev.data.u32 = tag;
    if (epoll_ctl(epfd, op, fd, &ev) != 0) {
        std::fprintf(stderr, "pvnet notify: epoll_ctl(%d, fd %d): %s\n", op, fd,
                     std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    return {};
}
}  // namespace

Status<NotifyError> Epoll::add(int fd, uint32_t tag, uint32_t events) noexcept {
    return ctl(fd_, EPOLL_CTL_ADD, fd, tag, events);
}

Status<NotifyError> Epoll::modify(int fd, uint32_t tag, uint32_t events) noexcept {
    return ctl(fd_, EPOLL_CTL_MOD, fd, tag, events);
}

Status<NotifyError> Epoll::remove(int fd) noexcept {
    return ctl(fd_, EPOLL_CTL_DEL, fd, 0, 0);
}

std::size_t Epoll::wait(std::span<EpollEvent> out, int timeout_ms) noexcept {
    std::array<epoll_event, 16> ev;
    const int max = static_cast<int>(std::min(out.size(), ev.size()));
    int n;
    do {
        n = epoll_wait(fd_, ev.data(), max, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
        out[i] = EpollEvent{ev[i].data.u32, ev[i].events};
    }
    return static_cast<std::size_t>(n);
}

}  // namespace pvnet::notify
