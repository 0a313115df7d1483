// EventFd: the kick (driver → device) and call (device → driver) doorbells,
// as vhost's ioeventfd/irqfd. A signal that finds the counter already set
// costs one write and is merged by the kernel.
//
// An eventfd a peer also holds (one it handed over, or one of ours it was
// given) shares its file description with the peer, flags included: the
// peer can clear O_NONBLOCK at any time, and a blocking eventfd blocks a
// read of a zero count and a write that would take the count past
// 0xfffffffffffffffe. So for such fds nothing here depends on O_NONBLOCK:
// every read is preadv2(RWF_NOWAIT) (EAGAIN on an empty count, whatever the
// flags), and a signal is made by the kernel (hand_over()): an io_uring
// registered on the eventfd posts one NOP completion, and the kernel's
// eventfd_signal() saturates the count where write() would block, as
// vhost's own irqfd signalling does.
#pragma once

#include <atomic>
#include <cstdint>

#include "pvnet/util/result.h"

namespace pvnet::notify {

enum class NotifyError : uint8_t {
    SystemError,  ///< a syscall failed (errno logged)
    NotEventFd,   ///< a peer's fd that is not an eventfd
    Semaphore,    ///< a peer's kick eventfd with EFD_SEMAPHORE (every read takes 1)
    Count
};

/// How this process uses an eventfd a peer handed over.
enum class PeerUse : uint8_t {
    Kick,    ///< read and waited on here (and signalled, to requeue work)
    Notify,  ///< only signalled here (call, err)
};

class KernelSignal;

class EventFd {
public:
    static Result<EventFd, NotifyError> create() noexcept;
    /// Adopts an fd of this process's own that no peer holds.
    static EventFd adopt(int fd) noexcept { return EventFd(fd); }
    /// Adopts an fd a peer handed over (vhost-user SET_VRING_KICK/CALL/ERR),
    /// after checking what it is: NotEventFd unless an eventfd; for a Kick,
    /// Semaphore if it counts in EFD_SEMAPHORE mode (a count that never
    /// drains would keep the waiter spinning). Signalled through the kernel
    /// (hand_over()). Always takes `fd`: closed when refused.
    static Result<EventFd, NotifyError> from_peer(int fd, PeerUse use) noexcept;

    EventFd(EventFd&& o) noexcept;
    EventFd& operator=(EventFd&& o) noexcept;
    EventFd(const EventFd&) = delete;
    EventFd& operator=(const EventFd&) = delete;
    ~EventFd();

    /// Adds 1 to the counter, waking a sleeper. Never blocks.
    void signal() const noexcept;
    /// Reads and clears the counter; 0 if nothing was signalled. Never blocks.
    uint64_t consume() const noexcept;
    /// Sleeps until signalled or `timeout_us` passes (-1: no limit); does not
    /// consume. True if readable.
    bool wait(int64_t timeout_us) const noexcept;
    /// Called before the fd goes to a peer: from now on signal() is made by
    /// the kernel. Idempotent; a signal() racing with it is a plain write,
    /// safe while the peer does not have the fd yet. Without io_uring
    /// (kernel or policy) signals stay write()s on an O_NONBLOCK fd, which a
    /// peer that clears O_NONBLOCK and saturates the count can block.
    void hand_over() const noexcept;
    /// True when signal() goes through the kernel (hand_over() worked).
    bool kernel_signalled() const noexcept {
        return ks_.load(std::memory_order_acquire) != nullptr;
    }

    int fd() const noexcept { return fd_; }

private:
    explicit EventFd(int fd) noexcept : fd_(fd) {}
    void release() noexcept;
    int fd_ = -1;
    // Set once by hand_over() (const: the fd's users hold const pointers).
    mutable std::atomic<KernelSignal*> ks_{nullptr};
};

/// from_peer()'s EFD_SEMAPHORE test where /proc/self/fdinfo prints no
/// "eventfd-semaphore:" (Linux 6.1): adds 2 by signal() and reads once; a
/// semaphore read takes 1, any other the whole count. A count pending before
/// stays (as one). Public for its test.
bool semaphore_by_probe(const EventFd& e) noexcept;

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
