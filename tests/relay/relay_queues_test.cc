// `pvnet relay --queues 2` between two namespaces (issue 12), end to end
// (needs root: namespaces and multi-queue taps; anything else FAILS with a
// message). tun picks the queue a frame leaves a multi-queue tap on by flow
// (tun_automq_select_queue: the queue the flow's last frame was written on,
// else its hash), so 16 UDP flows spread over both queues of tap A, and
// each answer comes back on its request's queue of tap B. The RelayBed
// deletes the namespaces, with the relay, on every exit path.
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/bench/relay_bench.h"
#include "pvnet/port/netns.h"
#include "relay_checks.h"

namespace pvnet::bench {
namespace {

constexpr std::array<uint8_t, 4> kIpB{192, 0, 2, 2};  // RelayBed::kIpB
constexpr uint16_t kEchoPort = 5401;
constexpr unsigned kFlows = 16;
constexpr uint32_t kRounds = 200;  ///< request/answer round trips per flow

/// A datagram of a flow: its index and sequence number, padded to 64 bytes.
struct Probe {
    uint32_t flow = 0, seq = 0;
    std::array<std::byte, 56> pad{};
};

void set_timeout(int fd, long usecs) {
    const timeval tv{usecs / 1'000'000, usecs % 1'000'000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

TEST(RelayQueues, UdpFlowsCrossBothQueuesBothWays) {
    ASSERT_EQ(geteuid(), 0u) << "relay tests need root (CAP_NET_ADMIN) to create network "
                                "namespaces and taps; run them as root";
    lab::remove_stale_netns(kRelayNetnsPrefix);
    // One backend worker per pair (--workers 0); relay_test's NapiDirectQueues2 has one for both.
    const RelayVariant v{"Queues2", false, {"--queues", "2", "--workers", "0"}};
    std::string tag = "q";
    tag += std::to_string(getpid());
    tag += "-0";
    auto bed = RelayBed::create(v, PVNET_EXE, tag);
    ASSERT_TRUE(bed.has_value()) << bed.error();

    // Netns B: one socket answers every datagram to its sender.
    auto srv = port::udp_socket_in((*bed)->ns_b(), kIpB, kEchoPort, port::UdpEnd::Bind);
    ASSERT_TRUE(srv.has_value()) << port::to_string(srv.error());
    const int sfd = *srv;
    set_timeout(sfd, 100'000);
    // Netns A: a connected socket per flow, each on its own source port.
    std::vector<int> cfds;
    for (unsigned i = 0; i < kFlows; ++i) {
        auto c = port::udp_socket_in((*bed)->ns_a(), kIpB, kEchoPort, port::UdpEnd::Connect);
        ASSERT_TRUE(c.has_value()) << port::to_string(c.error());
        set_timeout(*c, 500'000);
        cfds.push_back(*c);
    }

    // Bounded: no flow runs past the deadline, the echo stops after them.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::atomic<bool> done{false};
    std::thread echo([&] {
        while (!done.load() && std::chrono::steady_clock::now() < deadline) {
            Probe p;
            sockaddr_storage from{};
            socklen_t len = sizeof from;
            const ssize_t n =
                ::recvfrom(sfd, &p, sizeof p, 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n > 0) {
                (void)::sendto(sfd, &p, static_cast<std::size_t>(n), 0,
                               reinterpret_cast<const sockaddr*>(&from), len);
            }
        }
    });
    std::vector<uint32_t> answered(kFlows, 0);
    std::vector<std::thread> flows;
    for (unsigned i = 0; i < kFlows; ++i) {
        flows.emplace_back([&, i] {
            for (uint32_t seq = 0; seq < kRounds && std::chrono::steady_clock::now() < deadline;
                 ++seq) {
                Probe p;
                p.flow = i;
                p.seq = seq;
                if (::send(cfds[i], &p, sizeof p, 0) != static_cast<ssize_t>(sizeof p)) continue;
                // A late answer to an earlier round is skipped; a timeout ends the round.
                for (;;) {
                    Probe r;
                    if (::recv(cfds[i], &r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) break;
                    if (r.flow == i && r.seq == seq) {
                        ++answered[i];
                        break;
                    }
                }
            }
        });
    }
    for (auto& t : flows) t.join();
    done.store(true);
    echo.join();
    for (const int fd : cfds) ::close(fd);
    ::close(sfd);
    for (unsigned i = 0; i < kFlows; ++i) {
        EXPECT_EQ(answered[i], kRounds) << "flow " << i << ": round trips answered";
    }

    const std::string out = (*bed)->stop_relay();
    expect_frames_accounted(out, false);
    const std::size_t at = out.rfind("final ");
    ASSERT_NE(at, std::string::npos) << "no final line: " << out;
    std::string line(1, ' ');
    line.append(out, at + 6, std::string::npos);
    // One queue's counter: "q<i>_" and the total's name.
    const auto queue_key = [](const char* q, const char* k) { return std::string(q).append(k); };
    const auto get = [&](const std::string& k) {
        const auto val = counter(line, k);
        EXPECT_TRUE(val.has_value()) << k << " missing: " << line;
        return val.value_or(0);
    };
    EXPECT_FALSE(counter(line, "q2_g2h_frames").has_value()) << "two queues only: " << line;
    // Each queue of each tap was read from, and each pair carried frames
    // both ways: tun spread the flows, the relay kept queue i with pair i.
    for (const char* q : {"q0_", "q1_"}) {
        for (const char* k : {"a_read", "b_read", "g2h_frames", "h2g_frames", "kicks"}) {
            EXPECT_GT(get(queue_key(q, k)), 0u) << q << k << ": " << line;
        }
    }
    // The totals are the queues' sums.
    for (const char* k :
         {"g2h_frames", "g2h_bytes", "h2g_frames", "h2g_bytes", "kicks", "interrupts", "a_read",
          "b_read"}) {
        EXPECT_EQ(get(k), get(queue_key("q0_", k)) + get(queue_key("q1_", k))) << k << ": " << line;
    }
    // Every request and every answer crossed once (ARP and the bed's pings on top).
    EXPECT_GE(get("g2h_frames"), uint64_t{kFlows} * kRounds) << line;
    EXPECT_GE(get("h2g_frames"), uint64_t{kFlows} * kRounds) << line;
    EXPECT_EQ(get("ring_drops"), 0u) << line;
}

}  // namespace
}  // namespace pvnet::bench
