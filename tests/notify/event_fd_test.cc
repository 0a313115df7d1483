// EventFd doorbells: signals merge into one counter, consume() never blocks,
// wait() is bounded and does not consume, and the object owns its fd (moves
// transfer it, destruction and move-assignment close it, adopt() takes it).
// Every wait here has a limit (STYLE.md §11); no test asserts on time.
#include "pvnet/notify/event_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <utility>

namespace pvnet::notify {
namespace {

/// Long enough for any scheduler; only reached if the code under test is broken.
constexpr int64_t kBoundUs = 5'000'000;

EventFd must_create() {
    auto r = EventFd::create();
    EXPECT_TRUE(r.has_value());
    if (!r) std::abort();
    return std::move(r.value());
}

bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }
bool fd_closed(int fd) { return fcntl(fd, F_GETFD) == -1 && errno == EBADF; }

TEST(EventFd, CreateGivesNonBlockingCloexecFd) {
    const EventFd e = must_create();
    ASSERT_GE(e.fd(), 0);
    EXPECT_NE(fcntl(e.fd(), F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(fcntl(e.fd(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(EventFd, ConsumeOnEmptyReturnsZeroWithoutBlocking) {
    const EventFd e = must_create();
    EXPECT_EQ(e.consume(), 0u);
    EXPECT_EQ(e.consume(), 0u);
}

TEST(EventFd, SignalsMergeIntoOneCount) {
    const EventFd e = must_create();
    e.signal();
    e.signal();
    e.signal();
    EXPECT_EQ(e.consume(), 3u);
    EXPECT_EQ(e.consume(), 0u) << "consume clears the counter";
    e.signal();
    EXPECT_EQ(e.consume(), 1u);
}

TEST(EventFd, WaitTimesOutWhenNotSignalled) {
    const EventFd e = must_create();
    EXPECT_FALSE(e.wait(0));
    EXPECT_FALSE(e.wait(1000));
}

TEST(EventFd, WaitDoesNotConsume) {
    const EventFd e = must_create();
    e.signal();
    EXPECT_TRUE(e.wait(0));
    EXPECT_TRUE(e.wait(kBoundUs)) << "still readable: wait left the counter alone";
    EXPECT_EQ(e.consume(), 1u);
    EXPECT_FALSE(e.wait(0));
}

/// True once thread `tid` of this process is asleep (state S in
/// /proc/self/task/<tid>/stat), polled for at most ~5 s.
bool wait_until_asleep(pid_t tid) {
    const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
    for (int tries = 0; tries < 50'000; ++tries) {
        std::ifstream f(path);
        std::string stat;
        std::getline(f, stat);
        // The state follows the ")" that closes the command name.
        const auto paren = stat.rfind(')');
        if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S') {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
}

TEST(EventFd, WaitWakesOnSignalFromAnotherThread) {
    const EventFd e = must_create();
    EXPECT_FALSE(e.wait(1000));
    // Signalled only once this thread sleeps in wait(), so the wake-up is
    // what ends it (not a counter already set when it looked).
    const pid_t waiter = gettid();
    bool asleep = false;
    std::thread t([&e, &asleep, waiter] {
        asleep = wait_until_asleep(waiter);
        e.signal();
    });
    const bool woke = e.wait(kBoundUs);
    t.join();
    EXPECT_TRUE(asleep) << "the waiter never slept";
    EXPECT_TRUE(woke);
    EXPECT_EQ(e.consume(), 1u);
}

TEST(EventFd, WaitWithSecondsAndMicrosecondsPartsWakesOnSignal) {
    // timeout_us above 1 s exercises the tv_sec / tv_nsec split.
    const EventFd e = must_create();
    std::thread t([&e] { e.signal(); });
    const bool woke = e.wait(1'500'000);
    t.join();
    EXPECT_TRUE(woke);
}

TEST(EventFd, MoveConstructTransfersTheFd) {
    EventFd a = must_create();
    const int fd = a.fd();
    EventFd b(std::move(a));
    EXPECT_EQ(b.fd(), fd);
    EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_TRUE(fd_open(fd));
    b.signal();
    EXPECT_EQ(b.consume(), 1u);
}

TEST(EventFd, MovedFromObjectIsInertAndClosesNothing) {
    EventFd a = must_create();
    EventFd b(std::move(a));
    // NOLINTBEGIN(bugprone-use-after-move)
    a.signal();
    EXPECT_EQ(a.consume(), 0u);
    EXPECT_FALSE(a.wait(0));
    // NOLINTEND(bugprone-use-after-move)
    EXPECT_TRUE(fd_open(b.fd()));
}

TEST(EventFd, MoveAssignClosesTheTargetsOldFd) {
    EventFd a = must_create();
    EventFd b = must_create();
    const int fa = a.fd();
    const int fb = b.fd();
    b = std::move(a);
    EXPECT_EQ(b.fd(), fa);
    EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(fd_closed(fb));
    EXPECT_TRUE(fd_open(fa));
}

TEST(EventFd, SelfMoveAssignKeepsTheFd) {
    EventFd a = must_create();
    const int fd = a.fd();
    EventFd& same = a;
    a = std::move(same);
    EXPECT_EQ(a.fd(), fd);
    EXPECT_TRUE(fd_open(fd));
}

TEST(EventFd, DestructorClosesTheFd) {
    int fd = -1;
    {
        const EventFd e = must_create();
        fd = e.fd();
        EXPECT_TRUE(fd_open(fd));
    }
    EXPECT_TRUE(fd_closed(fd));
}

TEST(EventFd, AdoptTakesOwnershipOfAPeersFd) {
    const int raw = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_GE(raw, 0);
    {
        const EventFd e = EventFd::adopt(raw);
        EXPECT_EQ(e.fd(), raw);
        // The peer signals through its own copy of the fd; we see it.
        const uint64_t two = 2;
        ASSERT_EQ(write(raw, &two, sizeof two), static_cast<ssize_t>(sizeof two));
        EXPECT_TRUE(e.wait(kBoundUs));
        EXPECT_EQ(e.consume(), 2u);
        e.signal();
        uint64_t v = 0;
        ASSERT_EQ(read(raw, &v, sizeof v), static_cast<ssize_t>(sizeof v));
        EXPECT_EQ(v, 1u);
    }
    EXPECT_TRUE(fd_closed(raw));
}

TEST(EventFd, AdoptOfInvalidFdIsInert) {
    const EventFd e = EventFd::adopt(-1);
    EXPECT_EQ(e.fd(), -1);
    e.signal();
    EXPECT_EQ(e.consume(), 0u);
    EXPECT_FALSE(e.wait(0));
}

}  // namespace
}  // namespace pvnet::notify
