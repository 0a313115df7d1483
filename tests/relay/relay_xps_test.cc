// `pvnet relay --queues 2 --xps` between two namespaces (issue 12, seed 003),
// end to end (root: namespaces and multi-queue taps). The server is in netns
// A, behind the guest; its answers leave through the frontend's tx, where XPS
// picks the pair. tun answers a flow on the tap A queue its requests were
// written to, so guest thread i reads the answers to the flows that arrived
// on rx pair i. The threads are pinned crossed (thread i on CPU 1 - i), so
// the CPU map (virtnet_set_affinity: CPU i → tx queue i) sends every answer
// on the other pair, and the rx-queue map (--symmetric) on its own; the
// default case then sets the rx-queue map at run time (the relay's stdin
// commands, as sysfs writes) and sends the next answers on their own pair.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "pvnet/bench/relay_bench.h"
#include "pvnet/port/netns.h"
#include "relay_checks.h"
#include "udp_round_trips.h"

namespace pvnet::bench {
namespace {

constexpr std::array<uint8_t, 4> kIpA{192, 0, 2, 1};  // RelayBed::kIpA
constexpr uint16_t kEchoPort = 5402;
constexpr unsigned kFlows = 16;
constexpr uint32_t kRounds = 200;
constexpr uint64_t kAnswers = uint64_t{kFlows} * kRounds;
/// Frames that are not the flows' (ARP, the bed's pings) per pair, at most.
constexpr uint64_t kOtherFrames = 32;

struct XpsCase {
    const char* name;
    bool symmetric;
};

void PrintTo(const XpsCase& c, std::ostream* os) { *os << c.name; }

class RelayXps : public ::testing::TestWithParam<XpsCase> {};

TEST_P(RelayXps, AnswersLeaveOnThePairXpsPicks) {
    ASSERT_EQ(geteuid(), 0u) << "relay tests need root (CAP_NET_ADMIN) to create network "
                                "namespaces and taps; run them as root";
    ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "the crossed pinning needs two CPUs";
    lab::remove_stale_netns(kRelayNetnsPrefix);
    const XpsCase c = GetParam();
    RelayVariant v{c.name, false, {"--queues", "2", "--workers", "0", "--guest-cpu", "1"}};
    v.relay_args.push_back(c.symmetric ? "--symmetric" : "--xps");
    std::string tag = "x";
    tag += std::to_string(getpid());
    tag += c.symmetric ? "-s" : "-d";
    auto bed = RelayBed::create(v, PVNET_EXE, tag);
    ASSERT_TRUE(bed.has_value()) << bed.error();

    // Netns A (the guest's side) answers, netns B's flows ask.
    ASSERT_NO_FATAL_FAILURE(expect_udp_round_trips((*bed)->ns_a(), kIpA, kEchoPort,
                                                    (*bed)->ns_b(), kFlows, kRounds));

    if (!c.symmetric) {
        // Run time, as sysfs writes: a bad mask is refused naming its part,
        // then xps_rxqs i → i makes the next answers leave on their own pair.
        const auto bad = (*bed)->relay_command("xps_rxqs 0=4");
        ASSERT_TRUE(bad.has_value()) << bad.error();
        EXPECT_NE(bad->find("xps_rxqs 0=4: error: "), std::string::npos) << *bad;
        EXPECT_NE(bad->find("4"), bad->rfind("4")) << "names the bad mask: " << *bad;
        for (const char* cmd : {"xps_rxqs 0=1", "xps_rxqs 1=2"}) {
            const auto ok = (*bed)->relay_command(cmd);
            ASSERT_TRUE(ok.has_value()) << ok.error();
            EXPECT_EQ(*ok, std::string(cmd) + ": ok");
        }
        ASSERT_NO_FATAL_FAILURE(expect_udp_round_trips((*bed)->ns_a(), kIpA, kEchoPort,
                                                        (*bed)->ns_b(), kFlows, kRounds));
    }
    const std::string out = (*bed)->stop_relay();
    expect_frames_accounted(out, false);
    const std::string line = final_line(out);
    ASSERT_FALSE(line.empty()) << "no final line: " << out;
    const auto get = [&](const std::string& k) { return expect_counter(line, k); };
    // Every frame read from tap A got one pick, on one tx queue.
    uint64_t picks = 0, on_queues = 0, mismatch = 0, by_rxqs = 0, by_cpus = 0, copied = 0;
    for (const std::string t : {"t0_", "t1_"}) {
        picks += get(t + "xps_rxqs") + get(t + "xps_cpus") + get(t + "xps_hash");
        on_queues += get(t + "txq0") + get(t + "txq1");
        mismatch += get(t + "rxq_mismatch");
        by_rxqs += get(t + "xps_rxqs");
        by_cpus += get(t + "xps_cpus");
        copied += get(t + "xps_copied");
    }
    EXPECT_FALSE(counter(line, "t2_xps_rxqs").has_value()) << "two threads only: " << line;
    EXPECT_EQ(picks, get("a_read")) << line;
    EXPECT_EQ(on_queues, get("a_read")) << line;
    EXPECT_EQ(get("ring_drops"), 0u) << line;
    // Both pairs carried requests in (tun on tap B spread the flows).
    const uint64_t in0 = get("q0_h2g_frames"), in1 = get("q1_h2g_frames");
    EXPECT_GT(in0, kOtherFrames) << line;
    EXPECT_GT(in1, kOtherFrames) << line;
    const uint64_t out0 = get("q0_g2h_frames"), out1 = get("q1_g2h_frames");
    if (c.symmetric) {
        // Each answer leaves on the pair its request came in on.
        EXPECT_EQ(mismatch, 0u) << line;
        EXPECT_GE(by_rxqs, kAnswers) << line;
        EXPECT_LE(out0, in0 + kOtherFrames) << line;
        EXPECT_GE(out0 + kOtherFrames, in0) << line;
        EXPECT_LE(out1, in1 + kOtherFrames) << line;
        EXPECT_GE(out1 + kOtherFrames, in1) << line;
    } else {
        // First run: the CPU map decides, and the crossed threads send the
        // answers on the other pair, copied into its buffers. Not quite every
        // answer: tun puts a flow's first answers on a tap A queue by hash
        // until its flow entry is written, and the thread reading the other
        // queue then sends it back on the right pair. Second run, after the
        // run-time xps_rxqs: the rx-queue map decides, no more mismatches.
        EXPECT_GE(by_cpus, kAnswers) << line;
        EXPECT_GE(by_rxqs, kAnswers) << line;
        EXPECT_GE(mismatch + kOtherFrames, kAnswers) << line;
        EXPECT_LE(mismatch, kAnswers + kOtherFrames) << line;
        EXPECT_GE(copied + kOtherFrames, kAnswers) << line;
    }
}

INSTANTIATE_TEST_SUITE_P(Crossed, RelayXps,
                         ::testing::Values(XpsCase{"Default", false}, XpsCase{"Symmetric", true}),
                         [](const ::testing::TestParamInfo<XpsCase>& p) {
                             return std::string(p.param.name);
                         });

}  // namespace
}  // namespace pvnet::bench
