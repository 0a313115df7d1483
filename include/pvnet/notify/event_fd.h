// EventFd: the kick (driver → device) and call (device → driver) doorbells,
// as vhost's ioeventfd/irqfd. Non-blocking; a signal that finds the counter
// already set costs one write and is merged by the kernel.
#pragma once

#include <cstdint>

#include "pvnet/util/result.h"

namespace pvnet::notify {

enum class NotifyError : uint8_t { SystemError, Count };

class EventFd {
public:
    static Result<EventFd, NotifyError> create() noexcept;
    /// Adopts an fd received from a peer (vhost-user SET_VRING_KICK/CALL).
    static EventFd adopt(int fd) noexcept { return EventFd(fd); }

    EventFd(EventFd&& o) noexcept;
    EventFd& operator=(EventFd&& o) noexcept;
    EventFd(const EventFd&) = delete;
    EventFd& operator=(const EventFd&) = delete;
    ~EventFd();

    /// Adds 1 to the counter, waking a sleeper.
    void signal() const noexcept;
    /// Reads and clears the counter; 0 if nothing was signalled.
    uint64_t consume() const noexcept;
    /// Sleeps until signalled or `timeout_us` passes (-1: no limit); does not
    /// consume. True if readable.
    bool wait(int64_t timeout_us) const noexcept;

    int fd() const noexcept { return fd_; }

private:
    explicit EventFd(int fd) noexcept : fd_(fd) {}
    int fd_ = -1;
};

/// The four doorbells of one queue pair, owned by whoever wires the two
/// sides: kicks go driver → device, calls device → driver.
struct QueuePairFds {
    const EventFd* rx_kick = nullptr;
    const EventFd* tx_kick = nullptr;
    const EventFd* rx_call = nullptr;
    const EventFd* tx_call = nullptr;
};

/// The two doorbells of a single queue (the control virtqueue).
struct QueueFds {
    const EventFd* kick = nullptr;
    const EventFd* call = nullptr;
};

}  // namespace pvnet::notify
