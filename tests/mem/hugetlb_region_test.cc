// MemoryRegion over hugetlbfs, the memory DPDK's virtio-user and QEMU's
// memory-backend-file hand a vhost-user backend: mappings are whole huge
// pages at huge-page-aligned addresses and file offsets (mmap(2) EINVAL
// otherwise). Root: the reservation mounts hugetlbfs and raises nr_hugepages
// (HugepageReservation, restored afterwards).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "pvnet/lab/hugepages.h"
#include "pvnet/mem/memory_region.h"

namespace pvnet::mem {
namespace {

constexpr std::size_t kHuge = 2u << 20;

TEST(HugetlbRegion, MapsWholeHugePagesAtAlignedAddressesAndRefusesPageOffsets) {
    ASSERT_EQ(::geteuid(), 0u) << "needs root: hugetlbfs mount and nr_hugepages";
    auto huge = lab::HugepageReservation::reserve(4);
    ASSERT_TRUE(huge) << huge.error();
    const std::string path = huge->dir() + "/pvnet-hugetlb-test-" + std::to_string(::getpid());
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ::unlink(path.c_str());
    ASSERT_EQ(::ftruncate(fd, 2 * kHuge), 0) << std::strerror(errno);
    EXPECT_EQ(MemoryRegion::map_granule(fd), kHuge);

    // A frontend's 100-byte region at offset 0: one whole huge page is mapped.
    auto a = MemoryRegion::map_fd(::dup(fd), 100, 0);
    ASSERT_TRUE(a) << to_string(a.error());
    EXPECT_EQ(a->size(), kHuge);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->host()) % kHuge, 0u);
    // The second huge page, through a second mapping, sees the first one's writes.
    auto b = MemoryRegion::map_fd(::dup(fd), kHuge, kHuge);
    ASSERT_TRUE(b) << to_string(b.error());
    auto whole = MemoryRegion::map_fd(::dup(fd), 2 * kHuge, 0);
    ASSERT_TRUE(whole) << to_string(whole.error());
    std::memcpy(b->host() + 7, "pvnet", 5);
    EXPECT_EQ(std::memcmp(whole->host() + kHuge + 7, "pvnet", 5), 0);

    // A page offset inside a huge page cannot be mapped, nor a range past the file.
    EXPECT_EQ(MemoryRegion::map_fd(::dup(fd), 4096, 4096).error(), MemError::BadRegion);
    EXPECT_EQ(MemoryRegion::map_fd(::dup(fd), kHuge + 1, kHuge).error(), MemError::FdTooShort);
    ::close(fd);
}

}  // namespace
}  // namespace pvnet::mem
