// Clocks: CLOCK_MONOTONIC for deadlines and intervals, a thread's CPU time,
// and sleeping (the benches' wait between samples).
#pragma once

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <thread>

namespace pvnet {

/// Clock `c` in nanoseconds.
inline uint64_t clock_ns(clockid_t c) noexcept {
    timespec ts{};
    clock_gettime(c, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// CLOCK_MONOTONIC in nanoseconds (a vDSO call).
inline uint64_t now_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }

/// CPU time a thread has used (CLOCK_THREAD_CPUTIME_ID of that thread); 0
/// if its clock cannot be had.
inline uint64_t thread_cpu_ns(pthread_t t) noexcept {
    clockid_t c;
    if (pthread_getcpuclockid(t, &c) != 0) return 0;
    return clock_ns(c);
}

inline void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace pvnet
