// pvnet's front-end (bench::VuLoop over vhost_user::Frontend) against DPDK's
// vhost-user back-end: dpdk-testpmd with a net_vhost port in macswap mode
// loops every frame back. 200000 sequence-numbered frames, each back in order
// and intact, and testpmd's own counters agree: its port received and sent
// exactly the frames sent. Both socket roles: testpmd listens (net_vhost's
// default), and testpmd connects (client=1) to the Frontend listening.
//
// testpmd runs with --no-huge (memfd memory, no root), its own --file-prefix,
// --no-pci, and two lcores on one CPU: the main lcore (its command line, idle
// but for our commands) and the one forwarding lcore. `-l 0` alone is
// refused ("No cores defined for forwarding": testpmd never forwards on its
// main lcore). It is interactive: `show port stats all` and `stop` (the
// forward stats), then `quit`; its stdout is a pipe, so they are read once it exits.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/bench/vu_loop.h"
#include "pvnet/lab/child.h"
#include "pvnet/lab/dpdk_telemetry.h"
#include "pvnet/vhost_user/protocol.h"
#include "pvnet/virtio/virtio_config.h"
#include "vu_loop_checks.h"

#ifndef PVNET_TESTPMD
#define PVNET_TESTPMD ""
#endif

namespace pvnet::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// TSan's guest moves ~0.05 Mpps (200000 frames: 5 s); ASan's ~0.18 Mpps.
#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kFrames = 50'000;
#else
constexpr uint64_t kFrames = 200'000;
#endif
constexpr std::string_view kPrompt = "testpmd> ";

/// The last CPU this process may run on: testpmd's two lcores share it, the
/// test's guest thread is left the others.
int testpmd_cpu() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    std::size_t last = 0;
    for (std::size_t c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) last = c;
    }
    return static_cast<int>(last);
}

/// One interactive dpdk-testpmd with a net_vhost port; stopped (quit, then
/// SIGTERM, then SIGKILL, each bounded), its socket and EAL runtime
/// directory removed on every exit path.
class Testpmd {
public:
    Testpmd(std::string tag, bool client)
        : prefix_("pvnet-vu-tp-" + std::to_string(::getpid()) + "-" + tag),
          sock_("/tmp/" + prefix_ + ".sock"),
          client_(client) {}
    ~Testpmd() {
        stop();
        std::error_code ec;
        std::filesystem::remove(sock_, ec);
        std::filesystem::remove_all(lab::dpdk_runtime_dir(prefix_), ec);
    }
    const std::string& sock() const { return sock_; }

    std::vector<std::string> argv() const {
        const std::string cpu = std::to_string(testpmd_cpu());
        std::string vdev = "net_vhost0,iface=" + sock_ + ",queues=1";
        if (client_) vdev += ",client=1";
        return {PVNET_TESTPMD, "--no-huge", "-m", "256", "--file-prefix", prefix_,
                "--lcores=0@" + cpu + ",1@" + cpu, "--no-pci", "--vdev", vdev, "--",
                "-i", "--nb-cores=1", "--forward-mode=macswap", "--auto-start",
                "--total-num-mbufs=4096", "--rxd=256", "--txd=256"};
    }

    /// Spawns it and waits for its command line (forwarding started).
    void start() {
        auto c = lab::Child::spawn(argv(), {.stdin_socket = true});
        ASSERT_TRUE(c) << c.error();
        child_.emplace(std::move(*c));
        ASSERT_TRUE(wait_prompt(0, 20s)) << "testpmd: no prompt; its output ends:\n"
                                         << child_->output_tail();
    }

    /// Runs `cmds` on its command line, then `quit`, and waits (bounded) for it to
    /// exit: what it printed from then on, with its exit status. (Its stdout is a
    /// pipe, so what it prints is buffered until it exits; the prompts are not.)
    std::pair<lab::ExitStatus, std::string> quit_after(const std::vector<std::string>& cmds) {
        const std::size_t from = child_->output().size();
        for (const std::string& c : cmds) child_->send_line(c);
        stop();
        return {child_->exit_status(), child_->output().substr(from)};
    }

    void stop() {
        if (!child_) return;
        if (child_->running()) {
            child_->send_line("quit");
            child_->close_stdin();
            lab::Child* k = &*child_;
            lab::Child::pump(std::span(&k, 1), Clock::now() + 5s, [&] { return !k->running(); });
        }
        child_->stop(2s);
    }
    std::string output_tail() const { return child_ ? child_->output_tail(8192) : ""; }

private:
    uint64_t prompts() const {
        uint64_t n = 0;
        const std::string& out = child_->output();
        for (std::size_t at = 0; (at = out.find(kPrompt, at)) != std::string::npos; at += kPrompt.size()) ++n;
        return n;
    }
    bool wait_prompt(uint64_t seen, std::chrono::milliseconds limit) {
        lab::Child* k = &*child_;
        bool died = false;
        const bool ok = lab::Child::pump(std::span(&k, 1), Clock::now() + limit, [&] {
            if (prompts() > seen) return true;
            died = !k->running() && !k->output_open();
            return died;
        });
        return ok && !died;
    }

    std::string prefix_, sock_;
    bool client_;
    std::optional<lab::Child> child_;
};

/// `name: <number>` in `text` (the first after `from`); nullopt if absent.
std::optional<uint64_t> field(const std::string& text, const std::string& name,
                              std::size_t from = 0) {
    const std::size_t at = text.find(name + ":", from);
    if (at == std::string::npos) return std::nullopt;
    std::size_t p = at + name.size() + 1;
    while (p < text.size() && text[p] == ' ') ++p;
    if (p >= text.size() || text[p] < '0' || text[p] > '9') return std::nullopt;
    return std::stoull(text.substr(p));
}

std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

/// The protocol features pvnet's Frontend uses, as testpmd's offer left them.
std::string proto_names(uint64_t p) {
    using namespace vhost_user;
    std::string s;
    for (const auto& [b, n] : {std::pair{kProtoMq, "MQ"}, std::pair{kProtoReplyAck, "REPLY_ACK"},
                               std::pair{kProtoInflightShmfd, "INFLIGHT_SHMFD"}}) {
        if ((p & bit(b)) != 0) s += (s.empty() ? "" : ",") + std::string(n);
    }
    return s.empty() ? "none" : s;
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (!pred()) {
        if (Clock::now() > end) return false;
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

void run_against_testpmd(bool frontend_listens) {
    const std::string exe = PVNET_TESTPMD;
    ASSERT_FALSE(exe.empty() || exe.find("NOTFOUND") != std::string::npos ||
                 ::access(exe.c_str(), X_OK) != 0)
        << "dpdk-testpmd not found at configure time ('" << exe
        << "'); `make deps` installs it (Debian: dpdk), then re-run cmake";
    const auto t0 = Clock::now();
    Testpmd tp(frontend_listens ? "client" : "server", frontend_listens);
    VuLoopConfig cfg;
    cfg.fe.path = tp.sock();
    cfg.fe.server = frontend_listens;
    cfg.fe.connect_timeout_ms = 10'000;
    // testpmd listening answers the first request up to ~1 s late (strace: GET_FEATURES sent
    // right after connect(), the reply 0.88 s on): DPDK's vhost event thread polls its fds with
    // a 1 s timeout and picks up the listening socket added after it started only then.
    cfg.fe.reply_timeout_ms = 5000;
    cfg.reconnect = false;  // testpmd going away is a failure here
    std::string err;
    std::unique_ptr<VuLoop> loop;
    if (frontend_listens) {
        // The Frontend listens first (create binds at once); testpmd connects when its port starts.
        std::thread t([&] { loop = VuLoop::create(cfg, err); });
        std::this_thread::sleep_for(50ms);
        tp.start();
        t.join();
        ASSERT_FALSE(::testing::Test::HasFatalFailure());
    } else {
        ASSERT_NO_FATAL_FAILURE(tp.start());
        loop = VuLoop::create(cfg, err);
    }
    ASSERT_TRUE(loop) << err << "\ntestpmd's output ends:\n" << tp.output_tail();
    const auto& fe = loop->frontend();
    std::printf("negotiated: features=%s protocol=%s (%s) queue_num=%u\n", hex(fe.features()).c_str(),
                hex(fe.protocol_features()).c_str(), proto_names(fe.protocol_features()).c_str(),
                fe.queue_num());

    loop->run(kFrames);
    const bool all_back =
        wait_for([&] { return loop->done() && loop->received() >= kFrames; }, 30s);
    const VuLoopResult r = loop->finish(2);
    std::printf("%s: sent=%llu back=%llu lost=%llu reordered=%llu dup=%llu corrupt=%llu "
                "ring_full=%llu inflight=%d %.2f Mpps in %.2f s\n",
                frontend_listens ? "testpmd connects" : "testpmd listens",
                static_cast<unsigned long long>(r.sent),
                static_cast<unsigned long long>(r.sink.sink_pkts),
                static_cast<unsigned long long>(r.sink.sink_lost),
                static_cast<unsigned long long>(r.sink.sink_reordered),
                static_cast<unsigned long long>(r.sink.sink_duplicates),
                static_cast<unsigned long long>(r.sink.sink_drop_corrupt),
                static_cast<unsigned long long>(r.tx_ring_full), r.inflight ? 1 : 0, r.mpps,
                r.seconds);
    EXPECT_TRUE(all_back) << "back " << loop->received() << " of " << kFrames;
    expect_every_frame_back(r, kFrames);
    EXPECT_EQ(r.tx_ring_full, 0u);
    EXPECT_EQ(r.losses, 0u);
    using namespace virtio;
    EXPECT_TRUE(has_feature(r.features, VIRTIO_F_VERSION_1));

    // testpmd's own books: its port took every frame from the tx ring and put each in the rx
    // ring (`show port stats all`), and macswap forwarded each (the forward stats `stop` prints).
    const auto [exit, out] = tp.quit_after({"show port stats all", "stop"});
    EXPECT_TRUE(exit.ok()) << "testpmd " << exit.to_string() << "; output ends:\n" << tp.output_tail();
    const std::size_t nic = out.find("NIC statistics for port 0");
    ASSERT_NE(nic, std::string::npos) << "no port stats; testpmd's output ends:\n" << tp.output_tail();
    const std::string stats = out.substr(nic, out.find("Throughput", nic) - nic);
    const auto port_rx = field(stats, "RX-packets"), port_tx = field(stats, "TX-packets");
    std::printf("testpmd port 0: RX-packets=%llu TX-packets=%llu RX-errors=%llu TX-errors=%llu\n",
                static_cast<unsigned long long>(port_rx.value_or(0)),
                static_cast<unsigned long long>(port_tx.value_or(0)),
                static_cast<unsigned long long>(field(stats, "RX-errors").value_or(0)),
                static_cast<unsigned long long>(field(stats, "TX-errors").value_or(0)));
    ASSERT_TRUE(port_rx && port_tx) << stats;
    EXPECT_EQ(*port_rx, kFrames) << stats;
    EXPECT_EQ(*port_tx, kFrames) << stats;
    EXPECT_EQ(field(stats, "RX-errors"), 0u) << stats;
    EXPECT_EQ(field(stats, "TX-errors"), 0u) << stats;
    // The forwarding engine's: macswap received and sent each one, dropped none.
    const std::size_t at = out.find("Forward statistics for port 0");
    ASSERT_NE(at, std::string::npos) << "no forward stats; testpmd's output ends:\n" << tp.output_tail();
    const std::string fwd = out.substr(at, out.find("Accumulated", at) - at);
    std::printf("testpmd macswap: RX-packets=%llu TX-packets=%llu RX-dropped=%llu TX-dropped=%llu\n",
                static_cast<unsigned long long>(field(fwd, "RX-packets").value_or(0)),
                static_cast<unsigned long long>(field(fwd, "TX-packets").value_or(0)),
                static_cast<unsigned long long>(field(fwd, "RX-dropped").value_or(0)),
                static_cast<unsigned long long>(field(fwd, "TX-dropped").value_or(0)));
    EXPECT_EQ(field(fwd, "RX-packets"), kFrames) << fwd;
    EXPECT_EQ(field(fwd, "TX-packets"), kFrames) << fwd;
    EXPECT_EQ(field(fwd, "RX-dropped"), 0u) << fwd;
    EXPECT_EQ(field(fwd, "TX-dropped"), 0u) << fwd;
    std::printf("run time %.2f s (testpmd start to quit)\n",
                std::chrono::duration<double>(Clock::now() - t0).count());
}

TEST(Testpmd, NetVhostListensFramesCountedOnBothEnds) { run_against_testpmd(false); }

TEST(Testpmd, NetVhostClientFrontendListensFramesCountedOnBothEnds) { run_against_testpmd(true); }

}  // namespace
}  // namespace pvnet::bench
