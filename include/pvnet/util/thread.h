// Thread placement for workers and benchmarks.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <cstddef>

namespace pvnet {

/// Pins the calling thread to `cpu`; -1 leaves it to the scheduler.
inline void pin_current_thread(int cpu) noexcept {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<std::size_t>(cpu), &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace pvnet
