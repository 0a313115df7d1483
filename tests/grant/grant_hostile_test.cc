// A hostile frontend at the grant backend's door (issue 13): hellos with bad
// sizes, fields and fds. Each is refused with an error that names what is
// wrong, counted, and the backend goes on serving the next guest.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
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

    Door() {
        NetbackConfig cfg;
        cfg.socket_path = dir.path() + "/nb.sock";
        cfg.store_dir = dir.path() + "/store";
        cfg.handshake_ms = 2000;
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
    const int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC);
    ASSERT_GE(unsealed, 0);
    ASSERT_EQ(::ftruncate(unsealed, 1u << 16), 0);
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
        {"data memfd unsealed",
         [&](Door& d, Hello& h) {
             auto f = h.fds();
             f[kDataFd] = unsealed;
             return d.knock(h.bytes(), f);
         },
         "not sealed"},
        {"data memfd short", with([](Hello& h) { h.h.data_bytes = 1u << 20; }), "shorter"},
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
    ::close(unsealed);
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
