// MemoryRegion: a memfd mapped shared between threads and processes, fenced
// by PROT_NONE guard pages.
#include "pvnet/mem/memory_region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace pvnet::mem {
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

TEST(MemoryRegion, MapFdRejectsZeroSize) {
    MemoryRegion a = must_create(page_bytes());
    const int fd = dup(a.fd());
    ASSERT_GE(fd, 0);
    auto r = MemoryRegion::map_fd(fd, 0, 0);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::BadRegion);
    // Not taken on failure: still ours to close.
    EXPECT_TRUE(fd_is_open(fd));
    close(fd);
}

TEST(MemoryRegion, MapFdRejectsUnalignedOffset) {
    MemoryRegion a = must_create(4 * page_bytes());
    const int fd = dup(a.fd());
    ASSERT_GE(fd, 0);
    for (uint64_t off : {uint64_t{1}, uint64_t{page_bytes() - 1}, uint64_t{page_bytes() + 8},
                         uint64_t{page_bytes() / 2}}) {
        auto r = MemoryRegion::map_fd(fd, page_bytes(), off);
        ASSERT_FALSE(r.has_value()) << off;
        EXPECT_EQ(r.error(), MemError::BadRegion) << off;
    }
    EXPECT_TRUE(fd_is_open(fd));
    close(fd);
}

TEST(MemoryRegion, MapFdOfABadFdIsASystemError) {
    auto r = MemoryRegion::map_fd(-1, page_bytes(), 0);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::SystemError);
}

}  // namespace
}  // namespace pvnet::mem
