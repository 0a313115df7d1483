// MemoryRegion: a memfd mapped shared, so two threads or two processes see
// the same bytes. The mapping is fenced by PROT_NONE guard pages on both
// sides: an access that escapes the region faults instead of reading a
// neighbour's memory.
//
// A shared file mapped past its end raises SIGBUS on access, so a mapping is
// made only over bytes the file has (checked with fstat), and the memfds pvnet
// creates are sealed against shrinking (memfd_create(2), "File sealing"), so a
// peer cannot truncate them under the mapping later. Peer fds that are not
// sealed (QEMU's are not) are mapped anyway; sealed_against_shrink() reports
// which kind the mapping is, for the vhost-user layer to decide.
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
    /// The memfd is sealed with F_SEAL_SHRINK | F_SEAL_SEAL: it may grow, never
    /// shrink, and nobody (a peer it is sent to included) can add seals.
    /// BadRegion for zero or a size beyond off_t.
    static Result<MemoryRegion, MemError> create(std::size_t size_bytes,
                                                 const char* name = "pvnet") noexcept;
    /// Maps `size_bytes` (rounded up to map_granule(fd)) of `fd` at `offset`
    /// (the other party's view). Always takes ownership of `fd`: it is kept by the region
    /// on success and closed on failure, so callers pass `dup(fd)`.
    /// Nothing is mapped when it fails with
    ///   BadRegion  - size zero or beyond off_t, offset not granule-aligned,
    ///                offset + size overflows;
    ///   BadFd      - fd not open, not a regular file on tmpfs (a memfd) or
    ///                hugetlbfs, not O_RDWR, or sealed against writes;
    ///   FdTooShort - the file's st_size < offset + size_bytes.
    static Result<MemoryRegion, MemError> map_fd(int fd, std::size_t size_bytes,
                                                 uint64_t offset) noexcept;
    /// The unit `fd` maps in: a page, or on hugetlbfs the huge page size
    /// (offsets and sizes of its mappings are multiples of it). 0: not a file
    /// on tmpfs (memfds are) or hugetlbfs, which map_fd refuses.
    static std::size_t map_granule(int fd) noexcept;

    MemoryRegion(MemoryRegion&& o) noexcept;
    MemoryRegion& operator=(MemoryRegion&& o) noexcept;
    MemoryRegion(const MemoryRegion&) = delete;
    MemoryRegion& operator=(const MemoryRegion&) = delete;
    ~MemoryRegion();

    std::byte* host() const noexcept { return host_; }
    std::size_t size() const noexcept { return size_; }
    std::span<std::byte> bytes() const noexcept { return {host_, size_}; }
    int fd() const noexcept { return fd_; }
    /// True when the file carried F_SEAL_SHRINK at map time: the peer cannot
    /// truncate it under the mapping. False when unsealed or when the file
    /// system has no seals (F_GET_SEALS failed). Always true for create().
    bool sealed_against_shrink() const noexcept { return sealed_against_shrink_; }

private:
    MemoryRegion(int fd, std::byte* reservation, std::size_t reservation_bytes, std::byte* host,
                 std::size_t size, bool sealed_against_shrink) noexcept
        : fd_(fd), reservation_(reservation), reservation_bytes_(reservation_bytes), host_(host),
          size_(size), sealed_against_shrink_(sealed_against_shrink) {}
    /// map_fd's checks and mapping; the caller closes `fd` when it fails.
    static Result<MemoryRegion, MemError> map_owned(int fd, std::size_t size_bytes,
                                                    uint64_t offset) noexcept;
    void release() noexcept;

    int fd_ = -1;
    std::byte* reservation_ = nullptr;  // guard + mapping + guard
    std::size_t reservation_bytes_ = 0;
    std::byte* host_ = nullptr;
    std::size_t size_ = 0;
    bool sealed_against_shrink_ = false;
};

}  // namespace pvnet::mem
