// memfd-backed shared memory with guard pages.
#include "pvnet/mem/memory_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace pvnet::mem {
namespace {

std::size_t page_bytes() noexcept {
    static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return p;
}

std::size_t round_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) / a * a; }

void log_errno(const char* what) noexcept {
    std::fprintf(stderr, "pvnet mem: %s: %s\n", what, std::strerror(errno));
}

// Reserves guard + size + guard as PROT_NONE, then maps the fd over the middle.
bool map_guarded(int fd, std::size_t size, uint64_t offset, std::byte** reservation,
                 std::size_t* res_bytes, std::byte** host) noexcept {
    const std::size_t guard = page_bytes();
    const std::size_t total = size + 2 * guard;
    void* r = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        log_errno("mmap reservation");
        return false;
    }
    auto* base = static_cast<std::byte*>(r);
    void* m = mmap(base + guard, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                   static_cast<off_t>(offset));
    if (m == MAP_FAILED) {
        log_errno("mmap memfd");
        munmap(r, total);
        return false;
    }
    *reservation = base;
    *res_bytes = total;
    *host = base + guard;
    return true;
}

}  // namespace

Result<MemoryRegion, MemError> MemoryRegion::create(std::size_t size_bytes,
                                                    const char* name) noexcept {
    if (size_bytes == 0) return unexpected(MemError::BadRegion);
    const std::size_t size = round_up(size_bytes, page_bytes());
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        log_errno("memfd_create");
        return unexpected(MemError::SystemError);
    }
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
        log_errno("ftruncate");
        close(fd);
        return unexpected(MemError::SystemError);
    }
    auto r = map_fd(fd, size, 0);
    if (!r) close(fd);
    return r;
}

Result<MemoryRegion, MemError> MemoryRegion::map_fd(int fd, std::size_t size_bytes,
                                                    uint64_t offset) noexcept {
    if (size_bytes == 0 || offset % page_bytes() != 0) return unexpected(MemError::BadRegion);
    const std::size_t size = round_up(size_bytes, page_bytes());
    std::byte* reservation = nullptr;
    std::size_t res_bytes = 0;
    std::byte* host = nullptr;
    if (!map_guarded(fd, size, offset, &reservation, &res_bytes, &host)) {
        return unexpected(MemError::SystemError);
    }
    return MemoryRegion(fd, reservation, res_bytes, host, size);
}

MemoryRegion::MemoryRegion(MemoryRegion&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      reservation_(std::exchange(o.reservation_, nullptr)),
      reservation_bytes_(std::exchange(o.reservation_bytes_, 0)),
      host_(std::exchange(o.host_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
    if (this != &o) {
        release();
        fd_ = std::exchange(o.fd_, -1);
        reservation_ = std::exchange(o.reservation_, nullptr);
        reservation_bytes_ = std::exchange(o.reservation_bytes_, 0);
        host_ = std::exchange(o.host_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

MemoryRegion::~MemoryRegion() { release(); }

void MemoryRegion::release() noexcept {
    if (reservation_ != nullptr) munmap(reservation_, reservation_bytes_);
    if (fd_ >= 0) close(fd_);
    reservation_ = nullptr;
    host_ = nullptr;
    fd_ = -1;
}

}  // namespace pvnet::mem
