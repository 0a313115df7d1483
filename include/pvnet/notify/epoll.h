// Epoll: the sleep of an event-mode loop — wait until any watched fd (kick
// eventfds, a port's fd, a wake-up eventfd) is readable. Each fd carries a
// caller-chosen tag that comes back when it fires.
#pragma once

#include <cstdint>
#include <span>

#include "pvnet/notify/event_fd.h"
#include "pvnet/util/result.h"

namespace pvnet::notify {

class Epoll {
public:
    static Result<Epoll, NotifyError> create() noexcept;

    Epoll(Epoll&& o) noexcept;
    Epoll& operator=(Epoll&& o) noexcept;
    Epoll(const Epoll&) = delete;
    Epoll& operator=(const Epoll&) = delete;
    ~Epoll();

    /// Watches `fd` for readability (level-triggered), reporting `tag`.
    Status<NotifyError> add(int fd, uint32_t tag) noexcept;
    /// Watches an added `fd` for readability again (`readable`) or for
    /// nothing: it stays registered and only an error or hang-up (which
    /// epoll always reports) ends a wait.
    Status<NotifyError> modify(int fd, uint32_t tag, bool readable) noexcept;
    /// Waits up to `timeout_ms` (0: just look, -1: no limit); writes the tags
    /// of ready fds to `tags` and returns how many.
    std::size_t wait(std::span<uint32_t> tags, int timeout_ms) noexcept;

private:
    explicit Epoll(int fd) noexcept : fd_(fd) {}
    int fd_ = -1;
};

}  // namespace pvnet::notify
