// Little-endian wire integers (VIRTIO 1.2 "Basic Facilities": all fields of a
// modern device are little-endian). get()/set() convert; the raw bytes are
// never used as a host integer directly.
#pragma once

#include <bit>
#include <cstdint>

namespace pvnet::virtio {

template <typename T>
constexpr T le_to_host(T v) noexcept {
    if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
        return v;
    } else if constexpr (sizeof(T) == 2) {
        return static_cast<T>(__builtin_bswap16(v));
    } else if constexpr (sizeof(T) == 4) {
        return static_cast<T>(__builtin_bswap32(v));
    } else {
        return static_cast<T>(__builtin_bswap64(v));
    }
}

template <typename T>
constexpr T host_to_le(T v) noexcept {
    return le_to_host(v);
}

template <typename T>
struct Le {
    T raw;
    constexpr T get() const noexcept { return le_to_host(raw); }
    constexpr void set(T v) noexcept { raw = host_to_le(v); }
};

using Le16 = Le<uint16_t>;
using Le32 = Le<uint32_t>;
using Le64 = Le<uint64_t>;

static_assert(sizeof(Le16) == 2 && sizeof(Le32) == 4 && sizeof(Le64) == 8);

}  // namespace pvnet::virtio
