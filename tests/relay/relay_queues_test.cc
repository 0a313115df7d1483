// `pvnet relay --queues 2` between two namespaces (issue 12), end to end
// (needs root: namespaces and multi-queue taps; anything else FAILS with a
// message). tun picks the queue a frame leaves a multi-queue tap on by flow
// (tun_automq_select_queue: the queue the flow's last frame was written on,
// else its hash), so 16 UDP flows spread over both queues of tap A, and
// each answer comes back on its request's queue of tap B. The RelayBed
// deletes the namespaces, with the relay, on every exit path.
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>

#include "pvnet/bench/relay_bench.h"
#include "pvnet/port/netns.h"
#include "relay_checks.h"
#include "udp_round_trips.h"

namespace pvnet::bench {
namespace {

constexpr std::array<uint8_t, 4> kIpB{192, 0, 2, 2};  // RelayBed::kIpB
constexpr uint16_t kEchoPort = 5401;
constexpr unsigned kFlows = 16;
constexpr uint32_t kRounds = 200;  ///< request/answer round trips per flow

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

    // Netns B answers, netns A's flows ask.
    ASSERT_NO_FATAL_FAILURE(expect_udp_round_trips((*bed)->ns_b(), kIpB, kEchoPort,
                                                    (*bed)->ns_a(), kFlows, kRounds));

    const std::string out = (*bed)->stop_relay();
    expect_frames_accounted(out, false);
    const std::string line = final_line(out);
    ASSERT_FALSE(line.empty()) << "no final line: " << out;
    // One queue's counter: "q<i>_" and the total's name.
    const auto queue_key = [](const char* q, const char* k) { return std::string(q).append(k); };
    const auto get = [&](const std::string& k) { return expect_counter(line, k); };
    EXPECT_FALSE(counter(line, "q2_g2h_frames").has_value()) << "two queues only: " << line;
    // Each queue of each tap was read from, and each pair carried frames
    // both ways: tun spread the flows, the relay kept queue i with pair i.
    for (const char* q : {"q0_", "q1_"}) {
        for (const char* k : {"a_read", "b_read", "g2h_frames", "h2g_frames", "kicks", "napi_polls",
                              "tx_completions"}) {
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
