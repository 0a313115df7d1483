// MemoryRegion: a memfd mapped shared, so two threads or two processes see
// the same bytes. The mapping is fenced by PROT_NONE guard pages on both
// sides: an access that escapes the region faults instead of reading a
// neighbour's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pvnet/mem/mem_error.h"
#include "pvnet/util/result.h"

namespace pvnet::mem {

class MemoryRegion {
public:
    /// A new zero-filled memfd of `size_bytes` (rounded up to a page), mapped.
    static Result<MemoryRegion, MemError> create(std::size_t size_bytes,
                                                 const char* name = "pvnet") noexcept;
    /// Maps `size_bytes` of an existing fd at `offset` (the other party's view).
    /// Takes ownership of `fd` on success.
    static Result<MemoryRegion, MemError> map_fd(int fd, std::size_t size_bytes,
                                                 uint64_t offset) noexcept;

    MemoryRegion(MemoryRegion&& o) noexcept;
    MemoryRegion& operator=(MemoryRegion&& o) noexcept;
    MemoryRegion(const MemoryRegion&) = delete;
    MemoryRegion& operator=(const MemoryRegion&) = delete;
    ~MemoryRegion();

    std::byte* host() const noexcept { return host_; }
    std::size_t size() const noexcept { return size_; }
    std::span<std::byte> bytes() const noexcept { return {host_, size_}; }
    int fd() const noexcept { return fd_; }

private:
    MemoryRegion(int fd, std::byte* reservation, std::size_t reservation_bytes, std::byte* host,
                 std::size_t size) noexcept
        : fd_(fd), reservation_(reservation), reservation_bytes_(reservation_bytes), host_(host),
          size_(size) {}
    void release() noexcept;

    int fd_ = -1;
    std::byte* reservation_ = nullptr;  // guard + mapping + guard
    std::size_t reservation_bytes_ = 0;
    std::byte* host_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace pvnet::mem
