// eventfd(2) doorbells.
#include "pvnet/notify/event_fd.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace pvnet::notify {

Result<EventFd, NotifyError> EventFd::create() noexcept {
    const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        std::fprintf(stderr, "pvnet notify: eventfd: %s\n", std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    return EventFd(fd);
}

EventFd::EventFd(EventFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

EventFd& EventFd::operator=(EventFd&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) close(fd_);
        fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
}

EventFd::~EventFd() {
    if (fd_ >= 0) close(fd_);
}

void EventFd::signal() const noexcept {
    const uint64_t one = 1;
    // EAGAIN means the counter is saturated: the peer is already woken.
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof one);
}

uint64_t EventFd::consume() const noexcept {
    uint64_t v = 0;
    if (read(fd_, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return 0;
    return v;
}

bool EventFd::wait(int64_t timeout_us) const noexcept {
    pollfd p{fd_, POLLIN, 0};
    timespec ts{};
    timespec* tsp = nullptr;
    if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1'000'000;
        ts.tv_nsec = (timeout_us % 1'000'000) * 1000;
        tsp = &ts;
    }
    for (;;) {
        const int r = ppoll(&p, 1, tsp, nullptr);
        if (r >= 0) return r > 0;
        if (errno != EINTR) return false;
    }
}

}  // namespace pvnet::notify
