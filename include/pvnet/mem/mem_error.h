// Errors of the mem layer: what the peer's address did, or what the system
// refused.
#pragma once

#include <cstdint>
#include <string_view>

namespace pvnet::mem {

enum class MemError : uint8_t {
    AddrUnmapped,     ///< some byte of the range lies in no region
    AddrOverflow,     ///< addr + len wraps past 2^64
    ZeroLength,       ///< a range of zero bytes where data is needed
    CrossesRegion,    ///< the range must lie wholly inside one region
    TooManyPieces,    ///< more regions crossed than the caller has room for
    AccessDenied,     ///< write to a read-only region
    RegionOverlap,    ///< a new region overlaps an existing one
    TooManyRegions,   ///< table full
    BadRegion,        ///< zero size, unaligned offset, or the region's last byte past 2^64 - 1
    BadFd,            ///< not an open read-write regular file (memfd), or sealed against writes
    FdTooShort,       ///< the file is shorter than offset + size: touching the tail would SIGBUS
    SystemError,      ///< memfd_create / mmap / ftruncate / sealing failed (errno logged)
    Count
};

constexpr std::string_view to_string(MemError e) noexcept {
    switch (e) {
        case MemError::AddrUnmapped: return "address not in any memory region";
        case MemError::AddrOverflow: return "address + length overflows";
        case MemError::ZeroLength: return "zero length";
        case MemError::CrossesRegion: return "range crosses a region boundary";
        case MemError::TooManyPieces: return "range spans too many regions";
        case MemError::AccessDenied: return "access not permitted by region";
        case MemError::RegionOverlap: return "region overlaps an existing region";
        case MemError::TooManyRegions: return "too many memory regions";
        case MemError::BadRegion: return "region size zero, offset unaligned or end overflowing";
        case MemError::BadFd: return "fd is not a writable regular file or memfd";
        case MemError::FdTooShort: return "file shorter than offset + size";
        case MemError::SystemError: return "system call failed";
        case MemError::Count: break;
    }
    return "unknown";
}

}  // namespace pvnet::mem
