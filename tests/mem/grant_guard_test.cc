// The PROT_NONE guards around every mapping of a frontend page (issue 13):
// a touch one byte outside a mapped grant, or of a slot whose grant was
// unmapped, faults. Issue 23: a map or unmap that fails leaves no frontend
// page mapped without its grant held, and a slot whose guard cannot be put
// back is never used again. Death tests: no `threads` label, so the TSan
// stage (which reports the expected SEGVs) does not run them; ASan and
// release do.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "grant_fixture.h"

namespace pvnet::mem {
namespace {

// Copy mode maps no frontend page: only the two mapping modes run this.
class MappingModes : public ::testing::TestWithParam<Mode> {};

TEST_P(MappingModes, EveryMappingSitsBetweenGuardPages) {
    Granted g;
    auto acc = make(GetParam(), g.source());
    const GrantRef r = g.front.grant(kBack, 5, false).value();
    iovec v{};
    ASSERT_TRUE(acc->map(0, grant_addr(r, 0), kGrantPageBytes, true, v));
    auto* page = static_cast<volatile char*>(v.iov_base);
    page[0] = 1;
    page[kGrantPageBytes - 1] = 1;
    EXPECT_DEATH({ (void)page[-1]; }, "");
    EXPECT_DEATH({ (void)page[kGrantPageBytes]; }, "");
    acc->unmap(0, 0);
    if (GetParam() == Mode::Map) {
        EXPECT_DEATH({ (void)page[0]; }, "") << "unmapped: the guard is back";
    }
}

INSTANTIATE_TEST_SUITE_P(Grants, MappingModes, ::testing::Values(Mode::Map, Mode::Persistent),
                         [](const ::testing::TestParamInfo<Mode>& p) {
                             return std::string(p.param == Mode::Map ? "Map" : "Persistent");
                         });

/// Whether `p` can be read, without faulting if not.
bool readable(const void* p) {
    char b;
    iovec l{&b, 1};
    iovec r{const_cast<void*>(p), 1};
    return ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0) == 1;
}

bool all_bytes(const void* p, unsigned char v) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (uint32_t i = 0; i < kGrantPageBytes; ++i) {
        if (c[i] != v) return false;
    }
    return true;
}

TEST(GuardedSlots, AFailedMapNeverTouchesTheSlotAgain) {
    const int fd = ::memfd_create("guard_sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 4 * kGrantPageBytes), 0);
    ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0);  // a hostile frontend's seal
    Counter lost;
    std::optional<GuardedSlots> s(std::in_place, 4, lost);
    ASSERT_TRUE(s->ok());
    EXPECT_FALSE(s->map(1, fd, 0, true)) << "a writable mapping of a write-sealed memfd";
    EXPECT_FALSE(readable(s->page(1)));
    EXPECT_EQ(lost.get(), 1u) << "our guard or another's mapping: the slot is given up";
    // What a kernel that clears the range before the file refuses leaves
    // (Linux before 6.12): a hole, which another mapping of the process takes.
    ASSERT_EQ(::munmap(s->page(1), kGrantPageBytes), 0);
    void* other = ::mmap(s->page(1), kGrantPageBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ASSERT_EQ(other, s->page(1));
    std::memset(other, 0x5a, kGrantPageBytes);
    EXPECT_FALSE(s->map(1, fd, 0, false)) << "mapped over someone else's memory";
    EXPECT_TRUE(all_bytes(other, 0x5a));
    EXPECT_TRUE(s->map(2, fd, 0, false)) << "the other slots serve on";
    EXPECT_TRUE(s->unmap(2));
    s.reset();
    ASSERT_TRUE(readable(other)) << "unmapped with the slots";
    EXPECT_TRUE(all_bytes(other, 0x5a));
    ::munmap(other, kGrantPageBytes);
    ::close(fd);
}

[[noreturn]] void fail(const char* why) {
    std::fprintf(stderr, "%s\n", why);
    std::_Exit(1);
}

/// The soft limit; the hard one stays (raising it takes CAP_SYS_RESOURCE).
void set_memlock(rlim_t bytes) {
    rlimit r{};
    if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_max < bytes) fail("RLIMIT_MEMLOCK");
    r.rlim_cur = bytes;
    if (::setrlimit(RLIMIT_MEMLOCK, &r) != 0) fail("setrlimit");
}

uint64_t locked_bytes() {
    char b[4096]{};
    const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    const ssize_t n = ::read(fd, b, sizeof b - 1);
    ::close(fd);
    const char* at = n > 0 ? std::strstr(b, "VmLck:") : nullptr;
    if (at == nullptr) fail("no VmLck");
    return std::strtoull(at + 6, nullptr, 10) * 1024;
}

// With mlockall(MCL_FUTURE) and no CAP_IPC_LOCK, RLIMIT_MEMLOCK makes the
// guard's mmap fail on demand (it would lock a page more). Run in a child:
// the limits and the capability are the child's.
void unmaps_under_a_memlock_limit() {
    Granted g;
    std::optional<GrantMapper> m(std::in_place, g.source(), kRing);
    const GrantRef r0 = g.front.grant(kBack, 3, false).value();
    const GrantRef r1 = g.front.grant(kBack, 4, false).value();
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (::syscall(SYS_capget, &h, caps) != 0) fail("capget");
    caps[0].effective &= ~(1u << CAP_IPC_LOCK);
    if (::syscall(SYS_capset, &h, caps) != 0) fail("capset");
    set_memlock(64u << 10);
    // The system call itself: ASan turns mlockall() into a no-op.
    if (::syscall(SYS_mlockall, MCL_FUTURE) != 0) fail("mlockall");
    iovec v{};
    if (!m->map(0, grant_addr(r0, 0), 64, true, v)) fail("map");
    // No page more may be locked: replacing the page by the guard fails,
    // so the page is unmapped and the guard put into the hole.
    set_memlock(locked_bytes());
    m->unmap(0, 64);
    if (readable(v.iov_base)) fail("the frontend's page is still mapped, its grant released");
    if (m->stats().slots_lost.get() != 0) fail("the guard did not come back");
    if (!g.front.end_access(r0)) fail("the grant is still held");
    // Nothing may be locked: no guard either. The slot is lost, and what
    // takes the hole is left alone, by later maps and by the teardown.
    set_memlock(64u << 10);
    if (!m->map(0, grant_addr(r1, 0), 64, true, v)) fail("map again");
    set_memlock(0);
    m->unmap(0, 64);
    if (readable(v.iov_base)) fail("the frontend's page is still mapped");
    if (m->stats().slots_lost.get() != 1) fail("the slot without a guard is not counted lost");
    set_memlock(64u << 10);
    void* other = ::mmap(v.iov_base, kGrantPageBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (other != v.iov_base) fail("no hole where the guard was");
    std::memset(other, 0x5a, kGrantPageBytes);
    if (m->map(0, grant_addr(r1, 0), 64, false, v)) fail("a lost slot was mapped again");
    if (!all_bytes(other, 0x5a)) fail("someone else's memory written");
    m.reset();
    if (!readable(other) || !all_bytes(other, 0x5a)) fail("someone else's memory unmapped");
    std::_Exit(0);
}

TEST(GuardedSlots, AnUnmapThatFailsDropsThePageAndALostSlotIsLeftAlone) {
    EXPECT_EXIT(unmaps_under_a_memlock_limit(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pvnet::mem
