// Issue 23, item 5, against the real `pvnet serve --echo` process: a
// session's end leaves nothing to the next guest on the same socket. Guest 1
// sends an ARP request with no rx buffer posted (the reply waits in the echo
// port's queue) and disconnects; guest 2, another guest (its own memory and
// MAC), connects to the same socket and posts rx buffers: it must receive
// nothing of guest 1's, the dropped reply is counted (drop_session_end), and
// its own ARP request gets its own reply. Every wait is bounded; a thread
// drains the daemon's output.
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

/// The device's JSON counters: "connected", "session.<name>", "port.<name>" (queue 0).
std::map<std::string, uint64_t> read_counters(const std::string& json) {
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    std::map<std::string, uint64_t> c;
    if (j.is_discarded() || !j.contains("devices") || j["devices"].size() != 1) return c;
    const auto& d = j["devices"][0];
    for (const auto& [k, v] : d["session"].items()) c["session." + k] = v.get<uint64_t>();
    for (const auto& [k, v] : d["queues"][0]["port"].items()) c["port." + k] = v.get<uint64_t>();
    c["connected"] = d["connected"].get<bool>() ? 1 : 0;
    return c;
}

TEST(ServeSessionEnd, QueuedReplyOfADepartedGuestNeverReachesTheNextOne) {
    const std::string sock = socket_path("session_end");
    const std::string json = "/tmp/pvnet_session_end_" + std::to_string(::getpid()) + ".json";
    struct Unlink {
        std::string path;
        ~Unlink() { ::unlink(path.c_str()); }
    } unlink_json{json};
    auto c = lab::Child::spawn({PVNET_EXE, "serve", "--vhost-user", sock, "--echo", "192.0.2.1",
                                "--json-stats", json, "--stats-interval", "0.05"});
    ASSERT_TRUE(c) << c.error();
    lab::Child child = std::move(*c);
    ASSERT_TRUE(child.wait_for_line("ready", 10s)) << child.output_tail(2000);
    // Its stats lines drained meanwhile (a full pipe would stall its reports).
    std::atomic<bool> stop_drain{false};
    std::thread drainer([&] {
        lab::Child* kids[] = {&child};
        while (!stop_drain.load()) lab::Child::drain(kids, 50ms);
    });
    struct Join {
        std::atomic<bool>& stop;
        std::thread& t;
        ~Join() {
            stop = true;
            if (t.joinable()) t.join();
        }
    } join{stop_drain, drainer};
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
    stop_drain = true;
    drainer.join();
    const lab::ExitStatus st = child.stop(5s);
    EXPECT_TRUE(st.ok()) << st.to_string() << "\n" << child.output_tail(2000);
}

}  // namespace
}  // namespace pvnet::vhost_user::test
