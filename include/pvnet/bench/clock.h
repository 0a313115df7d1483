// Clocks of the experiments: wall time, a thread's CPU time, sleeping.
#pragma once

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <thread>

namespace pvnet::bench {

inline uint64_t now_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// CPU time a thread has used (CLOCK_THREAD_CPUTIME_ID of that thread).
inline uint64_t thread_cpu_ns(pthread_t t) noexcept {
    clockid_t c;
    if (pthread_getcpuclockid(t, &c) != 0) return 0;
    timespec ts{};
    clock_gettime(c, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace pvnet::bench
