// A hostile frontend at the grant backend's door (issue 13): hellos with bad
// sizes, fields and fds. Each is refused with an error that names what is
// wrong, counted, and the backend goes on serving the next guest. Issue 23:
// with process_vm copies, a frontend process that names another process or
// memory that is not its mapping of the data memfd, or exits while another
// holds its socket; and a backend out of mappings (vm.max_map_count).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/grant/netback.h"
#include "pvnet/grant/netfront.h"
#include "pvnet/grant/wire.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/notify/event_fd.h"
#include "temp_dir.h"

namespace pvnet::grant {
namespace {

struct Door {
    test::TempDir dir;
    std::unique_ptr<Netback> nb;
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<std::string> lines;
    std::thread loop;

    explicit Door(const std::function<void(NetbackConfig&)>& tweak = {}) {
        NetbackConfig cfg;
        cfg.socket_path = dir.path() + "/nb.sock";
        cfg.store_dir = dir.path() + "/store";
        cfg.handshake_ms = 2000;
        if (tweak) tweak(cfg);
        nb = Netback::create(cfg).value();
        loop = std::thread([this] {
            nb->run(stop, [this](const std::string& l) {
                const std::lock_guard g(mu);
                lines.push_back(l);
            });
        });
    }
    ~Door() {
        stop.store(true);
        loop.join();
    }
    /// Sends `msg` with `fds`; the backend's answer (its error text, or "ok").
    std::string knock(std::span<const std::byte> msg, std::span<const int> fds) {
        const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::snprintf(a.sun_path, sizeof a.sun_path, "%s", (dir.path() + "/nb.sock").c_str());
        if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "connect failed";
        if (!send_msg(s, msg, fds)) return "send failed";
        std::vector<int> got;
        auto r = recv_msg(s, sizeof(GrantAck), got, 5000);
        ::close(s);
        if (!r || r->size() != sizeof(GrantAck)) return "no ack";
        GrantAck ack;
        std::memcpy(&ack, r->data(), sizeof ack);
        ack.error.back() = '\0';
        return ack.ok == 1 ? "ok" : std::string(ack.error.data());
    }
};

/// A well-formed hello and its fds; cases spoil one thing.
struct Hello {
    mem::MemoryRegion shared = mem::MemoryRegion::create(1u << 16, "hostile_shared").value();
    mem::MemoryRegion data = mem::MemoryRegion::create(1u << 16, "hostile_data").value();
    std::vector<notify::EventFd> evs;
    GrantHello h;
    Hello() {
        for (int i = 0; i < 4; ++i) evs.push_back(notify::EventFd::create().value());
        h.domid = 4;
        h.pid = static_cast<uint32_t>(::getpid());
        h.ring_size = 64;
        h.frame_bytes = 1514;
        h.grant_entries = 1024;
        h.shared_bytes = 1u << 16;
        h.data_bytes = 1u << 16;
        h.rx_ring_off = 8192;
        h.tx_ring_off = 16384;
    }
    std::vector<int> fds() const {
        return {shared.fd(), data.fd(), evs[0].fd(), evs[1].fd(), evs[2].fd(), evs[3].fd()};
    }
    std::span<const std::byte> bytes() const { return std::as_bytes(std::span(&h, 1)); }
};

TEST(GrantHostileHello, EachBadHelloIsRefusedByNameAndTheBackendServesOn) {
    Door door;
    ASSERT_TRUE(door.dir.ok());
    struct Case {
        const char* name;
        std::function<std::string(Door&, Hello&)> knock;
        const char* want;
    };
    const auto with = [](auto spoil) {
        return [spoil](Door& d, Hello& h) {
            spoil(h);
            const auto f = h.fds();
            return d.knock(h.bytes(), f);
        };
    };
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    // A kick whose count never drains: a worker waiting on it would spin.
    const int semaphore = ::eventfd(1u << 30, EFD_SEMAPHORE | EFD_CLOEXEC);
    ASSERT_GE(semaphore, 0);
    const int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC);
    ASSERT_GE(unsealed, 0);
    ASSERT_EQ(::ftruncate(unsealed, 1u << 16), 0);
    // Data memfds rx could not write into: sealed against it, open read-only, huge pages.
    const auto sealed = [](unsigned flags, off_t size, int seals) {
        const int fd = ::memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
        if (fd >= 0 && (::ftruncate(fd, size) != 0 || ::fcntl(fd, F_ADD_SEALS, seals) != 0)) {
            ::close(fd);
            return -1;
        }
        return fd;
    };
    const int write_sealed = sealed(0, 1u << 16, F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE);
    ASSERT_GE(write_sealed, 0);
    const int shrink_sealed = sealed(0, 1u << 16, F_SEAL_SHRINK);
    ASSERT_GE(shrink_sealed, 0);
    const int read_only = ::open(("/proc/self/fd/" + std::to_string(shrink_sealed)).c_str(),
                                 O_RDONLY | O_CLOEXEC);
    ASSERT_GE(read_only, 0);
    const int huge = sealed(MFD_HUGETLB, 2u << 20, F_SEAL_SHRINK);  // -1: no hugetlbfs here
    const auto with_data_fd = [](int fd) {
        return [fd](Door& d, Hello& h) {
            auto f = h.fds();
            f[kDataFd] = fd;
            return d.knock(h.bytes(), f);
        };
    };
    const Case cases[] = {
        {"short", [](Door& d, Hello& h) { const auto f = h.fds(); return d.knock(h.bytes().first(10), f); },
         "10 bytes"},
        {"magic", with([](Hello& h) { h.h.magic = 1; }), "bad magic"},
        {"version", with([](Hello& h) { h.h.version = 9; }), "version 9"},
        {"domid 0", with([](Hello& h) { h.h.domid = 0; }), "domid"},
        {"ring size", with([](Hello& h) { h.h.ring_size = 3; }), "ring_size 3"},
        {"frame size", with([](Hello& h) { h.h.frame_bytes = 9000; }), "frame_bytes 9000"},
        {"table too big", with([](Hello& h) { h.h.grant_entries = 60000; }), "grant table"},
        {"rx ring over the table", with([](Hello& h) { h.h.rx_ring_off = 16; }), "rx ring"},
        {"rings overlap", with([](Hello& h) { h.h.tx_ring_off = h.h.rx_ring_off + 16; }), "tx ring"},
        {"ring past the end", with([](Hello& h) { h.h.tx_ring_off = (1u << 16) - 16; }), "tx ring"},
        {"data not pages", with([](Hello& h) { h.h.data_bytes = 5000; }), "data_bytes"},
        {"too few fds",
         [](Door& d, Hello& h) {
             auto f = h.fds();
             f.pop_back();
             return d.knock(h.bytes(), f);
         },
         "5 fds, want 6"},
        {"a pipe for a kick",
         [&](Door& d, Hello& h) {
             auto f = h.fds();
             f[kTxKick] = pipefd[0];
             return d.knock(h.bytes(), f);
         },
         "not an eventfd"},
        {"a semaphore eventfd for a kick",
         [&](Door& d, Hello& h) {
             auto f = h.fds();
             f[kRxKick] = semaphore;
             return d.knock(h.bytes(), f);
         },
         "semaphore"},
        {"data memfd unsealed", with_data_fd(unsealed), "not sealed"},
        {"data memfd short", with([](Hello& h) { h.h.data_bytes = 1u << 20; }), "shorter"},
        {"data memfd sealed against writing", with_data_fd(write_sealed), "sealed against writing"},
        {"data memfd open read-only", with_data_fd(read_only), "not open for writing"},
        {"data memfd of huge pages", with_data_fd(huge >= 0 ? huge : write_sealed),
         huge >= 0 ? "hugetlbfs" : "sealed against writing"},
        {"shared memfd short", with([](Hello& h) { h.h.shared_bytes = 1u << 20; }),
         "shared memfd"},
    };
    uint64_t n = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        Hello h;
        const std::string answer = c.knock(door, h);
        EXPECT_NE(answer.find(c.want), std::string::npos) << answer;
        ++n;
        EXPECT_EQ(door.nb->refused(), n);
    }
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    for (const int fd : {semaphore, unsealed, write_sealed, shrink_sealed, read_only, huge}) {
        ::close(fd);
    }
    // The door still opens for a proper frontend.
    NetfrontConfig fc;
    fc.socket_path = door.dir.path() + "/nb.sock";
    fc.store_dir = door.dir.path() + "/store";
    fc.domid = 7;
    fc.ring_size = 64;
    auto nf = Netfront::connect(fc);
    ASSERT_TRUE(nf.has_value()) << nf.error();
    auto r = (*nf)->run(Direction::Tx, 1000, std::chrono::seconds(10));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->frames, 1000u);
    (*nf)->close();
    const std::lock_guard g(door.mu);
    EXPECT_EQ(door.lines.size(), n) << "one refused line each, so far";
}

}  // namespace
}  // namespace pvnet::grant

namespace pvnet::grant {
namespace {

TEST(GrantHostileHello, AFloodOfIdleConnectionsMeetsTheGuestBound) {
    Door door;
    ASSERT_TRUE(door.dir.ok());
    const auto dial = [&] {
        const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::snprintf(a.sun_path, sizeof a.sun_path, "%s", (door.dir.path() + "/nb.sock").c_str());
        EXPECT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        return s;
    };
    // kMaxGuests connections that never say hello hold every guest slot ...
    std::vector<int> idle;
    for (std::size_t i = 0; i < Netback::kMaxGuests; ++i) idle.push_back(dial());
    // ... so the next one is closed at once, counted, and said why.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool refused_line = false;
    while (!refused_line && std::chrono::steady_clock::now() < deadline) {
        const int extra = dial();
        char b;
        (void)::recv(extra, &b, 1, 0);  // EOF when refused; the hello timeout (2 s) otherwise
        ::close(extra);
        const std::lock_guard g(door.mu);
        for (const std::string& l : door.lines) {
            if (l.find("guests already connected") != std::string::npos) refused_line = true;
        }
    }
    EXPECT_TRUE(refused_line);
    EXPECT_GE(door.nb->refused(), 1u);
    for (const int s : idle) ::close(s);
}

}  // namespace
}  // namespace pvnet::grant

namespace pvnet::grant {
namespace {

using namespace std::chrono_literals;

/// A pipe between the test and its child processes; reads wait at most `ms`.
/// Each message is one write of less than PIPE_BUF, read before the next.
struct Pipe {
    int r = -1, w = -1;
    Pipe() {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) == 0) {
            r = p[0];
            w = p[1];
        }
    }
    ~Pipe() {
        ::close(r);
        ::close(w);
    }
    void put(const std::string& m) const { (void)!::write(w, m.data(), m.size()); }
    std::string get(int ms) const {
        pollfd p{r, POLLIN, 0};
        if (::poll(&p, 1, ms) <= 0) return "";
        char b[512];
        const ssize_t n = ::read(r, b, sizeof b);
        return n > 0 ? std::string(b, static_cast<std::size_t>(n)) : "";
    }
};

/// `body` in a forked child process; its return is the exit code.
pid_t spawn(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    return pid;
}

/// The child's exit code, waiting at most `ms` (then it is killed): -1 if it
/// did not exit by itself.
int reap(pid_t pid, int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    int st = 0;
    while (::waitpid(pid, &st, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() >= until) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
            return -1;
        }
        std::this_thread::sleep_for(5ms);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void process_vm_copies(NetbackConfig& c) {
    c.fallback = GrantMode::Copy;
    c.offer_persistent = false;
    c.copy_via = mem::CopyVia::ProcessVm;
}

/// A frontend of the backend whose socket and store are in `dir`.
NetfrontConfig frontend(const std::string& dir, uint16_t domid) {
    NetfrontConfig fc;
    fc.socket_path = dir + "/nb.sock";
    fc.store_dir = dir + "/store";
    fc.domid = domid;
    fc.ring_size = 64;
    fc.offer_persistent = false;
    fc.handshake_ms = 1000;  // a refused hello is only seen as a handshake that never comes
    return fc;
}

NetfrontConfig frontend(const Door& d, uint16_t domid) { return frontend(d.dir.path(), domid); }

/// The backend's report line that contains `what`, waiting at most `ms`.
std::string line_with(Door& d, const std::string& what, int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        {
            const std::lock_guard g(d.mu);
            for (const std::string& l : d.lines) {
                if (l.find(what) != std::string::npos) return l;
            }
        }
        if (std::chrono::steady_clock::now() >= until) return "";
        std::this_thread::sleep_for(5ms);
    }
}

/// This process's fd of the netfront's data memfd (-1 if none).
int netfront_data_fd() {
    for (int fd = 3; fd < 1024; ++fd) {
        char path[64], target[128]{};
        std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (::readlink(path, target, sizeof target - 1) > 0 &&
            std::strstr(target, "memfd:pvnet-netfront-data") != nullptr) {
            return fd;
        }
    }
    return -1;
}

/// Where this process maps the netfront's data memfd (0 if nowhere).
uint64_t netfront_data_base() {
    FILE* f = std::fopen("/proc/self/maps", "re");
    if (f == nullptr) return 0;
    char line[512];
    uint64_t base = 0;
    while (base == 0 && std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strstr(line, "memfd:pvnet-netfront-data") != nullptr) {
            base = std::strtoull(line, nullptr, 16);
        }
    }
    std::fclose(f);
    return base;
}

// Without the check, the backend wrote every rx frame at remote_base + the
// frame's offset inside itself, at an address the frontend chose.
TEST(GrantHostileProcessVm, AHelloNamingTheBackendsOwnPidIsRefusedAndNothingIsWritten) {
    Door door(process_vm_copies);
    ASSERT_TRUE(door.dir.ok());
    constexpr std::size_t kCanary = 2u << 20;  // more than the netfront's data memfd
    auto* canary = static_cast<unsigned char*>(
        ::mmap(nullptr, kCanary, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(canary, MAP_FAILED);
    std::memset(canary, 0xc5, kCanary);
    const pid_t self = ::getpid();
    Pipe said;
    const pid_t child = spawn([&] {
        NetfrontConfig fc = frontend(door, 5);
        fc.edit_hello = [&](GrantHello& h) {
            h.pid = static_cast<uint32_t>(self);
            h.remote_base = reinterpret_cast<uint64_t>(canary);
        };
        auto nf = Netfront::connect(fc);
        if (!nf) {
            said.put(nf.error());
            return 0;
        }
        (void)(*nf)->run(Direction::Rx, 2000, 1s);  // what the backend would copy back
        return 1;
    });
    EXPECT_EQ(reap(child, 10000), 0) << "the backend accepted the hello";
    const std::string why = "hello: pid " + std::to_string(self) + " is not the connected peer's";
    const std::string refused = line_with(door, "refused: ", 0);
    EXPECT_NE(refused.find(why), std::string::npos) << refused;
    const std::string front = said.get(0);
    EXPECT_EQ(front.rfind("backend refused: " + why, 0), 0u) << "the frontend's error: " << front;
    EXPECT_EQ(door.nb->refused(), 1u);
    std::size_t written = 0;
    for (std::size_t i = 0; i < kCanary; ++i) written += canary[i] != 0xc5;
    EXPECT_EQ(written, 0u) << "bytes of the backend's own memory written by its copies";
    ::munmap(canary, kCanary);
}

TEST(GrantHostileProcessVm, ARemoteBaseThatIsNotThePeersSharedMappingOfTheMemfdIsRefused) {
    Door door(process_vm_copies);
    ASSERT_TRUE(door.dir.ok());
    struct Case {
        const char* name;
        std::function<void(GrantHello&)> spoil;
        const char* want;
    };
    const auto map_fd = [](const GrantHello& h, int prot, int flags) {
        void* p = ::mmap(nullptr, h.data_bytes, prot, flags, netfront_data_fd(), 0);
        return p == MAP_FAILED ? uint64_t{0} : reinterpret_cast<uint64_t>(p);
    };
    const Case cases[] = {
        {"anonymous memory",
         [](GrantHello& h) {
             h.remote_base = reinterpret_cast<uint64_t>(::mmap(nullptr, h.data_bytes,
                                                                PROT_READ | PROT_WRITE,
                                                                MAP_SHARED | MAP_ANONYMOUS, -1, 0));
         },
         "is not of the data memfd"},
        {"a page further", [](GrantHello& h) { h.remote_base += 4096; }, "is of data memfd offset"},
        {"a private mapping of the memfd",
         [&](GrantHello& h) { h.remote_base = map_fd(h, PROT_READ | PROT_WRITE, MAP_PRIVATE); },
         "not shared read-write"},
        {"a read-only mapping of the memfd",
         [&](GrantHello& h) { h.remote_base = map_fd(h, PROT_READ, MAP_SHARED); },
         "not shared read-write"},
        {"half of it unmapped",
         [](GrantHello& h) {
             ::munmap(reinterpret_cast<void*>(h.remote_base + h.data_bytes / 2), h.data_bytes / 2);
         },
         "nothing of the data memfd is mapped at"},
        {"not page-aligned", [](GrantHello& h) { h.remote_base += 8; }, "not page-aligned"},
        {"another process's pid", [](GrantHello& h) { h.pid = 1; }, "hello: pid 1 is not"},
    };
    const auto quick = [&](uint16_t domid) {
        NetfrontConfig fc = frontend(door, domid);
        fc.handshake_ms = 300;  // refused at once: nothing to wait for
        return fc;
    };
    uint64_t n = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        {
            const std::lock_guard g(door.mu);
            door.lines.clear();
        }
        const pid_t child = spawn([&] {
            // A domid each: a frontend that gave up leaves its state Closing.
            NetfrontConfig fc = quick(static_cast<uint16_t>(10 + n));
            fc.edit_hello = c.spoil;
            return Netfront::connect(fc) ? 1 : 0;
        });
        EXPECT_EQ(reap(child, 10000), 0) << "the backend accepted the hello";
        const std::string refused = line_with(door, "refused: ", 0);
        EXPECT_NE(refused.find(c.want), std::string::npos) << refused;
        EXPECT_EQ(door.nb->refused(), ++n);
    }
    // The same frontend, unspoiled, is served: every frame copied both ways.
    auto nf = Netfront::connect(frontend(door, 6));
    ASSERT_TRUE(nf.has_value()) << nf.error();
    for (const Direction d : {Direction::Tx, Direction::Rx}) {
        auto r = (*nf)->run(d, 500, 10s);
        ASSERT_TRUE(r.has_value()) << r.error();
        EXPECT_EQ(r->frames, 500u);
    }
    (*nf)->close();
    const std::string served = line_with(door, "guest domid=6 ", 5000);
    EXPECT_NE(served.find(" grant_errors=0 "), std::string::npos) << served;
    EXPECT_NE(served.find(" peer_gone=0"), std::string::npos) << served;
}

// The frontend process that connected exits while its child keeps the
// socket and the ring; its pid then goes to another process (clone3 with
// set_tid makes that happen at once, not after the pid space wraps). The
// backend must stop naming the pid when the process exits: without that,
// the child's rx buffers had their frames written into the newcomer.
TEST(GrantHostileProcessVm, CopiesStopWhenThePeerExitsSoItsPidGoingToAnotherProcessGetsNothing) {
    Door door(process_vm_copies);
    ASSERT_TRUE(door.dir.ok());
    Pipe from_g, to_g, from_v, to_v;
    const pid_t f = spawn([&] {
        auto nf = Netfront::connect(frontend(door, 8));
        if (!nf) return 2;
        const pid_t g = ::fork();  // holds the socket and the memory; f exits
        if (g != 0) ::_exit(g > 0 ? 0 : 3);
        const uint64_t base = netfront_data_base();
        from_g.put(std::to_string(base));
        if (to_g.get(10000) != "go") ::_exit(4);
        auto r = (*nf)->run(Direction::Rx, 2000, 500ms);
        from_g.put(r ? std::to_string(r->frames) : r.error());
        ::_exit(0);
    });
    ASSERT_EQ(reap(f, 10000), 0);
    const uint64_t base = std::strtoull(from_g.get(10000).c_str(), nullptr, 10);
    ASSERT_NE(base, 0u);
    const std::string gone = line_with(door, "guest domid=8 ", 3000);
    EXPECT_NE(gone.find(" peer_gone=1"), std::string::npos)
        << "the backend did not notice its peer exit: " << gone;

    // The newcomer: f's pid, memory at f's remote_base, filled with a canary.
    constexpr std::size_t kBytes = 6u * 64 * 4096;  // the netfront's data memfd
    clone_args args{};
    const auto tid = static_cast<pid_t>(f);
    args.set_tid = reinterpret_cast<uint64_t>(&tid);
    args.set_tid_size = 1;
    args.exit_signal = SIGCHLD;
    const long v = ::syscall(SYS_clone3, &args, sizeof args);
    if (v == 0) {
        // Only system calls here: a copy of a threaded process, without fork's
        // handlers, that leaves without the exit handlers (a sanitizer's too).
        const auto quit = [](int code) { ::syscall(SYS_exit_group, code); };
        void* p = ::mmap(reinterpret_cast<void*>(base), kBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p == MAP_FAILED) quit(5);
        std::memset(p, 0xc5, kBytes);
        (void)!::write(from_v.w, "ready", 5);
        char b[8];
        pollfd pf{to_v.r, POLLIN, 0};
        (void)::poll(&pf, 1, 20000);
        (void)!::read(to_v.r, b, sizeof b);
        const auto* c = static_cast<const unsigned char*>(p);
        for (std::size_t i = 0; i < kBytes; ++i) {
            if (c[i] != 0xc5) quit(1);
        }
        quit(0);
    }
    if (v < 0) {
        const int err = errno;
        to_g.put("stop");
        (void)reap(static_cast<pid_t>(f), 0);
        GTEST_SKIP() << "clone3 with set_tid: " << std::strerror(err);
    }
    ASSERT_EQ(v, f);
    ASSERT_EQ(from_v.get(10000), "ready");
    to_g.put("go");
    const std::string rx = from_g.get(10000);  // g's rx phase: frames received, or why not
    to_v.put("check");
    EXPECT_EQ(reap(static_cast<pid_t>(v), 10000), 0)
        << "the newcomer's memory was written (g's rx phase: " << rx << ")";
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// vm.max_map_count exhausted in the backend's process (a forked child, so
// the test process keeps its mappings): every mapping the backend needs
// next fails, starting with a guest thread's stack. Each guest is refused
// or served, counted, and the backend outlives them all; without the fix a
// thread that could not start ended it in std::terminate.
TEST(GrantHostileBackend, ExhaustedMapCountRefusesGuestsButNeverEndsTheBackend) {
    if (kSanitized) GTEST_SKIP() << "the sanitizers' own allocators abort without mappings";
    test::TempDir dir;
    ASSERT_TRUE(dir.ok());
    Pipe from_b, to_b;
    const std::vector<std::size_t> headroom = {0, 1, 2, 4, 8, 16, 32};
    const pid_t b = spawn([&] {
        NetbackConfig cfg;
        cfg.socket_path = dir.path() + "/nb.sock";
        cfg.store_dir = dir.path() + "/store";
        cfg.handshake_ms = 1000;
        // Copy mode: a grant needs no mapping per packet, so a running
        // device serves on (a broken queue's report allocates in
        // src/backend, which is not this test's subject).
        cfg.fallback = GrantMode::Copy;
        cfg.offer_persistent = false;
        auto nb = Netback::create(cfg);
        if (!nb) return 2;
        std::atomic<bool> stop{false};
        std::thread loop([&] { (*nb)->run(stop, [](const std::string&) {}); });
        std::vector<void*> filler;
        filler.reserve(1u << 17);
        for (const std::size_t h : headroom) {
            // Alternate protections, so no two neighbours merge into one mapping.
            for (;;) {
                void* p = ::mmap(nullptr, 4096, filler.size() % 2 ? PROT_READ : PROT_NONE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) break;
                filler.push_back(p);
            }
            for (std::size_t i = 0; i < h && !filler.empty(); ++i) {
                ::munmap(filler.back(), 4096);
                filler.pop_back();
            }
            from_b.put("full");
            const std::string done = to_b.get(20000);
            for (void* p : filler) ::munmap(p, 4096);
            filler.clear();
            if (done != "done") break;
        }
        from_b.put("free");
        (void)to_b.get(20000);
        stop.store(true);
        loop.join();
        from_b.put("refused=" + std::to_string((*nb)->refused()));
        return 0;
    });
    uint16_t domid = 20;
    for (const std::size_t h : headroom) {
        SCOPED_TRACE("mappings left: " + std::to_string(h));
        ASSERT_EQ(from_b.get(20000), "full");
        if (auto nf = Netfront::connect(frontend(dir.path(), domid++))) {
            (void)(*nf)->run(Direction::Tx, 64, 500ms);  // may break: no mapping for a grant
            (*nf)->close();
        }
        ASSERT_EQ(::kill(b, 0), 0) << "the backend died";
        to_b.put("done");
    }
    ASSERT_EQ(from_b.get(20000), "free");
    // Mappings back: the same backend serves a guest in full.
    NetfrontConfig fc = frontend(dir.path(), domid);
    fc.handshake_ms = 5000;
    auto nf = Netfront::connect(fc);
    EXPECT_TRUE(nf.has_value()) << nf.error();
    if (nf) {
        auto r = (*nf)->run(Direction::Tx, 1000, 10s);
        EXPECT_TRUE(r.has_value()) << r.error();
        EXPECT_EQ(r ? r->frames : 0u, 1000u);
        (*nf)->close();
    }
    to_b.put("stop");
    const std::string summary = from_b.get(20000);
    EXPECT_EQ(reap(b, 20000), 0) << "the backend did not exit cleanly";
    EXPECT_EQ(summary.rfind("refused=", 0), 0u) << summary;
    EXPECT_GE(std::strtoull(summary.c_str() + 8, nullptr, 10), 1u)
        << "no mappings left must refuse at least the first guest";
}

}  // namespace
}  // namespace pvnet::grant
