// Issue 23, item 5, against the real `pvnet serve` process: a session's end
// leaves nothing to the next guest on the same socket.
//   --echo: guest 1 sends an ARP request with no rx buffer posted (the reply
//   waits in the echo port's queue) and disconnects; guest 2, another guest
//   (its own memory and MAC), connects to the same socket and posts rx
//   buffers: it receives nothing of guest 1's, the dropped reply is counted
//   (drop_session_end), and its own ARP request gets its own reply.
//   --switch: a guest's learned MAC and the frames queued for it go with its
//   session; the next guest on that device gets only what is sent after it
//   came.
// Every wait is bounded; a thread drains the daemon's output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/lab/child.h"
#include "test_frontend.h"

namespace pvnet::vhost_user::test {
namespace {

using Mac = std::array<uint8_t, 6>;
constexpr uint8_t kEchoIp[4] = {192, 0, 2, 1};
constexpr Mac kGuest1{0x52, 0x54, 0, 0, 0, 0x01};
constexpr Mac kGuest2{0x52, 0x54, 0, 0, 0, 0x02};

/// An ARP request from `sender` for the echo port's address.
std::vector<std::byte> arp_request(const Mac& sender) {
    std::vector<uint8_t> b = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    b.insert(b.end(), sender.begin(), sender.end());
    b.insert(b.end(), {0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1});
    b.insert(b.end(), sender.begin(), sender.end());
    b.insert(b.end(), {192, 0, 2, sender[5]});
    b.insert(b.end(), 6, 0);
    b.insert(b.end(), kEchoIp, kEchoIp + 4);
    b.resize(60, 0);  // Ethernet padding
    std::vector<std::byte> out(b.size());
    std::memcpy(out.data(), b.data(), b.size());
    return out;
}

/// An Ethernet frame of a local experimental ethertype, its first payload byte `tag`.
std::vector<std::byte> eth_frame(const Mac& dst, const Mac& src, uint8_t tag) {
    std::vector<std::byte> b(60, std::byte{0});
    std::memcpy(b.data(), dst.data(), 6);
    std::memcpy(b.data() + 6, src.data(), 6);
    b[12] = std::byte{0x88};
    b[13] = std::byte{0xb5};
    b[14] = std::byte{tag};
    return b;
}

/// Device `dev`'s JSON counters: "connected", "session.<name>", "port.<name>" (queue 0).
std::map<std::string, uint64_t> read_counters(const std::string& json, std::size_t dev = 0,
                                              std::size_t devices = 1) {
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    std::map<std::string, uint64_t> c;
    if (j.is_discarded() || !j.contains("devices") || j["devices"].size() != devices) return c;
    const auto& d = j["devices"][dev];
    for (const auto& [k, v] : d["session"].items()) c["session." + k] = v.get<uint64_t>();
    for (const auto& [k, v] : d["queues"][0]["port"].items()) c["port." + k] = v.get<uint64_t>();
    c["connected"] = d["connected"].get<bool>() ? 1 : 0;
    return c;
}

/// One `pvnet serve` with `args` (after "serve"), its --json-stats file every
/// 50 ms, its output drained by a thread (a full pipe would stall its reports).
class Serve {
public:
    Serve(const std::string& tag, std::vector<std::string> args)
        : json_("/tmp/pvnet_" + tag + "_" + std::to_string(::getpid()) + ".json") {
        args.insert(args.begin(), {PVNET_EXE, "serve"});
        args.insert(args.end(), {"--json-stats", json_, "--stats-interval", "0.05"});
        auto c = lab::Child::spawn(args);
        if (!c) {
            ADD_FAILURE() << c.error();
            return;
        }
        child_.emplace(std::move(*c));
        ready_ = child_->wait_for_line("ready", 10s);
        drainer_ = std::thread([this] {
            lab::Child* kids[] = {&*child_};
            while (!stop_drain_.load()) lab::Child::drain(kids, 50ms);
        });
    }
    ~Serve() {
        stop_draining();
        ::unlink(json_.c_str());
    }
    Serve(const Serve&) = delete;
    Serve& operator=(const Serve&) = delete;

    bool ready() const { return ready_; }
    const std::string& json() const { return json_; }
    std::string tail() const { return child_ ? child_->output_tail(2000) : std::string(); }
    /// SIGTERM; the exit status for the caller to check.
    lab::ExitStatus stop() {
        stop_draining();
        return child_ ? child_->stop(5s) : lab::ExitStatus{};
    }

private:
    void stop_draining() {
        stop_drain_ = true;
        if (drainer_.joinable()) drainer_.join();
    }
    std::string json_;
    std::optional<lab::Child> child_;
    bool ready_ = false;
    std::atomic<bool> stop_drain_{false};
    std::thread drainer_;
};

TEST(ServeSessionEnd, QueuedReplyOfADepartedGuestNeverReachesTheNextOne) {
    const std::string sock = socket_path("session_end");
    Serve serve("session_end", {"--vhost-user", sock, "--echo", "192.0.2.1"});
    ASSERT_TRUE(serve.ready()) << serve.tail();
    const std::string& json = serve.json();
    std::map<std::string, uint64_t> n;
    auto counters_reach = [&](const std::function<bool()>& pred) {
        return wait_until([&] {
            n = read_counters(json);
            return !n.empty() && pred();
        });
    };

    {  // Guest 1: an ARP request, no rx buffer, then gone.
        FrontEnd fe(sock);
        ASSERT_TRUE(fe.connected());
        Guest g("se_guest1");
        full_setup(fe, g);
        g.transmit(0, arp_request(kGuest1));
        ASSERT_TRUE(counters_reach([&] { return n["port.arp_replies"] == 1; }))
           ;
        EXPECT_EQ(n["port.rx_pkts"], 0u);
    }
    ASSERT_TRUE(counters_reach([&] {
        return n["connected"] == 0 && n["session.disconnects"] == 1;
    }));
    EXPECT_EQ(n["port.drop_session_end"], 1u);

    // Guest 2 on the same socket: buffers posted first, then its own request.
    // A reply left from guest 1 would fill the first buffer (the queue is FIFO):
    // the first frame guest 2 receives must be its own reply, and the only one.
    FrontEnd fe(sock);
    ASSERT_TRUE(fe.connected());
    Guest g("se_guest2");
    full_setup(fe, g);
    for (uint64_t t = 0; t < 8; ++t) g.post_rx(t);
    ring::UsedBuf u;
    g.transmit(1, arp_request(kGuest2));
    ASSERT_TRUE(wait_until([&] { return g.q[0]->get_used(u); }));
    ASSERT_EQ(u.len, kHdr + 42);  // an ARP reply, unpadded
    const std::byte* reply = g.host(Guest::rx_gpa(u.token)) + kHdr;
    EXPECT_EQ(std::memcmp(reply, kGuest2.data(), 6), 0);  // to guest 2, not guest 1
    EXPECT_FALSE(g.q[0]->get_used(u));
    ASSERT_TRUE(counters_reach([&] { return n["port.rx_pkts"] == 1; }));
    EXPECT_EQ(n["port.arp_replies"], 2u);
    EXPECT_EQ(n["port.drop_session_end"], 1u);

    fe.close();
    const lab::ExitStatus st = serve.stop();
    EXPECT_TRUE(st.ok()) << st.to_string() << "\n" << serve.tail();
}

TEST(ServeSessionEnd, SwitchForgetsADepartedGuestAndKeepsNothingForTheNext) {
    const std::string sock0 = socket_path("session_sw0"), sock1 = socket_path("session_sw1");
    Serve serve("session_sw", {"--vhost-user", sock0, "--vhost-user", sock1, "--switch"});
    ASSERT_TRUE(serve.ready()) << serve.tail();
    const std::string& json = serve.json();
    std::map<std::string, uint64_t> n;
    auto dev_reaches = [&](std::size_t dev, const std::function<bool()>& pred) {
        return wait_until([&] {
            n = read_counters(json, dev, 2);
            return !n.empty() && pred();
        });
    };
    constexpr Mac kBcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    ring::UsedBuf u;

    FrontEnd fe0(sock0);
    ASSERT_TRUE(fe0.connected());
    Guest g0("se_sw_guest0");
    full_setup(fe0, g0);
    for (uint64_t t = 0; t < 8; ++t) g0.post_rx(t);
    {  // Guest 1 on device 1: teaches its MAC, posts no rx buffer, gets a unicast queued, leaves.
        FrontEnd fe(sock1);
        ASSERT_TRUE(fe.connected());
        Guest g("se_sw_guest1");
        full_setup(fe, g);
        g.transmit(0, eth_frame(kBcast, kGuest1, 1));
        ASSERT_TRUE(wait_until([&] { return g0.q[0]->get_used(u); }));  // device 0 is up
        g0.post_rx(8);
        g0.transmit(0, eth_frame(kGuest1, kGuest2, 2));
        ASSERT_TRUE(dev_reaches(1, [&] { return n["port.queued"] == 1; }));
        ASSERT_TRUE(dev_reaches(0, [&] { return n["port.tx_unicast"] == 1; }));
    }
    ASSERT_TRUE(dev_reaches(1, [&] {
        return n["connected"] == 0 && n["session.disconnects"] == 1;
    }));
    EXPECT_EQ(n["port.forgotten"], 1u);
    EXPECT_EQ(n["port.drop_session_end"], 1u);
    // Guest 1's MAC is unknown now: a flood, which skips device 1 while it has no session.
    g0.transmit(1, eth_frame(kGuest1, kGuest2, 3));
    ASSERT_TRUE(dev_reaches(0, [&] { return n["port.tx_flooded"] == 1; }));
    EXPECT_EQ(n["port.tx_unicast"], 1u);
    EXPECT_EQ(n["port.forwarded"], 1u);  // the first unicast only

    // The next guest on device 1: the first frame it gets is one sent after it came.
    FrontEnd fe(sock1);
    ASSERT_TRUE(fe.connected());
    Guest g("se_sw_guest2");
    full_setup(fe, g);
    for (uint64_t t = 0; t < 8; ++t) g.post_rx(t);
    ASSERT_TRUE(dev_reaches(1, [&] { return n["connected"] == 1; }));
    g0.transmit(2, eth_frame(kBcast, kGuest2, 4));
    ASSERT_TRUE(wait_until([&] { return g.q[0]->get_used(u); }));
    ASSERT_EQ(u.len, kHdr + 60);
    EXPECT_EQ(std::to_integer<int>(g.host(Guest::rx_gpa(u.token))[kHdr + 14]), 4);
    EXPECT_FALSE(g.q[0]->get_used(u));

    fe.close();
    fe0.close();
    const lab::ExitStatus st = serve.stop();
    EXPECT_TRUE(st.ok()) << st.to_string() << "\n" << serve.tail();
}

}  // namespace
}  // namespace pvnet::vhost_user::test
