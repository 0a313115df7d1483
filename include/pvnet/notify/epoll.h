// Epoll: the sleep of an event-mode loop — wait until any watched fd (kick
// eventfds, a port's fd, a wake-up eventfd) is ready. Each fd carries a
// caller-chosen tag that comes back when it fires, with what fired: an
// error or hang-up is reported even for an fd watched for nothing, so a
// caller must look at the events, not just the tag.
#pragma once

#include <cstdint>
#include <span>

#include "pvnet/notify/event_fd.h"
#include "pvnet/util/result.h"

namespace pvnet::notify {

/// epoll_event.events bits (the values of EPOLLIN, EPOLLOUT, EPOLLERR,
/// EPOLLHUP; epoll.cc checks them).
inline constexpr uint32_t kEpollIn = 0x001;
inline constexpr uint32_t kEpollOut = 0x004;
inline constexpr uint32_t kEpollErr = 0x008;
inline constexpr uint32_t kEpollHup = 0x010;

struct EpollEvent {
    uint32_t tag = 0;
    uint32_t events = 0;  ///< kEpoll* bits
};

class Epoll {
public:
    static Result<Epoll, NotifyError> create() noexcept;

    Epoll(Epoll&& o) noexcept;
    Epoll& operator=(Epoll&& o) noexcept;
    Epoll(const Epoll&) = delete;
    Epoll& operator=(const Epoll&) = delete;
    ~Epoll();

    /// Watches `fd` for `events` (level-triggered), reporting `tag`.
    Status<NotifyError> add(int fd, uint32_t tag, uint32_t events = kEpollIn) noexcept;
    /// Changes what an added `fd` is watched for (0: nothing but errors).
    Status<NotifyError> modify(int fd, uint32_t tag, uint32_t events) noexcept;
    /// Stops watching `fd` altogether (errors included).
    Status<NotifyError> remove(int fd) noexcept;
    /// Waits up to `timeout_ms` (0: just look, -1: no limit); writes ready
    /// fds' tags and events to `out` and returns how many.
    std::size_t wait(std::span<EpollEvent> out, int timeout_ms) noexcept;

private:
    explicit Epoll(int fd) noexcept : fd_(fd) {}
    int fd_ = -1;
};

}  // namespace pvnet::notify
