// Plain (non-index) access to ring memory the peer can write at any time.
// read_once copies into a local and stops the compiler from re-reading the
// shared bytes afterwards, so a value is validated and used as one snapshot
// (the TOCTOU rule of STYLE.md §4; Linux's READ_ONCE).
#pragma once

#include <cstring>
#include <type_traits>

namespace pvnet::ring {

template <typename T>
inline T read_once(const void* src) noexcept {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, src, sizeof v);
    asm volatile("" : : "r"(&v) : "memory");
    return v;
}

template <typename T>
inline void write_shared(void* dst, const T& v) noexcept {
    static_assert(std::is_trivially_copyable_v<T>);
    std::memcpy(dst, &v, sizeof v);
}

}  // namespace pvnet::ring
