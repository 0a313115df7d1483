// MemoryTable: the guest-physical memory map as the backend sees it (the
// role of vhost-user's VHOST_USER_SET_MEM_TABLE). translate() is the only way
// from a peer-supplied guest address to host memory: overflow-checked, every
// byte of the range checked, one piece per region crossed (the approach of
// DPDK lib/vhost/virtio_net.c map_one_desc).
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/mem_error.h"
#include "pvnet/util/result.h"

namespace pvnet::mem {

/// One region of the map. gpa + size_bytes may be 2^64 exactly (wrapping to
/// 0 in uint64_t): compare by the last byte, gpa + (size_bytes - 1).
struct RegionMapping {
    GuestAddr gpa;
    uint64_t size_bytes = 0;
    std::byte* host = nullptr;
    Access access = Access::ReadWrite;
};

class MemoryTable {
public:
    /// vhost-user allows up to 509 regions with CONFIGURE_MEM_SLOTS; the
    /// baseline is 8. 64 covers QEMU's usual layouts with room to spare.
    static constexpr std::size_t kMaxRegions = 64;

    /// Adds a region; rejects zero size, a last byte past 2^64 - 1 and overlap
    /// (BadRegion, RegionOverlap). A region may end exactly at 2^64.
    Status<MemError> add(GuestAddr gpa, std::span<std::byte> host,
                         Access access = Access::ReadWrite) noexcept;

    /// Translates [gpa, gpa+len) into host pieces appended to `out`, one per
    /// region crossed. Returns the number of pieces written. The range may end
    /// exactly at 2^64; one whose last byte lies past 2^64 - 1 is AddrOverflow.
    Result<std::size_t, MemError> translate(GuestAddr gpa, uint64_t len, Access access,
                                            std::span<iovec> out) const noexcept;

    /// Translates a range that must lie wholly inside one region (ring parts,
    /// headers): returns its host address.
    Result<std::byte*, MemError> translate_contiguous(GuestAddr gpa, uint64_t len,
                                                      Access access) const noexcept;

    /// The region holding `gpa`, or nullptr. Lets a single-threaded user
    /// (one queue's owner) cache the region its buffers usually fall in.
    const RegionMapping* region_of(GuestAddr gpa) const noexcept {
        const std::size_t i = find(gpa.value);
        return i == n_ ? nullptr : &regions_[i];
    }

    std::size_t size() const noexcept { return n_; }
    const RegionMapping& region(std::size_t i) const noexcept { return regions_[i]; }

private:
    /// Index of the region holding `gpa`, or n_ if none.
    std::size_t find(uint64_t gpa) const noexcept;

    std::array<RegionMapping, kMaxRegions> regions_{};  // sorted by gpa
    std::size_t n_ = 0;
};

}  // namespace pvnet::mem
