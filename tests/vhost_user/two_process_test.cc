// pvnet's front-end (bench::VuLoop over vhost_user::Frontend) against a real
// `pvnet serve --macswap` process: a million sequence-checked frames, then
// the back-end killed (SIGKILL) and restarted ten times under traffic, in
// both socket roles, and a graceful stop (SIGTERM) with a new back-end.
// Every frame sent is back, or counted lost by the sink's sequence check.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fstream>
#include <nlohmann/json.hpp>

#include "pvnet/bench/vu_loop.h"
#include "pvnet/lab/child.h"
#include "pvnet/lab/tool_output.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/util/clock.h"
#include "vu_loop_checks.h"

namespace pvnet::bench {
namespace {

using namespace std::chrono_literals;

std::string sock_path(const char* tag) {
    return "/tmp/pvnet_2p_" + std::to_string(::getpid()) + "_" + tag + ".sock";
}

/// One `pvnet serve --macswap` at a time on `sock`; restartable. Each life
/// writes its counters every 50 ms (--json-stats), so what a life recovered
/// from the inflight log is known even after its SIGKILL.
class Backend {
public:
    Backend(std::string sock, bool client, std::vector<std::string> extra = {})
        : sock_(std::move(sock)), json_(sock_ + ".json"), client_(client), extra_(std::move(extra)) {}
    ~Backend() {
        if (child_) child_->stop(1s);
        if (!client_) ::unlink(sock_.c_str());
        ::unlink(json_.c_str());
    }
    /// In-flight chains the lives so far found in the log and completed as dropped.
    uint64_t tx_inflight_dropped = 0, rx_inflight_dropped = 0;
    void start() {
        ::unlink(json_.c_str());
        std::vector<std::string> argv = {PVNET_EXE, "serve", "--vhost-user", sock_, "--macswap",
                                         "--json-stats", json_, "--stats-interval", "0.05"};
        if (client_) argv.push_back("--client");
        argv.insert(argv.end(), extra_.begin(), extra_.end());
        auto c = lab::Child::spawn(argv);
        ASSERT_TRUE(c) << c.error();
        child_.emplace(std::move(*c));
        ASSERT_TRUE(child_->wait_for_line("ready", 10s)) << child_->output_tail();
    }
    /// SIGKILL: nothing of the back-end runs on.
    void kill() {
        ::kill(child_->pid(), SIGKILL);
        child_->finish(5s);
        child_.reset();
        add_counts();
    }
    /// SIGTERM: serve stops its rings at a consistent point and exits 0.
    std::string term() {
        const auto st = child_->stop(5s);
        EXPECT_TRUE(st.ok()) << st.to_string() << child_->output_tail();
        std::string out = child_->output();
        child_.reset();
        add_counts();
        return out;
    }

private:
    void add_counts() {
        std::ifstream in(json_);
        const auto j = nlohmann::json::parse(in, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << "no counters from a life of pvnet serve in " << json_;
        const auto& v = j["devices"][0]["queues"][0]["vhost"];
        tx_inflight_dropped += v["tx_inflight_dropped"].get<uint64_t>();
        rx_inflight_dropped += v["rx_inflight_dropped"].get<uint64_t>();
    }
    std::string sock_, json_;
    bool client_;
    std::vector<std::string> extra_;
    std::optional<lab::Child> child_;
};

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

void print(const char* name, const VuLoopResult& r) {
    std::printf("%s: sent=%llu back=%llu lost=%llu reordered=%llu dup=%llu corrupt=%llu "
                "rx_empty=%llu reconnects=%llu inflight=%d %.2f Mpps\n",
                name, static_cast<unsigned long long>(r.sent),
                static_cast<unsigned long long>(r.sink.sink_pkts),
                static_cast<unsigned long long>(r.sink.sink_lost),
                static_cast<unsigned long long>(r.sink.sink_reordered),
                static_cast<unsigned long long>(r.sink.sink_duplicates),
                static_cast<unsigned long long>(r.sink.sink_drop_corrupt),
                static_cast<unsigned long long>(r.rx_bad_len),
                static_cast<unsigned long long>(r.reconnects), r.inflight ? 1 : 0, r.mpps);
    for (std::size_t k = 0; k < r.outages.size(); ++k) {
        std::printf("  outage %zu: traffic stopped %.1f ms, set up again %.1f ms after the loss\n",
                    k + 1, r.outages[k].stopped_ms, r.outages[k].setup_ms);
    }
}

VuLoopConfig loop_config(const std::string& sock, bool server) {
    VuLoopConfig c;
    c.fe.path = sock;
    c.fe.server = server;
    c.fe.connect_timeout_ms = 10'000;
    c.reconnect_give_up_s = 20;
    return c;
}

/// A million; a fifth under ThreadSanitizer, whose guest thread moves ~20 times fewer frames.
#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kMillionFrames = 200'000;
#else
constexpr uint64_t kMillionFrames = 1'000'000;
#endif

TEST(TwoProcess, MillionFramesComeBackInOrderAndIntact) {
    const std::string sock = sock_path("million");
    Backend be(sock, false);
    ASSERT_NO_FATAL_FAILURE(be.start());
    std::string err;
    auto loop = VuLoop::create(loop_config(sock, false), err);
    ASSERT_TRUE(loop) << err;
    constexpr uint64_t kFrames = kMillionFrames;
    loop->run(kFrames);
    ASSERT_TRUE(wait_for([&] { return loop->done() && loop->received() >= kFrames; }, 120s))
        << "back " << loop->received();
    const VuLoopResult r = loop->finish();
    print("million", r);
    expect_every_frame_back(r, kFrames);
    EXPECT_EQ(r.losses, 0u);
    be.term();
}

/// `restarts` SIGKILLs under traffic, each after frames flowed again.
void kill_and_restart(bool frontend_listens, int restarts, bool inflight = true) {
    const std::string sock = sock_path(frontend_listens ? "kill_srv" : "kill_cli");
    Backend be(sock, frontend_listens);
    std::string err;
    std::unique_ptr<VuLoop> loop;
    if (frontend_listens) {
        // The front-end listens first; the back-end connects when it starts.
        std::thread t([&] {
            VuLoopConfig c = loop_config(sock, true);
            c.fe.inflight = inflight;
            loop = VuLoop::create(c, err);
        });
        std::this_thread::sleep_for(50ms);
        ASSERT_NO_FATAL_FAILURE(be.start());
        t.join();
    } else {
        ASSERT_NO_FATAL_FAILURE(be.start());
        VuLoopConfig c = loop_config(sock, false);
        c.fe.inflight = inflight;
        loop = VuLoop::create(c, err);
    }
    ASSERT_TRUE(loop) << err;
    EXPECT_EQ(loop->frontend().has_inflight(), inflight);
    loop->run(0);
    for (int k = 1; k <= restarts; ++k) {
        const uint64_t before = loop->received();
        ASSERT_TRUE(wait_for([&] { return loop->received() >= before + 2000; }, 20s))
            << "restart " << k << ": no traffic";
        std::this_thread::sleep_for(120ms);  // a life long enough to write its counters
        be.kill();
        ASSERT_NO_FATAL_FAILURE(be.start());
        ASSERT_TRUE(wait_for([&] { return loop->reconnects() >= static_cast<uint64_t>(k); }, 20s))
            << "restart " << k << ": not reconnected";
    }
    const uint64_t before = loop->received();
    ASSERT_TRUE(wait_for([&] { return loop->received() >= before + 2000; }, 20s));
    const VuLoopResult r = loop->finish();
    be.term();
    print(frontend_listens ? "kill, front-end listens" : "kill, back-end listens", r);
    std::printf("  in flight at the kills, completed as dropped by the next life: tx %llu rx %llu\n",
                static_cast<unsigned long long>(be.tx_inflight_dropped),
                static_cast<unsigned long long>(be.rx_inflight_dropped));
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.reconnects, static_cast<uint64_t>(restarts));
    ASSERT_EQ(r.outages.size(), static_cast<std::size_t>(restarts));
    for (const VuOutage& o : r.outages) {
        EXPECT_TRUE(o.recovered);
        EXPECT_GT(o.stopped_ms, 0.0);  // frames came back after each restart
    }
    // Delivered or counted: the sink's books balance (r.ok), nothing corrupt.
    EXPECT_EQ(r.sink.sink_drop_corrupt, 0u);
    // What a dead back-end held is lost, never more than the rings and the window hold.
    EXPECT_LE(r.sink.sink_lost, static_cast<uint64_t>(restarts) * (256 + 256 + 128));
    if (r.inflight) {
        // Its in-flight buffers were completed as dropped, never used twice: each rx buffer
        // the next life returned empty is one the guest saw as such.
        EXPECT_EQ(r.sink.sink_duplicates, 0u);
        EXPECT_EQ(r.rx_bad_len, be.rx_inflight_dropped);
    }
}

/// Ten restarts; three under a sanitizer (each life is slower to start there, and the
/// release run already covers ten: make test's time goes to the other trees' own defects).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kTenRestarts = 3;
#else
constexpr int kTenRestarts = 10;
#endif

TEST(TwoProcess, TenBackendKillsUnderTrafficBackendListens) { kill_and_restart(false, kTenRestarts); }

TEST(TwoProcess, ThreeBackendKillsUnderTrafficFrontendListens) { kill_and_restart(true, 3); }

/// A front-end without INFLIGHT_SHMFD: the rings restart from their used.idx, so a chain the
/// dead back-end had popped and not used is processed again (a frame it had already sent
/// then arrives twice: the sink counts it). Still balanced, nothing corrupt.
TEST(TwoProcess, KillsWithoutInflightRecoverFromTheUsedIndex) { kill_and_restart(false, 5, false); }

/// serve --ctrl-vq: the driver's own control queue crosses the socket (vring 2N), and an
/// ethtool -C on it reaches the device in the other process.
TEST(TwoProcess, ControlQueueAcrossProcesses) {
    const std::string sock = sock_path("ctrl");
    Backend be(sock, false, {"--ctrl-vq"});
    ASSERT_NO_FATAL_FAILURE(be.start());
    std::string err;
    auto loop = VuLoop::create(loop_config(sock, false), err);
    ASSERT_TRUE(loop) << err;
    EXPECT_NE(loop->frontend().features() & virtio::feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ), 0u);
    loop->run(100'000);
    EXPECT_TRUE(loop->set_coalesce({16, 20}, {32, 40}));
    ASSERT_TRUE(wait_for([&] { return loop->done() && loop->received() >= 100'000; }, 60s));
    const VuLoopResult r = loop->finish();
    EXPECT_TRUE(r.ok) << r.error;
    const std::string out = be.term();
    // Both NOTF_COAL commands were applied by serve's device.
    EXPECT_EQ(lab::key_value(out, "coalesce_updates").value_or(0), 2u) << out;
}

TEST(TwoProcess, GracefulStopUsesNoBufferTwice) {
    const std::string sock = sock_path("term");
    Backend be(sock, false);
    ASSERT_NO_FATAL_FAILURE(be.start());
    std::string err;
    auto loop = VuLoop::create(loop_config(sock, false), err);
    ASSERT_TRUE(loop) << err;
    loop->run(0);
    for (int k = 1; k <= 2; ++k) {
        const uint64_t before = loop->received();
        ASSERT_TRUE(wait_for([&] { return loop->received() >= before + 2000; }, 20s));
        be.term();
        ASSERT_NO_FATAL_FAILURE(be.start());
        ASSERT_TRUE(wait_for([&] { return loop->reconnects() >= static_cast<uint64_t>(k); }, 20s));
    }
    const uint64_t before = loop->received();
    ASSERT_TRUE(wait_for([&] { return loop->received() >= before + 2000; }, 20s));
    const VuLoopResult r = loop->finish();
    print("SIGTERM", r);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.reconnects, 2u);
    // The rings stopped with every popped buffer used: no frame twice, no buffer returned
    // empty. (Frames in the macswap queue when serve exits are lost, and counted.)
    EXPECT_EQ(r.sink.sink_duplicates, 0u);
    EXPECT_EQ(r.rx_bad_len, 0u);
}

}  // namespace
}  // namespace pvnet::bench
