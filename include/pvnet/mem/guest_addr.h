// GuestAddr: an address in the frontend's (guest's) physical address space.
// A strong type so a guest address never passes for a host pointer.
#pragma once

#include <compare>
#include <cstdint>

namespace pvnet::mem {

struct GuestAddr {
    uint64_t value = 0;

    constexpr GuestAddr() = default;
    constexpr explicit GuestAddr(uint64_t v) : value(v) {}
    constexpr auto operator<=>(const GuestAddr&) const = default;
    /// Offsetting may wrap; translate() is where overflow is checked.
    constexpr GuestAddr operator+(uint64_t off) const { return GuestAddr{value + off}; }
};

enum class Access : uint8_t { Read = 1, Write = 2, ReadWrite = 3 };

constexpr bool allows(Access have, Access want) noexcept {
    return (static_cast<uint8_t>(have) & static_cast<uint8_t>(want)) == static_cast<uint8_t>(want);
}

}  // namespace pvnet::mem
