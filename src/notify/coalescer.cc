// Coalescer: frame count and timerfd(2) deadline for one queue's interrupts.
#include "pvnet/notify/coalescer.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include "pvnet/util/clock.h"

namespace pvnet::notify {

Result<std::unique_ptr<Coalescer>, NotifyError> Coalescer::create(CoalesceParams p) noexcept {
    const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) {
        std::fprintf(stderr, "pvnet notify: timerfd_create: %s\n", std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    std::unique_ptr<Coalescer> c(new (std::nothrow) Coalescer(fd, p));
    if (!c) {
        close(fd);
        return unexpected(NotifyError::SystemError);
    }
    return c;
}

Coalescer::~Coalescer() {
    if (fd_ >= 0) close(fd_);
}

void Coalescer::arm() noexcept {
    const uint64_t ns = uint64_t{params_.max_usecs} * 1000u;
    itimerspec its{};
    its.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
    its.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
    // Relative: the deadline counts from the first unsignalled entry (now).
    if (timerfd_settime(fd_, 0, &its, nullptr) != 0) {
        // Cannot happen with a valid fd and value; signalling at once keeps
        // the entries from waiting for a timer that will never fire.
        deadline_ns_ = 0;
        return;
    }
    deadline_ns_ = now_ns() + ns;
    stats_.timer_arms.add();
}

void Coalescer::disarm() noexcept {
    if (deadline_ns_ == 0) return;
    // A zero it_value disarms and also clears expirations not yet read, so
    // a stale readable fd gives on_timer() nothing (timerfd_settime(2)).
    const itimerspec its{};
    (void)timerfd_settime(fd_, 0, &its, nullptr);
    deadline_ns_ = 0;
}

CoalesceAction Coalescer::signal(Counter& why) noexcept {
    pending_ = 0;
    disarm();
    why.add();
    return CoalesceAction::Signal;
}

CoalesceAction Coalescer::on_used(uint32_t n) noexcept {
    if (n == 0) return CoalesceAction::Defer;
    if (!params_.active()) return signal(stats_.signals_immediate);
    // The interrupt covers everything published so far: count from 0 after
    // it, do not carry a remainder.
    pending_ += n;
    if (pending_ >= params_.max_frames) return signal(stats_.signals_frames);
    if (deadline_ns_ == 0) {
        arm();
        if (deadline_ns_ == 0) return signal(stats_.signals_immediate);
    }
    stats_.deferred.add();
    return CoalesceAction::Defer;
}

CoalesceAction Coalescer::on_timer() noexcept {
    uint64_t expirations = 0;
    // EAGAIN: the timer was disarmed (a frame-count signal or set()) after
    // epoll saw it readable; nothing expired for the current batch.
    if (read(fd_, &expirations, sizeof expirations) != static_cast<ssize_t>(sizeof expirations)) {
        return CoalesceAction::Defer;
    }
    stats_.timer_fires.add();
    deadline_ns_ = 0;  // a one-shot timer that expired is disarmed
    if (pending_ == 0) return CoalesceAction::Defer;
    return signal(stats_.signals_timer);
}

CoalesceAction Coalescer::set(CoalesceParams p) noexcept {
    params_ = p;
    if (pending_ == 0) {
        disarm();
        return CoalesceAction::Defer;
    }
    // Entries held under the old limits are not held longer under new ones.
    return signal(stats_.signals_immediate);
}

}  // namespace pvnet::notify
