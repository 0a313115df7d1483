// memfd-backed shared memory with guard pages, sealed and size-checked so a
// mapping never runs past the end of its file (memfd_create(2), mmap(2)
// "SIGBUS": an access to a page beyond the end of the file).
#include "pvnet/mem/memory_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace pvnet::mem {
namespace {

std::size_t page_bytes() noexcept {
    static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return p;
}

/// Callers keep `v` <= max_map_bytes(), so this cannot wrap.
std::size_t round_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) / a * a; }

/// The largest mapping: a file offset is an off_t, and the guard pages must
/// still fit in a size_t. Anything larger cannot be backed by a file anyway.
std::size_t max_map_bytes() noexcept {
    return static_cast<std::size_t>(std::numeric_limits<off_t>::max()) - 2 * page_bytes();
}

void log_errno(const char* what) noexcept {
    std::fprintf(stderr, "pvnet mem: %s: %s\n", what, std::strerror(errno));
}

/// Seals that make a shared writable mapping fail (EPERM).
#ifdef F_SEAL_FUTURE_WRITE
constexpr int kWriteSeals = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
#else
constexpr int kWriteSeals = F_SEAL_WRITE;
#endif

// Reserves guard + size + guard as PROT_NONE (the guards a granule each, so
// that the mapping starts on one: hugetlbfs maps only at huge-page-aligned
// addresses), then maps the fd over the middle.
bool map_guarded(int fd, std::size_t size, uint64_t offset, std::size_t granule,
                 std::byte** reservation, std::size_t* res_bytes, std::byte** host) noexcept {
    const std::size_t slack = granule - page_bytes();  // to align the mapping's start
    const std::size_t total = size + 2 * granule + slack;  // size <= max_map_bytes(): no wrap
    void* r = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        log_errno("mmap reservation");
        return false;
    }
    auto* base = static_cast<std::byte*>(r);
    const auto start = reinterpret_cast<uintptr_t>(base) + granule;
    auto* at = reinterpret_cast<std::byte*>((start + granule - 1) / granule * granule);
    void* m = mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                   static_cast<off_t>(offset));
    if (m == MAP_FAILED) {
        log_errno("mmap memfd");
        munmap(r, total);
        return false;
    }
    *reservation = base;
    *res_bytes = total;
    *host = at;
    return true;
}

}  // namespace

Result<MemoryRegion, MemError> MemoryRegion::create(std::size_t size_bytes,
                                                    const char* name) noexcept {
    if (size_bytes == 0 || size_bytes > max_map_bytes()) return unexpected(MemError::BadRegion);
    const std::size_t size = round_up(size_bytes, page_bytes());
    // Sealable, so the peer it is shared with cannot shrink it under our mapping.
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        log_errno("memfd_create");
        return unexpected(MemError::SystemError);
    }
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
        log_errno("ftruncate");
        close(fd);
        return unexpected(MemError::SystemError);
    }
    // Growth stays allowed; F_SEAL_SEAL keeps a peer from adding write seals.
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
        log_errno("F_ADD_SEALS");
        close(fd);
        return unexpected(MemError::SystemError);
    }
    return map_fd(fd, size, 0);  // owns fd from here, success or not
}

Result<MemoryRegion, MemError> MemoryRegion::map_fd(int fd, std::size_t size_bytes,
                                                    uint64_t offset) noexcept {
    auto r = map_owned(fd, size_bytes, offset);
    // Ownership was taken on entry: a failed mapping must not leak the fd.
    if (!r && fd >= 0) close(fd);
    return r;
}

std::size_t MemoryRegion::map_granule(int fd) noexcept {
    struct statfs fs {};
    struct stat st {};
    if (fd < 0 || fstatfs(fd, &fs) != 0 || fstat(fd, &st) != 0) return 0;
    // hugetlbfs (DPDK's and QEMU's hugepage memory) maps whole huge pages,
    // its st_blksize.
    if (fs.f_type == HUGETLBFS_MAGIC) {
        if (st.st_blksize <= 0 || static_cast<std::size_t>(st.st_blksize) % page_bytes() != 0) {
            return 0;
        }
        return static_cast<std::size_t>(st.st_blksize);
    }
    // Rule: otherwise only shared memory: a memfd or a tmpfs file (QEMU's
    // memory-backend-memfd, DPDK's --no-huge memfds, /dev/shm). A page of a
    // file on a disk, NFS or FUSE is faulted in by I/O that its server can
    // stall for as long as it likes, and the worker touching it with it.
    return fs.f_type == TMPFS_MAGIC ? page_bytes() : 0;
}

Result<MemoryRegion, MemError> MemoryRegion::map_owned(int fd, std::size_t size_bytes,
                                                       uint64_t offset) noexcept {
    const std::size_t granule = map_granule(fd);
    if (granule == 0) return unexpected(MemError::BadFd);
    // Rule: a region has bytes, fits an off_t, and starts on a granule (mmap's offset rule).
    if (size_bytes == 0 || size_bytes > max_map_bytes() - 2 * granule || offset % granule != 0) {
        return unexpected(MemError::BadRegion);
    }
    // Rule: offset + size is overflow-checked (STYLE.md §6, vhost-user regions).
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, uint64_t{size_bytes}, &end)) {
        return unexpected(MemError::BadRegion);
    }
    // Rule: only a regular file (a memfd is one) has a size mmap can trust;
    // a pipe, socket or device fd is refused before anything is mapped.
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return unexpected(MemError::BadFd);
    // Rule: the mapping is shared and writable, so the fd must be open read-write.
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDWR) return unexpected(MemError::BadFd);
    // Rule: every mapped byte exists in the file, else touching it raises
    // SIGBUS. The rounded-up tail lies in the page holding EOF, which does not
    // fault. An unsealed file can still shrink after this check; that is what
    // sealed_against_shrink() reports.
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < end) {
        return unexpected(MemError::FdTooShort);
    }
    // Seals are a memfd (and tmpfs) feature; elsewhere F_GET_SEALS fails with
    // EINVAL and the file counts as unsealed.
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals > 0 && (seals & kWriteSeals) != 0) return unexpected(MemError::BadFd);
    const bool sealed = seals > 0 && (seals & F_SEAL_SHRINK) != 0;

    const std::size_t size = round_up(size_bytes, granule);
    std::byte* reservation = nullptr;
    std::size_t res_bytes = 0;
    std::byte* host = nullptr;
    if (!map_guarded(fd, size, offset, granule, &reservation, &res_bytes, &host)) {
        return unexpected(MemError::SystemError);
    }
    return MemoryRegion(fd, reservation, res_bytes, host, size, sealed);
}

MemoryRegion::MemoryRegion(MemoryRegion&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      reservation_(std::exchange(o.reservation_, nullptr)),
      reservation_bytes_(std::exchange(o.reservation_bytes_, 0)),
      host_(std::exchange(o.host_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      sealed_against_shrink_(std::exchange(o.sealed_against_shrink_, false)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
    if (this != &o) {
        release();
        fd_ = std::exchange(o.fd_, -1);
        reservation_ = std::exchange(o.reservation_, nullptr);
        reservation_bytes_ = std::exchange(o.reservation_bytes_, 0);
        host_ = std::exchange(o.host_, nullptr);
        size_ = std::exchange(o.size_, 0);
        sealed_against_shrink_ = std::exchange(o.sealed_against_shrink_, false);
    }
    return *this;
}

MemoryRegion::~MemoryRegion() { release(); }

void MemoryRegion::release() noexcept {
    if (reservation_ != nullptr) munmap(reservation_, reservation_bytes_);
    if (fd_ >= 0) close(fd_);
    reservation_ = nullptr;
    reservation_bytes_ = 0;
    host_ = nullptr;
    size_ = 0;
    fd_ = -1;
    sealed_against_shrink_ = false;
}

}  // namespace pvnet::mem
