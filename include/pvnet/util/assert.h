// PVNET_ASSERT guards pvnet's own invariants, never a peer-supplied value.
// Fatal in debug, sanitizer and fuzz builds; in release it logs and yields
// false so the caller can mark its queue broken instead of crashing a process
// that serves many queues.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace pvnet::detail {

[[gnu::cold]] inline bool assert_failed(const char* expr, const char* file, int line) noexcept {
    std::fprintf(stderr, "pvnet: internal check failed: %s at %s:%d\n", expr, file, line);
#if defined(PVNET_ASSERT_FATAL)
    std::abort();
#else
    return false;
#endif
}

}  // namespace pvnet::detail

#define PVNET_ASSERT(cond) \
    ((cond) ? true : ::pvnet::detail::assert_failed(#cond, __FILE__, __LINE__))
