// MemoryRegion: a memfd mapped shared between threads and processes, fenced
// by PROT_NONE guard pages.
#include "pvnet/mem/memory_region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

namespace pvnet::mem {

// gtest prints errors by name (found by argument-dependent lookup).
void PrintTo(MemError e, std::ostream* os) { *os << to_string(e); }

namespace {

std::size_t page_bytes() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

uint8_t pattern_at(std::size_t i) { return static_cast<uint8_t>((i * 131u + 7u) & 0xff); }

bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

MemoryRegion must_create(std::size_t bytes) {
    auto r = MemoryRegion::create(bytes, "pvnet-test");
    EXPECT_TRUE(r.has_value());
    if (!r) std::abort();
    return std::move(r).value();
}

TEST(MemoryRegion, CreateIsZeroFilledPageRoundedAndHasValidFd) {
    const std::size_t page = page_bytes();
    MemoryRegion m = must_create(page + 1);
    EXPECT_EQ(m.size(), 2 * page);
    ASSERT_NE(m.host(), nullptr);
    EXPECT_EQ(m.bytes().data(), m.host());
    EXPECT_EQ(m.bytes().size(), m.size());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m.host()) % page, 0u);
    for (std::byte b : m.bytes()) ASSERT_EQ(b, std::byte{0});

    ASSERT_GE(m.fd(), 0);
    struct stat st {};
    ASSERT_EQ(fstat(m.fd(), &st), 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), m.size());
}

TEST(MemoryRegion, CreateOfExactPageMultipleKeepsSize) {
    const std::size_t page = page_bytes();
    MemoryRegion m = must_create(3 * page);
    EXPECT_EQ(m.size(), 3 * page);
    MemoryRegion one = must_create(1);
    EXPECT_EQ(one.size(), page);
}

TEST(MemoryRegion, CreateRejectsZeroSize) {
    auto r = MemoryRegion::create(0);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::BadRegion);
}

TEST(MemoryRegion, TwoMappingsOfOneMemfdSeeEachOthersWrites) {
    const std::size_t page = page_bytes();
    MemoryRegion a = must_create(2 * page);
    const int dup_fd = dup(a.fd());
    ASSERT_GE(dup_fd, 0);
    auto rb = MemoryRegion::map_fd(dup_fd, 2 * page, 0);
    ASSERT_TRUE(rb.has_value());
    MemoryRegion b = std::move(rb).value();
    EXPECT_EQ(b.fd(), dup_fd);
    EXPECT_NE(a.host(), b.host());
    ASSERT_EQ(a.size(), b.size());

    for (std::size_t i = 0; i < a.size(); i += 97) a.host()[i] = std::byte{pattern_at(i)};
    for (std::size_t i = 0; i < b.size(); i += 97) {
        ASSERT_EQ(b.host()[i], std::byte{pattern_at(i)}) << i;
    }
    b.host()[b.size() - 1] = std::byte{0x5a};
    EXPECT_EQ(a.host()[a.size() - 1], std::byte{0x5a});
}

TEST(MemoryRegion, MapFdAtPageOffsetSeesThatPage) {
    const std::size_t page = page_bytes();
    MemoryRegion a = must_create(3 * page);
    a.host()[page] = std::byte{0x11};
    a.host()[2 * page - 1] = std::byte{0x22};
    auto rb = MemoryRegion::map_fd(dup(a.fd()), page, page);
    ASSERT_TRUE(rb.has_value());
    MemoryRegion b = std::move(rb).value();
    EXPECT_EQ(b.size(), page);
    EXPECT_EQ(b.host()[0], std::byte{0x11});
    EXPECT_EQ(b.host()[page - 1], std::byte{0x22});
}

TEST(MemoryRegion, ForkedChildWritesAreSeenByParent) {
    const std::size_t page = page_bytes();
    MemoryRegion m = must_create(4 * page);
    const int fd = m.fd();
    const std::size_t size = m.size();

    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // Child: its own mapping of the shared memfd, then a pattern, then exit
        // without running the parent's destructors or gtest teardown.
        auto rc = MemoryRegion::map_fd(dup(fd), size, 0);
        if (!rc) _exit(2);
        std::byte* p = rc->host();
        for (std::size_t i = 0; i < size; ++i) p[i] = std::byte{pattern_at(i)};
        _exit(0);
    }

    // Bounded wait: about 10 s, then kill the child and fail.
    int status = 0;
    pid_t done = 0;
    for (int tries = 0; tries < 1000 && done == 0; ++tries) {
        done = waitpid(pid, &status, WNOHANG);
        if (done == 0) {
            const timespec ts{0, 10'000'000};
            nanosleep(&ts, nullptr);
        }
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        FAIL() << "child did not exit in time";
    }
    ASSERT_EQ(done, pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    for (std::size_t i = 0; i < size; ++i) {
        ASSERT_EQ(m.host()[i], std::byte{pattern_at(i)}) << i;
    }
}

// Volatile so the compiler keeps the faulting load.
uint8_t read_byte(const std::byte* p) {
    return static_cast<uint8_t>(*static_cast<const volatile std::byte*>(p));
}

class MemoryRegionDeathTest : public ::testing::Test {
protected:
    void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(MemoryRegionDeathTest, ReadingTheByteBeforeTheRegionFaults) {
    MemoryRegion m = must_create(page_bytes());
    EXPECT_DEATH(read_byte(m.host() - 1), "");
}

TEST_F(MemoryRegionDeathTest, ReadingTheByteAfterTheRegionFaults) {
    MemoryRegion m = must_create(page_bytes());
    EXPECT_DEATH(read_byte(m.host() + m.size()), "");
}

TEST_F(MemoryRegionDeathTest, MappedFdAlsoHasGuardPages) {
    MemoryRegion a = must_create(2 * page_bytes());
    auto rb = MemoryRegion::map_fd(dup(a.fd()), a.size(), 0);
    ASSERT_TRUE(rb.has_value());
    EXPECT_DEATH(read_byte(rb->host() - 1), "");
    EXPECT_DEATH(read_byte(rb->host() + rb->size()), "");
}

// The permissions of the mapping holding `p`, from /proc/self/maps ("" if none).
std::string perms_at(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        std::istringstream in(line);
        std::uintptr_t lo = 0;
        std::uintptr_t hi = 0;
        char dash = 0;
        std::string perms;
        in >> std::hex >> lo >> dash >> hi >> perms;
        if (a >= lo && a < hi) return perms;
    }
    return "";
}

// Without this, the death tests above could pass by luck of an unmapped
// neighbour; the guard must be a PROT_NONE reservation owned by the region.
TEST(MemoryRegion, GuardPagesAreReservedProtNone) {
    MemoryRegion m = must_create(2 * page_bytes());
    EXPECT_EQ(perms_at(m.host() - 1), "---p");
    EXPECT_EQ(perms_at(m.host() - page_bytes()), "---p");
    EXPECT_EQ(perms_at(m.host() + m.size()), "---p");
    EXPECT_EQ(perms_at(m.host() + m.size() + page_bytes() - 1), "---p");
    EXPECT_EQ(perms_at(m.host()), "rw-s");
    EXPECT_EQ(perms_at(m.host() + m.size() - 1), "rw-s");
}

TEST(MemoryRegion, FirstAndLastByteAreAccessible) {
    MemoryRegion m = must_create(page_bytes());
    m.host()[0] = std::byte{1};
    m.host()[m.size() - 1] = std::byte{2};
    EXPECT_EQ(read_byte(m.host()), 1);
    EXPECT_EQ(read_byte(m.host() + m.size() - 1), 2);
}

TEST(MemoryRegion, MoveConstructionTransfersMappingAndFd) {
    MemoryRegion a = must_create(page_bytes());
    a.host()[5] = std::byte{0x77};
    std::byte* host = a.host();
    const int fd = a.fd();
    const std::size_t size = a.size();

    MemoryRegion b(std::move(a));
    EXPECT_EQ(b.host(), host);
    EXPECT_EQ(b.fd(), fd);
    EXPECT_EQ(b.size(), size);
    EXPECT_EQ(b.host()[5], std::byte{0x77});
    // NOLINTNEXTLINE(bugprone-use-after-move): the moved-from state is specified.
    EXPECT_EQ(a.host(), nullptr);
    EXPECT_EQ(a.fd(), -1);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_TRUE(a.bytes().empty());
    EXPECT_TRUE(fd_is_open(fd));
}

TEST(MemoryRegion, MoveAssignmentReleasesTheOldRegion) {
    MemoryRegion a = must_create(page_bytes());
    MemoryRegion b = must_create(2 * page_bytes());
    const int a_fd = a.fd();
    const int b_fd = b.fd();
    std::byte* a_host = a.host();
    a_host[0] = std::byte{0x42};

    b = std::move(a);
    EXPECT_EQ(b.host(), a_host);
    EXPECT_EQ(b.fd(), a_fd);
    EXPECT_EQ(b.size(), page_bytes());
    EXPECT_EQ(b.host()[0], std::byte{0x42});
    EXPECT_FALSE(fd_is_open(b_fd)) << "old fd of the assigned-to region leaked";
    // NOLINTNEXTLINE(bugprone-use-after-move)
    EXPECT_EQ(a.host(), nullptr);
    EXPECT_EQ(a.fd(), -1);
    EXPECT_EQ(a.size(), 0u);
}

TEST(MemoryRegion, SelfMoveAssignmentKeepsTheRegion) {
    MemoryRegion a = must_create(page_bytes());
    std::byte* host = a.host();
    const int fd = a.fd();
    MemoryRegion& alias = a;
    a = std::move(alias);
    EXPECT_EQ(a.host(), host);
    EXPECT_EQ(a.fd(), fd);
    EXPECT_TRUE(fd_is_open(fd));
    a.host()[0] = std::byte{1};
}

TEST(MemoryRegion, DestructionClosesTheFd) {
    int fd = -1;
    {
        MemoryRegion m = must_create(page_bytes());
        fd = m.fd();
        ASSERT_TRUE(fd_is_open(fd));
    }
    EXPECT_FALSE(fd_is_open(fd));
}

// ---------------------------------------------------------------------------
// map_fd: what it refuses, and that it owns the fd it is given either way.

// Closed, not merely unusable: fcntl on the number reports EBADF.
bool fd_was_closed(int fd) {
    errno = 0;
    return fcntl(fd, F_GETFD) == -1 && errno == EBADF;
}

// A plain memfd, as a peer such as QEMU sends it: not sealed, unless `seals`.
int peer_memfd(std::size_t bytes, int seals = 0) {
    const int fd = memfd_create("pvnet-peer", MFD_CLOEXEC | (seals != 0 ? MFD_ALLOW_SEALING : 0u));
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    if (seals != 0) {
        EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
    }
    return fd;
}

// Runs map_fd on a dup of `fd` and checks the error and that the dup was closed.
void expect_map_fd_fails(int fd, std::size_t bytes, uint64_t offset, MemError want) {
    const int d = dup(fd);
    ASSERT_GE(d, 0);
    auto r = MemoryRegion::map_fd(d, bytes, offset);
    ASSERT_FALSE(r.has_value()) << "bytes=" << bytes << " offset=" << offset;
    EXPECT_EQ(r.error(), want) << to_string(r.error());
    EXPECT_TRUE(fd_was_closed(d)) << "map_fd leaked the fd it owned";
    EXPECT_TRUE(fd_is_open(fd));  // the caller's own fd is untouched
}

TEST(MemoryRegion, MapFdRejectsZeroSize) {
    MemoryRegion a = must_create(page_bytes());
    expect_map_fd_fails(a.fd(), 0, 0, MemError::BadRegion);
}

TEST(MemoryRegion, MapFdRejectsUnalignedOffset) {
    MemoryRegion a = must_create(4 * page_bytes());
    for (uint64_t off : {uint64_t{1}, uint64_t{page_bytes() - 1}, uint64_t{page_bytes() + 8},
                         uint64_t{page_bytes() / 2}}) {
        expect_map_fd_fails(a.fd(), page_bytes(), off, MemError::BadRegion);
    }
}

TEST(MemoryRegion, MapFdRejectsOffsetPlusSizeOverflow) {
    MemoryRegion a = must_create(page_bytes());
    const uint64_t top_page = ~uint64_t{0} - (page_bytes() - 1);  // aligned, near 2^64
    expect_map_fd_fails(a.fd(), page_bytes(), top_page, MemError::BadRegion);
    expect_map_fd_fails(a.fd(), 2 * page_bytes(), top_page - page_bytes(), MemError::BadRegion);
    // A size beyond off_t, whatever the file, is refused before it is rounded up.
    expect_map_fd_fails(a.fd(), SIZE_MAX, 0, MemError::BadRegion);
    expect_map_fd_fails(a.fd(), SIZE_MAX - page_bytes() + 2, 0, MemError::BadRegion);
}

TEST(MemoryRegion, MapFdOfAClosedOrNegativeFdIsBadFd) {
    auto neg = MemoryRegion::map_fd(-1, page_bytes(), 0);
    ASSERT_FALSE(neg.has_value());
    EXPECT_EQ(neg.error(), MemError::BadFd);

    const int fd = peer_memfd(page_bytes());
    ASSERT_EQ(close(fd), 0);
    auto closed = MemoryRegion::map_fd(fd, page_bytes(), 0);
    ASSERT_FALSE(closed.has_value());
    EXPECT_EQ(closed.error(), MemError::BadFd);
}

TEST(MemoryRegion, MapFdRejectsAnFdThatIsNotARegularFile) {
    int p[2] = {-1, -1};
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    expect_map_fd_fails(p[0], page_bytes(), 0, MemError::BadFd);
    close(p[0]);
    close(p[1]);
}

TEST(MemoryRegion, MapFdRejectsAReadOnlyFd) {
    const int fd = peer_memfd(page_bytes());
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(ro, 0);
    expect_map_fd_fails(ro, page_bytes(), 0, MemError::BadFd);
    close(ro);
    close(fd);
}

TEST(MemoryRegion, MapFdRejectsAWriteSealedMemfd) {
    const int fd = peer_memfd(page_bytes(), F_SEAL_WRITE);
    expect_map_fd_fails(fd, page_bytes(), 0, MemError::BadFd);
    close(fd);
}

TEST(MemoryRegion, MapFdRejectsAnFdShorterThanOffsetPlusSize) {
    const std::size_t page = page_bytes();
    const int fd = peer_memfd(2 * page);
    expect_map_fd_fails(fd, 3 * page, 0, MemError::FdTooShort);
    expect_map_fd_fails(fd, 2 * page, page, MemError::FdTooShort);
    expect_map_fd_fails(fd, page, 2 * page, MemError::FdTooShort);  // offset at EOF
    expect_map_fd_fails(fd, page + 1, page, MemError::FdTooShort);  // one byte short
    // Exactly up to EOF is fine.
    auto whole = MemoryRegion::map_fd(dup(fd), 2 * page, 0);
    ASSERT_TRUE(whole.has_value());
    auto tail = MemoryRegion::map_fd(dup(fd), page, page);
    ASSERT_TRUE(tail.has_value());
    close(fd);
}

TEST(MemoryRegion, MapFdChecksTheRequestedSizeNotTheRoundedOne) {
    // A file ending mid-page: the page holding EOF maps without SIGBUS.
    const std::size_t page = page_bytes();
    const int fd = peer_memfd(page + 100);
    auto r = MemoryRegion::map_fd(dup(fd), page + 100, 0);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->size(), 2 * page);
    r->host()[r->size() - 1] = std::byte{1};  // past EOF, inside EOF's page
    expect_map_fd_fails(fd, page + 101, 0, MemError::FdTooShort);
    close(fd);
}

TEST(MemoryRegion, FailingMapFdClosesTheFdItWasGiven) {
    // Every way map_fd can fail on a live fd closes the fd it took.
    const std::size_t page = page_bytes();
    const int fd = peer_memfd(page);
    const struct {
        std::size_t bytes;
        uint64_t offset;
        MemError want;
    } cases[] = {
        {0, 0, MemError::BadRegion},
        {page, 1, MemError::BadRegion},
        {page, ~uint64_t{0} - (page - 1), MemError::BadRegion},
        {2 * page, 0, MemError::FdTooShort},
    };
    for (const auto& c : cases) expect_map_fd_fails(fd, c.bytes, c.offset, c.want);
    close(fd);
}

TEST(MemoryRegion, MapFdOfADupKeepsTheDupAndTheCallersFd) {
    MemoryRegion a = must_create(page_bytes());
    const int d = dup(a.fd());
    {
        auto r = MemoryRegion::map_fd(d, page_bytes(), 0);
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->fd(), d);
        EXPECT_TRUE(fd_is_open(d));
    }
    EXPECT_TRUE(fd_was_closed(d));
    EXPECT_TRUE(fd_is_open(a.fd()));
}

TEST_F(MemoryRegionDeathTest, TouchingPastTheEndOfAShortFileWouldHaveFaulted) {
    // What FdTooShort prevents: a raw mapping of 2 pages over a 1-page file
    // succeeds, and its second page raises SIGBUS (ASan reports it and exits).
    const std::size_t page = page_bytes();
    const int fd = peer_memfd(page);
    void* raw = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(raw, MAP_FAILED);
    EXPECT_DEATH(read_byte(static_cast<std::byte*>(raw) + page), "");
    munmap(raw, 2 * page);
    expect_map_fd_fails(fd, 2 * page, 0, MemError::FdTooShort);
    close(fd);
}

// ---------------------------------------------------------------------------
// Seals: pvnet's own memfds cannot shrink; a peer's are reported.

TEST(MemoryRegion, CreatedMemfdCannotBeShrunk) {
    const std::size_t page = page_bytes();
    MemoryRegion m = must_create(2 * page);
    EXPECT_TRUE(m.sealed_against_shrink());
    // ASSERT: a shrink that succeeded would make the touch below raise SIGBUS.
    errno = 0;
    ASSERT_EQ(ftruncate(m.fd(), 0), -1);
    EXPECT_EQ(errno, EPERM);
    errno = 0;
    ASSERT_EQ(ftruncate(m.fd(), static_cast<off_t>(page)), -1);
    EXPECT_EQ(errno, EPERM);
    // Through a peer's dup too: the seal is on the file, not the fd.
    const int d = dup(m.fd());
    errno = 0;
    ASSERT_EQ(ftruncate(d, 0), -1);
    EXPECT_EQ(errno, EPERM);
    close(d);
    struct stat st {};
    ASSERT_EQ(fstat(m.fd(), &st), 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), 2 * page);
    m.host()[m.size() - 1] = std::byte{3};  // still mapped, no SIGBUS
}

TEST(MemoryRegion, CreatedMemfdMayGrowButTakesNoFurtherSeals) {
    const std::size_t page = page_bytes();
    MemoryRegion m = must_create(page);
    const int seals = fcntl(m.fd(), F_GET_SEALS);
    ASSERT_GE(seals, 0);
    EXPECT_NE(seals & F_SEAL_SHRINK, 0);
    EXPECT_NE(seals & F_SEAL_SEAL, 0);
    EXPECT_EQ(seals & (F_SEAL_GROW | F_SEAL_WRITE), 0);
    EXPECT_EQ(ftruncate(m.fd(), static_cast<off_t>(2 * page)), 0);
    // A peer cannot seal it against our writes.
    errno = 0;
    EXPECT_EQ(fcntl(m.fd(), F_ADD_SEALS, F_SEAL_WRITE), -1);
    EXPECT_EQ(errno, EPERM);
}

TEST(MemoryRegion, MapFdReportsWhetherThePeerSealedAgainstShrink) {
    const std::size_t page = page_bytes();
    const int unsealed = peer_memfd(page);  // QEMU's kind: mapped, reported unsealed
    auto u = MemoryRegion::map_fd(dup(unsealed), page, 0);
    ASSERT_TRUE(u.has_value());
    EXPECT_FALSE(u->sealed_against_shrink());

    const int grow_only = peer_memfd(page, F_SEAL_GROW);
    auto g = MemoryRegion::map_fd(dup(grow_only), page, 0);
    ASSERT_TRUE(g.has_value());
    EXPECT_FALSE(g->sealed_against_shrink());

    const int sealed = peer_memfd(page, F_SEAL_SHRINK);
    auto s = MemoryRegion::map_fd(dup(sealed), page, 0);
    ASSERT_TRUE(s.has_value());
    EXPECT_TRUE(s->sealed_against_shrink());

    MemoryRegion own = must_create(page);
    auto o = MemoryRegion::map_fd(dup(own.fd()), page, 0);
    ASSERT_TRUE(o.has_value());
    EXPECT_TRUE(o->sealed_against_shrink());

    // Moves carry the flag.
    MemoryRegion moved(std::move(s.value()));
    EXPECT_TRUE(moved.sealed_against_shrink());
    close(unsealed);
    close(grow_only);
    close(sealed);
}

TEST(MemoryRegion, MapFdOfAnUnsealedTmpfsFileMapsUnsealed) {
    // A /dev/shm file (QEMU's memory-backend-file there): shared memory, not
    // sealed against shrinking.
    struct statfs fs {};
    if (statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC) GTEST_SKIP() << "no tmpfs /dev/shm";
    char name[] = "/dev/shm/pvnet-mem-test-XXXXXX";
    const int fd = mkostemp(name, O_CLOEXEC);
    ASSERT_GE(fd, 0);
    unlink(name);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(page_bytes())), 0);
    auto r = MemoryRegion::map_fd(dup(fd), page_bytes(), 0);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(r->sealed_against_shrink());
    r->host()[0] = std::byte{9};
    close(fd);
}

TEST(MemoryRegion, MapFdRejectsAFileOnAnotherFileSystem) {
    // A regular file on a disk file system: its pages come by I/O a server
    // (NFS, FUSE) could stall a toucher on. The first candidate directory
    // that is not tmpfs or hugetlbfs holds it.
    int fd = -1;
    for (const std::string dir : {".", "/var/tmp", "/tmp"}) {
        std::string name = dir + "/pvnet-mem-test-XXXXXX";
        const int f = mkostemp(name.data(), O_CLOEXEC);
        if (f < 0) continue;
        unlink(name.c_str());
        struct statfs fs {};
        if (fstatfs(f, &fs) == 0 && fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC) {
            fd = f;
            break;
        }
        close(f);
    }
    if (fd < 0) GTEST_SKIP() << "no disk file system among ., /var/tmp and /tmp";
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(page_bytes())), 0);
    EXPECT_EQ(MemoryRegion::map_granule(fd), 0u);
    expect_map_fd_fails(fd, page_bytes(), 0, MemError::BadFd);
    close(fd);
}

TEST(MemoryRegion, CreateRejectsSizesBeyondOffT) {
    for (std::size_t bytes : {SIZE_MAX, SIZE_MAX - page_bytes(), SIZE_MAX / 2 + 1}) {
        auto r = MemoryRegion::create(bytes);
        ASSERT_FALSE(r.has_value()) << bytes;
        EXPECT_EQ(r.error(), MemError::BadRegion) << bytes;
    }
}

}  // namespace
}  // namespace pvnet::mem
