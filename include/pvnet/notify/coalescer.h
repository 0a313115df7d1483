// Coalescer: interrupt moderation for one queue, as VIRTIO_NET_F_NOTF_COAL
// (VIRTIO 1.3 "Notifications Coalescing") and ethtool's
// rx-frames/rx-usecs, tx-frames/tx-usecs; the backend half of seed 000
// ("vhost: interrupt coalescing support": max_coalesce_frames and
// max_coalesce_ktime per virtqueue).
//
// The owner counts the used entries it publishes. Once `max_frames` are
// pending, or `max_usecs` after the first unsignalled entry (a timerfd,
// CLOCK_MONOTONIC), whichever comes first, it is told to signal; the
// driver's own suppression (EVENT_IDX, NO_INTERRUPT) is decided after that,
// by the ring. As the spec says, the conditions hold after every entry when
// either parameter is 0, so 0/0 is "signal at once" and a frame limit
// without a time limit can never strand entries.
//
// Cost: no syscall per entry. The timer is armed once when the first entry
// of a pending batch arrives and disarmed when that batch is signalled.
#pragma once

#include <cstdint>
#include <memory>

#include "pvnet/notify/event_fd.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::notify {

/// One queue's limits (ethtool's `<dir>-frames` and `<dir>-usecs`).
struct CoalesceParams {
    uint32_t max_frames = 0;
    uint32_t max_usecs = 0;

    /// Coalescing takes effect only with both limits set ("Notifications
    /// Coalescing": with either 0, the conditions are met after every packet).
    constexpr bool active() const noexcept { return max_frames != 0 && max_usecs != 0; }
    friend constexpr bool operator==(const CoalesceParams&, const CoalesceParams&) = default;
};

/// What the owner does with the used entries it just published.
enum class CoalesceAction : uint8_t {
    Defer,   ///< keep them pending; the frame count or the timer will signal
    Signal,  ///< signal now (the ring's suppression still applies)
};

struct CoalescerStats {
    Counter signals_immediate;  ///< Signal without coalescing (inactive, or set() flushed)
    Counter signals_frames;     ///< Signal because max_frames were pending
    Counter signals_timer;      ///< Signal because max_usecs passed
    Counter deferred;           ///< on_used() calls absorbed (a signal not sent)
    Counter timer_arms;         ///< timerfd_settime arming (one per pending batch)
    Counter timer_fires;        ///< timer expirations read from the fd
};

class Coalescer {
public:
    /// Creates the timerfd (CLOCK_MONOTONIC, non-blocking, close-on-exec).
    static Result<std::unique_ptr<Coalescer>, NotifyError> create(CoalesceParams p) noexcept;

    Coalescer(const Coalescer&) = delete;
    Coalescer& operator=(const Coalescer&) = delete;
    ~Coalescer();

    /// `n` used entries were published. Signal when coalescing is off or
    /// max_frames are now pending; otherwise Defer (arming the timer if
    /// these are the first pending entries). n == 0 changes nothing.
    CoalesceAction on_used(uint32_t n) noexcept;
    /// The timer fd was readable: consumes it. Signal if it really expired
    /// (not disarmed meanwhile) and entries are pending.
    CoalesceAction on_timer() noexcept;
    /// New limits (owner thread). Pending entries are flushed: Signal if
    /// there were any, and the timer is disarmed.
    CoalesceAction set(CoalesceParams p) noexcept;

    CoalesceParams params() const noexcept { return params_; }
    /// Used entries published since the last Signal.
    uint32_t pending() const noexcept { return pending_; }
    /// now_ns() time (util/clock.h) at which the armed timer expires; 0 when
    /// disarmed. Lets a busy-polling owner stop spinning in time.
    uint64_t deadline_ns() const noexcept { return deadline_ns_; }
    /// Readable when the timer expired; watch it in the owner's epoll.
    int timer_fd() const noexcept { return fd_; }
    const CoalescerStats& stats() const noexcept { return stats_; }

private:
    Coalescer(int fd, CoalesceParams p) noexcept : fd_(fd), params_(p) {}
    void arm() noexcept;
    void disarm() noexcept;
    CoalesceAction signal(Counter& why) noexcept;

    int fd_ = -1;
    CoalesceParams params_;
    uint32_t pending_ = 0;
    uint64_t deadline_ns_ = 0;  ///< 0: timer disarmed
    CoalescerStats stats_;
};

}  // namespace pvnet::notify
