// Guest-physical to host translation with every bound checked.
#include "pvnet/mem/memory_table.h"

#include <algorithm>

namespace pvnet::mem {

Status<MemError> MemoryTable::add(GuestAddr gpa, std::span<std::byte> host,
                                  Access access) noexcept {
    const uint64_t size = host.size();
    uint64_t last = 0;
    // Rule: the region's last byte is addressable, gpa + size - 1 <= 2^64 - 1.
    // Its end, gpa + size, may be 2^64 exactly (the top page is mappable), so
    // regions are compared by last byte, never by end.
    if (size == 0 || host.data() == nullptr || __builtin_add_overflow(gpa.value, size - 1, &last)) {
        return unexpected(MemError::BadRegion);
    }
    if (n_ == kMaxRegions) return unexpected(MemError::TooManyRegions);
    for (std::size_t i = 0; i < n_; ++i) {
        const RegionMapping& r = regions_[i];
        // Inclusive last bytes: r.gpa + r.size_bytes - 1 did not overflow on its add.
        const uint64_t r_last = r.gpa.value + (r.size_bytes - 1);
        if (gpa.value <= r_last && r.gpa.value <= last) return unexpected(MemError::RegionOverlap);
    }
    std::size_t pos = 0;
    while (pos < n_ && regions_[pos].gpa < gpa) ++pos;
    std::move_backward(regions_.begin() + static_cast<std::ptrdiff_t>(pos),
                       regions_.begin() + static_cast<std::ptrdiff_t>(n_),
                       regions_.begin() + static_cast<std::ptrdiff_t>(n_ + 1));
    regions_[pos] = RegionMapping{gpa, size, host.data(), access};
    ++n_;
    return {};
}

std::size_t MemoryTable::find(uint64_t gpa) const noexcept {
    for (std::size_t i = 0; i < n_; ++i) {
        const RegionMapping& r = regions_[i];
        if (gpa >= r.gpa.value && gpa - r.gpa.value < r.size_bytes) return i;
    }
    return n_;
}

Result<std::size_t, MemError> MemoryTable::translate(GuestAddr gpa, uint64_t len, Access access,
                                                     std::span<iovec> out) const noexcept {
    if (len == 0) return unexpected(MemError::ZeroLength);
    uint64_t last = 0;
    // Rule: the last byte, addr + len - 1, must not wrap (CVE-2018-1059-style
    // length tricks); a range may end exactly at 2^64.
    if (__builtin_add_overflow(gpa.value, len - 1, &last)) {
        return unexpected(MemError::AddrOverflow);
    }
    std::size_t pieces = 0;
    uint64_t addr = gpa.value;
    uint64_t left = len;
    while (left > 0) {
        const std::size_t i = find(addr);
        if (i == n_) return unexpected(MemError::AddrUnmapped);
        const RegionMapping& r = regions_[i];
        if (!allows(r.access, access)) return unexpected(MemError::AccessDenied);
        if (pieces == out.size()) return unexpected(MemError::TooManyPieces);
        const uint64_t off = addr - r.gpa.value;
        const uint64_t chunk = std::min(left, r.size_bytes - off);
        out[pieces++] = iovec{r.host + off, static_cast<std::size_t>(chunk)};
        left -= chunk;
        if (left == 0) break;
        // Cannot wrap: addr + left - 1 == last was checked, and left > 0 here
        // (a range ending at 2^64 stops above instead of wrapping to 0).
        addr += chunk;
    }
    return pieces;
}

Result<std::byte*, MemError> MemoryTable::translate_contiguous(GuestAddr gpa, uint64_t len,
                                                               Access access) const noexcept {
    iovec piece{};
    auto r = translate(gpa, len, access, std::span<iovec>(&piece, 1));
    if (!r) {
        return unexpected(r.error() == MemError::TooManyPieces ? MemError::CrossesRegion
                                                                : r.error());
    }
    return static_cast<std::byte*>(piece.iov_base);
}

}  // namespace pvnet::mem
