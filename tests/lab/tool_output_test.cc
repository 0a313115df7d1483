// Parsers over real tool output, then the same output cut short or garbled:
// each bad shape is an error naming what is missing, never a crash.
#include "pvnet/lab/tool_output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace pvnet::lab {
namespace {

std::string sample(const char* name) {
    // Appended in place: GCC 12 at -O2 warns (-Warray-bounds, a false positive) on the
    // temporary of `std::string(PVNET_LAB_SAMPLES) + "/" + name`.
    std::string path = PVNET_LAB_SAMPLES;
    path += '/';
    path += name;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_FALSE(ss.str().empty()) << name;
    return ss.str();
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
}

/// The last occurrence: iperf3's "end" sums come after per-interval copies.
std::string replace_last(std::string s, const std::string& from, const std::string& to) {
    const auto at = s.rfind(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
}

TEST(ParsePing, ReadsIputilsStatistics) {
    auto r = parse_ping(sample("ping_ok.txt"));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->transmitted, 5u);
    EXPECT_EQ(r->received, 5u);
    EXPECT_EQ(r->loss_pct, 0);
    ASSERT_TRUE(r->has_rtt);
    EXPECT_DOUBLE_EQ(r->min_ms, 0.045);
    EXPECT_DOUBLE_EQ(r->avg_ms, 0.054);
    EXPECT_DOUBLE_EQ(r->max_ms, 0.071);
    EXPECT_DOUBLE_EQ(r->mdev_ms, 0.010);
}

TEST(ParsePing, ReadsVerboseOutput) {
    auto r = parse_ping(sample("ping_verbose.txt"));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->received, 3u);
    EXPECT_DOUBLE_EQ(r->mdev_ms, 0.029);
}

TEST(ParsePing, ReportsPartialLoss) {
    auto r = parse_ping(sample("ping_loss.txt"));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->transmitted, 22u);
    EXPECT_EQ(r->received, 10u);
    EXPECT_DOUBLE_EQ(r->loss_pct, 54.5455);
    EXPECT_TRUE(r->has_rtt);
}

TEST(ParsePing, TotalLossHasNoRtt) {
    auto r = parse_ping(sample("ping_errors.txt"));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->received, 0u);
    EXPECT_EQ(r->loss_pct, 100);
    EXPECT_FALSE(r->has_rtt);
}

TEST(ParsePing, SkipsDuplicatesAndErrorsFields) {
    // iputils' full form (ping/ping_common.c finish()).
    auto r = parse_ping(
        "--- x ping statistics ---\n"
        "10 packets transmitted, 8 received, +1 duplicates, +2 errors, 20% packet loss, time 9ms\n"
        "rtt min/avg/max/mdev = 0.1/0.2/0.3/0.05 ms, pipe 2\n");
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->received, 8u);
    EXPECT_DOUBLE_EQ(r->loss_pct, 20);
}

TEST(ParsePing, RejectsTruncatedAndGarbledOutput) {
    const std::string ok = sample("ping_ok.txt");
    const std::string cases[] = {
        "",
        "PING 127.0.0.1 (127.0.0.1) 56(84) bytes of data.\n",  // interrupted before statistics
        ok.substr(0, ok.find("rtt")),                          // received > 0, rtt line cut
        ok.substr(0, ok.find("0.071")),                        // rtt line cut mid-way
        replace(ok, "5 received", "6 received"),               // more than sent
        replace(ok, "0% packet", "130% packet"),
        replace(ok, "0.045/0.054", "0.045/nan"),
        replace(ok, "0.045/", "-0.045/"),
        replace(ok, "0.045/0.054/0.071/0.010", "0.045/0.054/0.071"),  // no mdev (busybox)
        replace(ok, "0.045/0.054", "0.090/0.054"),                      // min > avg
        replace(ok, "5 packets transmitted", "99999999999 packets transmitted"),
        replace(ok, " received,", " recieved,"),
        replace(ok, "5 packets transmitted, ", ""),
        std::string("--- x ping statistics ---"),  // no counts line at all
    };
    for (const auto& c : cases) {
        auto r = parse_ping(c);
        EXPECT_FALSE(r.has_value()) << "accepted:\n" << c;
        if (!r) {
            EXPECT_NE(r.error().find("ping"), std::string::npos) << r.error();
        }
    }
}

TEST(ParseSockperf, ReadsPercentilesOfUdpAndTcp) {
    auto u = parse_sockperf(sample("sockperf_udp.txt"));
    ASSERT_TRUE(u.has_value()) << u.error();
    EXPECT_DOUBLE_EQ(u->p50_us, 20.277);
    EXPECT_DOUBLE_EQ(u->p99_us, 53.439);
    EXPECT_DOUBLE_EQ(u->p999_us, 72.876);
    EXPECT_DOUBLE_EQ(u->avg_us, 21.577);
    EXPECT_EQ(u->observations, 25432u);
    auto t = parse_sockperf(sample("sockperf_tcp.txt"));
    ASSERT_TRUE(t.has_value()) << t.error();
    EXPECT_DOUBLE_EQ(t->p999_us, 4175.865);
    EXPECT_EQ(t->observations, 15656u);
}

TEST(ParseSockperf, NoServerIsAnError) {
    auto r = parse_sockperf(sample("sockperf_noserver.txt"));
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("no messages"), std::string::npos) << r.error();
}

TEST(ParseSockperf, RejectsTruncatedAndGarbledOutput) {
    const std::string ok = sample("sockperf_udp.txt");
    const std::string cases[] = {
        "",
        ok.substr(0, ok.find("percentile 99.900")),
        ok.substr(0, ok.find("avg-rtt")),
        replace(ok, "percentile 50.000 =   20.277", "percentile 50.000 =   garbage"),
        replace(ok, "percentile 99.000 =   53.439", "percentile 99.000 =   10.000"),  // below p50
        replace(ok, "Total 25432 observations", "Total  observations"),
        replace(ok, "avg-rtt=21.577", "avg-rtt=-1"),
    };
    for (const auto& c : cases) {
        auto r = parse_sockperf(c);
        EXPECT_FALSE(r.has_value()) << "accepted:\n" << c;
    }
}

TEST(ParseIperf3, ReadsTheSums) {
    auto r = parse_iperf3_json(sample("iperf3_2flows.json"));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->sent_bytes, 747110400u);
    EXPECT_EQ(r->received_bytes, 744488960u);
    EXPECT_EQ(r->retransmits, 17u);
    EXPECT_DOUBLE_EQ(r->received_bps, 5922997582.434412);
}

TEST(ParseIperf3, ReturnsIperf3sOwnError) {
    auto r = parse_iperf3_json(sample("iperf3_refused.json"));
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("Connection refused"), std::string::npos) << r.error();
}

TEST(ParseIperf3, RejectsTruncatedAndGarbledJson) {
    const std::string ok = sample("iperf3_2flows.json");
    const std::string cases[] = {
        "",
        "iperf3: error - unable to connect",
        ok.substr(0, ok.size() / 2),
        replace(ok, "\"sum_received\"", "\"sum_rcvd\""),
        replace_last(ok, "\"bytes\":\t747110400", "\"bytes\":\t-5"),
        replace_last(ok, "\"bytes\":\t744488960", "\"bytes\":\t\"many\""),
        replace_last(ok, "\"retransmits\":\t17", "\"retransmits\":\t1.5"),
        "[1, 2, 3]",
        "{\"end\": 7}",
    };
    for (const auto& c : cases) {
        auto r = parse_iperf3_json(c);
        EXPECT_FALSE(r.has_value()) << "accepted:\n" << c.substr(0, 200);
    }
}

TEST(CountersLine, TheLastLineWithTheTagFromItsSpaceOn) {
    const std::string out = "ready\nstats a=1 b=2\nxfinal c=9\nfinal a=3 b=4\nq0 final d=5\n";
    EXPECT_EQ(counters_line(out, "final"), std::optional<std::string>(" a=3 b=4"));
    EXPECT_EQ(key_value(*counters_line(out, "final"), "a"), std::optional<uint64_t>(3));
    EXPECT_EQ(counters_line(out, "stats"), std::optional<std::string>(" a=1 b=2"));
    EXPECT_FALSE(counters_line("ready\nxfinal a=1", "final").has_value());
    EXPECT_EQ(counters_line("final a=1", "final"), std::optional<std::string>(" a=1"));
}

}  // namespace
}  // namespace pvnet::lab
