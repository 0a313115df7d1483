// `pvnet` refuses every bad option value before its command starts: one bad
// value per option of every command, each run of the built binary checked
// for CLI11's validation exit code (105), a message naming the option and
// the value, and no sign of a run (no "ready", no progress, no table).
// A few runs with values at the edges of the rules show those are accepted,
// and one reads back what a bench records about each run (its placement).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace {

struct Outcome {
    int status = -1;     ///< exit code, or -1 if it did not exit
    std::string output;  ///< stdout and stderr
};

/// Runs pvnet with `args` (shell words), bounded by timeout(1).
Outcome run_pvnet(const std::string& args) {
    Outcome r;
    const std::string cmd = "timeout -k 5 60 " PVNET_EXE " " + args + " 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
    const int st = ::pclose(p);
    if (st != -1 && WIFEXITED(st)) r.status = WEXITSTATUS(st);
    return r;
}

constexpr int kValidationError = 105;  // CLI::ExitCodes::ValidationError

struct Bad {
    std::string command;  ///< "relay", "bench pvp", ...
    std::string option;
    std::string value;  ///< the bad value, as the message must show it
};

void PrintTo(const Bad& b, std::ostream* os) {
    *os << b.command << " " << b.option << " " << b.value;
}

// The arguments a command needs besides the one under test.
std::string required_args(const Bad& b) {
    if (b.command == "serve") {
        std::string s;
        if (b.option != "--vhost-user") s += " --vhost-user /tmp/pvcli-serve.sock";
        if (b.option.rfind("--switch-", 0) == 0) {
            s += " --switch";
        } else if (b.option != "--echo" && b.option != "--tap") {
            s += " --macswap";
        }
        return s;
    }
    if (b.command != "relay") return "";
    std::string s;
    if (b.option != "--guest-tap") s += " --guest-tap pvcli-a";
    if (b.option != "--host-tap") s += " --host-tap pvcli-b";
    return s;
}

class BadValue : public ::testing::TestWithParam<Bad> {};

TEST_P(BadValue, RefusedBeforeAnythingRuns) {
    const Bad& b = GetParam();
    const Outcome r =
        run_pvnet(b.command + required_args(b) + " " + b.option + " '" + b.value + "'");
    EXPECT_EQ(r.status, kValidationError) << r.output;
    EXPECT_NE(r.output.find(b.option + ": " + b.value + ":"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("must be"), std::string::npos) << r.output;  // the rule follows
    for (const char* ran : {"ready", "[1/", "median", "Mpps"}) {
        EXPECT_EQ(r.output.find(ran), std::string::npos) << ran << " in: " << r.output;
    }
}

const Bad kBad[] = {
    // pvnet relay
    {"relay", "--guest-tap", "abcdefghijklmnop"},  // 16 characters: over IFNAMSIZ - 1
    {"relay", "--host-tap", "a/b"},
    {"relay", "--guest-netns", "pvcli-no-such-netns"},
    {"relay", "--host-netns", "../x"},
    {"relay", "--tx-mode", "fast"},
    {"relay", "--tx-frames", "32769"},  // over NOTF_COAL's clamp
    {"relay", "--tx-usecs", "99999999"},
    {"relay", "--rx-frames", "-1"},
    {"relay", "--rx-usecs", "1000001"},
    {"relay", "--busyloop-usecs", "1000001"},
    {"relay", "--tx-weight", "1000001"},
    {"relay", "--rx-weight", "x"},
    {"relay", "--tx-weight-bytes", "4294967296"},
    {"relay", "--rx-weight-bytes", "-5"},
    {"relay", "--busy-poll-usecs", "2000000"},
    {"relay", "--direct-max", "0"},
    {"relay", "--direct-spin-usecs", "10001"},
    {"relay", "--queue-size", "300"},
    {"relay", "--queue-size", "65536"},
    {"relay", "--queues", "0"},
    {"relay", "--queues", "17"},  // over kMaxRelayQueues
    {"relay", "--xps-cpus", "1=1"},    // one queue: tx queue 0 only
    {"relay", "--xps-cpus", "0=zz"},   // not hex
    {"relay", "--xps-rxqs", "0=2"},    // rx queue 1 of one
    {"relay", "--xps-rxqs", "0:1"},    // no '='

    {"relay", "--guest-cpu", "4096"},
    {"relay", "--backend-cpu", "-2"},
    {"relay", "--offloads", "maybe"},
    {"relay", "--stats-interval", "nan"},
    // pvnet serve
    {"serve", "--vhost-user", "/pvcli-no-such-dir/s.sock"},
    {"serve", "--vhost-user", "/tmp/a b.sock"},
    {"serve", "--queues", "0"},
    {"serve", "--echo", "10.0.0.256"},
    {"serve", "--echo", "224.0.0.1"},
    {"serve", "--tap", "a/b"},
    {"serve", "--netns", "pvcli-no-such-netns"},
    {"serve", "--mode", "spin"},
    {"serve", "--rx-weight", "1000001"},
    {"serve", "--tx-weight-bytes", "-1"},
    {"serve", "--rx-usecs", "1000001"},
    {"serve", "--tx-frames", "32769"},
    {"serve", "--busyloop-usecs", "1000001"},
    {"serve", "--backend-cpu", "-2"},
    {"serve", "--stats-interval", "inf"},
    {"serve", "--json-stats", "/pvcli-no-such-dir/s.json"},
    {"serve", "--mtu", "9001"},
    {"serve", "--switch-ageing", "0"},
    {"serve", "--switch-ageing", "1000001"},
    {"serve", "--switch-max-macs", "0"},
    {"serve", "--switch-max-macs", "4097"},
    {"serve", "--switch-flood-pps", "100000001"},
    {"serve", "--switch-flood-burst", "0"},
    {"serve", "--switch-mac", "01:00:5e:00:00:01"},  // multicast
    {"serve", "--switch-mac", "00:00:00:00:00:00"},
    {"serve", "--switch-mac", "52:54:00:12:34"},
    {"serve", "--switch-mac", "52-54-00-12-34-56"},
    // pvnet bench pvp
    {"bench pvp", "--frame-bytes", "10"},
    {"bench pvp", "--frame-bytes", "100000"},
    {"bench pvp", "--queue-sizes", "300"},
    {"bench pvp", "--weights", "0"},
    {"bench pvp", "--byte-weight", "-1"},
    {"bench pvp", "--mode", "fast"},
    {"bench pvp", "--repeat", "0"},
    {"bench pvp", "--seconds", "0"},
    {"bench pvp", "--warmup", "61"},
    {"bench pvp", "--backend-cpu", "4096"},
    {"bench pvp", "--frontend-cpu", "x"},
    {"bench pvp", "--json", "/pvcli-no-such-dir/out.json"},
    {"bench pvp", "--plot", "/pvcli-no-such-dir/out.png"},
    // pvnet bench fairness
    {"bench fairness", "--queue-sizes", "0"},
    {"bench fairness", "--weights", "1000001"},
    {"bench fairness", "--byte-weight", "x"},
    {"bench fairness", "--tx-pps", "0"},
    {"bench fairness", "--mode", "Event"},
    {"bench fairness", "--repeat", "1001"},
    {"bench fairness", "--seconds", "0.01"},
    {"bench fairness", "--backend-cpu", "4096"},
    {"bench fairness", "--frontend-cpu", "-7"},
    {"bench fairness", "--json", "/pvcli-no-such-dir/out.json"},
    // pvnet bench stream and rr
    {"bench stream", "--flows", "0"},
    {"bench stream", "--sndbuf", "100"},
    {"bench stream", "--tx-frames", "40000"},
    {"bench stream", "--tx-usecs", "99999999"},
    {"bench stream", "--rx-frames", "x"},
    {"bench stream", "--rx-usecs", "-1"},
    {"bench stream", "--busyloop-usecs", "1000001"},
    {"bench stream", "--busy-poll-usecs", "1000001"},
    {"bench stream", "--tx-weight", "1000001"},
    {"bench stream", "--server-ns", "1000001"},
    {"bench stream", "--repeat", "0"},
    {"bench stream", "--seconds", "inf"},
    {"bench stream", "--backend-cpu", "4096"},
    {"bench stream", "--frontend-cpu", "4096"},
    {"bench stream", "--json", "/pvcli-no-such-dir/out.json"},
    {"bench rr", "--flows", "64513"},  // UDP source ports 1024 + flow run out
    {"bench rr", "--rr-rate", "1000000001"},
    {"bench rr", "--sndbuf", "4294967296"},
    {"bench rr", "--seconds", "0"},
    // pvnet bench relay
    {"bench relay", "--flows", "129"},
    {"bench relay", "--variants", "napi-bogus"},
    {"bench relay", "--repeat", "101"},
    {"bench relay", "--seconds", "0.5"},
    {"bench relay", "--latency-seconds", "601"},
    {"bench relay", "--ping-count", "0"},
    {"bench relay", "--json", "/pvcli-no-such-dir/out.json"},
    {"bench relay", "--plot", "/pvcli-no-such-dir/prefix"},
    // pvnet bench vhost-user
    {"bench vhost-user", "--in-order", "2"},
};

INSTANTIATE_TEST_SUITE_P(EveryOption, BadValue, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<Bad>& i) {
                             std::string n =
                                 i.param.command + i.param.option + "_" + std::to_string(i.index);
                             for (char& c : n) {
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             }
                             return n;
                         });

// A list is checked element by element: one bad entry is enough.
TEST(Cli, ListWithOneBadEntryIsRefused) {
    const Outcome r = run_pvnet("bench pvp --queue-sizes 256,512,300,1024");
    EXPECT_EQ(r.status, kValidationError) << r.output;
    EXPECT_NE(r.output.find("--queue-sizes: 300: must be a power of two from 2 to 32768"),
              std::string::npos)
        << r.output;
}

// serve's checks across options run before any socket is bound.
TEST(Cli, ServeRefusesBadOptionCombinations) {
    const std::pair<const char*, const char*> cases[] = {
        {"serve --vhost-user /tmp/pvcli-s.sock", "exactly one port kind"},
        {"serve --vhost-user /tmp/pvcli-s.sock --macswap --echo 10.0.0.1", "exactly one port kind"},
        {"serve --vhost-user /tmp/pvcli-s.sock --vhost-user /tmp/pvcli-t.sock --switch --macswap",
         "exactly one port kind"},
        {"serve --vhost-user /tmp/pvcli-s.sock --macswap --switch-ageing 10",
         "applies to --switch only"},
        {"serve --vhost-user /tmp/pvcli-s.sock --macswap --switch-flood-pps 10",
         "--switch-flood-pps: applies to --switch only"},
        {"serve --vhost-user /tmp/pvcli-s.sock --macswap --switch-mac 52:54:00:12:34:56",
         "--switch-mac: applies to --switch only"},
        {"serve --vhost-user /tmp/pvcli-s.sock --switch --switch-mac any --switch-mac "
         "52:54:00:12:34:56",
         "--switch-mac: one per --vhost-user at most (2 given)"},
        {"serve --vhost-user /tmp/pvcli-s.sock --vhost-user /tmp/pvcli-t.sock --tap pvcli-t",
         "give one --vhost-user"},
        {"serve --vhost-user /tmp/pvcli-s.sock --vhost-user /tmp/pvcli-s.sock --macswap",
         "given once"},
        {"serve --vhost-user /tmp/pvcli-s.sock --macswap --mode poll --busyloop-usecs 5",
         "applies to --mode event only"},
    };
    for (const auto& [args, msg] : cases) {
        const Outcome r = run_pvnet(args);
        EXPECT_EQ(r.status, kValidationError) << args << "\n" << r.output;
        EXPECT_NE(r.output.find(msg), std::string::npos) << args << "\n" << r.output;
        EXPECT_EQ(r.output.find("ready"), std::string::npos) << args;
    }
}

// Checks across options run before the relay opens anything.
TEST(Cli, RelayRefusesOneTapForBothSides) {
    // Every other value here is at an edge of its rule and must pass.
    const Outcome r = run_pvnet(
        "relay --guest-tap abcdefghijklmno --host-tap abcdefghijklmno --queue-size 32768 "
        "--tx-frames 32768 --tx-usecs 1000000 --tx-weight 0 --guest-cpu -1 --backend-cpu 0 "
        "--offloads off --tx-mode free-on-xmit --stats-interval 0");
    EXPECT_EQ(r.status, kValidationError) << r.output;
    EXPECT_NE(r.output.find("--host-tap: abcdefghijklmno: must be another tap than --guest-tap"),
              std::string::npos)
        << r.output;
}

TEST(Cli, PlainRelayRefusesRingOptions) {
    const Outcome r = run_pvnet("relay --guest-tap pvcli-a --host-tap pvcli-b --plain --direct");
    EXPECT_EQ(r.status, kValidationError) << r.output;
    EXPECT_NE(r.output.find("--direct: applies to the ring relay, not --plain"), std::string::npos)
        << r.output;
}

// Values at the edges of the rules run: the limits are the code's real ones.
TEST(Cli, PvpRunsAtTheEdgesOfItsRules) {
    const Outcome r = run_pvnet(
        "bench pvp --frame-bytes 64,1518 --queue-sizes 2,32768 --weights none,1000000 "
        "--repeat 1 --seconds 0.01 --warmup 0 --backend-cpu -1 --frontend-cpu -1");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("ERROR"), std::string::npos) << r.output;
}

// Every run in the JSON carries the placement probe taken before it: a class
// and, when the probe ran, a positive round trip (its size is the machine's).
TEST(Cli, PvpJsonRecordsEachRunsPlacement) {
    const std::string json = "/tmp/pvcli-placement-" + std::to_string(::getpid()) + ".json";
    const Outcome r = run_pvnet(
        "bench pvp --frame-bytes 64 --queue-sizes 256 --weights baseline,256 --repeat 2 "
        "--seconds 0.01 --warmup 0 --backend-cpu -1 --frontend-cpu -1 --json " + json);
    ASSERT_EQ(r.status, 0) << r.output;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    std::remove(json.c_str());
    ASSERT_FALSE(j.is_discarded());
    EXPECT_TRUE(j.at("placement_source").is_string());
    ASSERT_EQ(j.at("cells").size(), 2u);
    for (const auto& c : j.at("cells")) {
        ASSERT_EQ(c.at("runs").size(), 2u);
        for (const auto& run : c.at("runs")) {
            const auto& p = run.at("placement");
            EXPECT_EQ(p.at("cpus"), nlohmann::json({0, 1})) << p;  // unpinned: the first two
            const std::string cls = p.at("class");
            if (cls == "unknown") {
                EXPECT_TRUE(p.at("round_trip_ns").is_null()) << p;
                EXPECT_TRUE(p.at("error").is_string()) << p;
            } else {
                EXPECT_TRUE(cls == "near" || cls == "far") << p;
                EXPECT_GT(p.at("round_trip_ns").get<double>(), 0) << p;
            }
        }
    }
    EXPECT_NE(r.output.find("placement"), std::string::npos) << r.output;  // the table's column
}

// Two runs, not one: the smallest send buffer (one frame) together with tx
// completions withheld for a second sends nothing in a 0.05 s window, which
// the bench rightly reports as an error.
TEST(Cli, RrRunsAtTheEdgesOfItsRules) {
    for (const char* edges : {"--sndbuf 1530", "--tx-frames 32768 --tx-usecs 1000000"}) {
        const Outcome r = run_pvnet(std::string("bench rr --flows 1 --rr-rate 1000 --tx-weight 0 ") +
                                    edges +
                                    " --repeat 1 --seconds 0.05 --backend-cpu -1 --frontend-cpu -1");
        EXPECT_EQ(r.status, 0) << edges << "\n" << r.output;
        EXPECT_EQ(r.output.find("ERROR"), std::string::npos) << edges << "\n" << r.output;
    }
}

}  // namespace
