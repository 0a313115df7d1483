// The grant datapath across processes (issue 13): `pvnet grant-back` serving
// `pvnet grant-front` processes. The negotiation matrix (backend fallback ×
// backend offer × frontend offer), with sequence-checked traffic both ways
// in every mode; four guests on one backend at once; copy through
// process_vm_readv/writev. Every frame is delivered in order and intact, and
// when a guest leaves, the backend holds none of its grants.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "pvnet/lab/child.h"
#include "pvnet/lab/tool_output.h"
#include "temp_dir.h"

namespace pvnet::grant {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kFrames = 5000;  // ~20 rounds of each ring, each way
constexpr uint64_t kRing = 256;

/// The line of `out` that starts with `prefix`, or "".
std::string line_with(const std::string& out, const std::string& prefix) {
    std::size_t at = 0;
    while (at < out.size()) {
        const std::size_t end = out.find('\n', at);
        const std::string line = out.substr(at, end == std::string::npos ? end : end - at);
        if (line.rfind(prefix, 0) == 0) return line;
        if (end == std::string::npos) break;
        at = end + 1;
    }
    return "";
}

uint64_t get(const std::string& line, const char* key) {
    const auto v = lab::key_value(line, key);
    EXPECT_TRUE(v.has_value()) << key << " missing in: " << line;
    return v.value_or(~uint64_t{0});
}

struct Backend {
    test::TempDir dir;
    std::optional<lab::Child> child;
    std::string sock() const { return dir.path() + "/netback.sock"; }
    std::string store() const { return dir.path() + "/store"; }

    ::testing::AssertionResult start(const std::vector<std::string>& extra) {
        if (!dir.ok()) return ::testing::AssertionFailure() << "mkdtemp";
        std::vector<std::string> argv{PVNET_EXE, "grant-back", "--socket", sock(), "--store",
                                      store(), "--duration", "60"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        auto c = lab::Child::spawn(argv);
        if (!c) return ::testing::AssertionFailure() << c.error();
        child.emplace(std::move(*c));
        if (!child->wait_for_line_if(
                [](std::string_view l) { return l.rfind("listening ", 0) == 0; }, 10s)) {
            return ::testing::AssertionFailure() << "no listening line: " << child->output_tail();
        }
        return ::testing::AssertionSuccess();
    }
    lab::Child front(uint16_t domid, bool persistent, const std::string& direction = "both") {
        return lab::Child::spawn({PVNET_EXE, "grant-front", "--socket", sock(), "--store", store(),
                                  "--domid", std::to_string(domid), "--persistent",
                                  persistent ? "on" : "off", "--direction", direction,
                                  "--frames", std::to_string(kFrames), "--seconds", "20"})
            .value();
    }
    /// Waits for guest `domid`'s report line.
    std::string report(uint16_t domid) {
        const std::string tag = "guest domid=" + std::to_string(domid) + " ";
        auto l = child->wait_for_line_if([&](std::string_view s) { return s.rfind(tag, 0) == 0; },
                                         20s);
        return l.value_or("");
    }
};

/// The frontend's phases and the backend's report agree with a clean run in `mode`.
void expect_clean_run(const std::string& front_out, const std::string& back_line,
                      const std::string& mode) {
    for (const char* dir : {"tx", "rx"}) {
        const std::string ph = line_with(front_out, std::string("phase direction=") + dir);
        ASSERT_FALSE(ph.empty()) << front_out;
        EXPECT_NE(ph.find(" mode=" + mode + " "), std::string::npos) << ph;
        EXPECT_EQ(get(ph, "frames"), kFrames) << ph;
        EXPECT_EQ(get(ph, "sink_lost"), 0u) << ph;
        EXPECT_EQ(get(ph, "sink_bad"), 0u) << ph;
        if (mode == "persistent") {
            EXPECT_EQ(get(ph, "grants"), 0u) << "pools are granted once, at connect: " << ph;
            EXPECT_GE(get(ph, "copy_bytes"), kFrames * 1514) << ph;
        } else {
            EXPECT_GE(get(ph, "grants"), kFrames) << "a grant per packet: " << ph;
            EXPECT_LE(get(ph, "revokes"), get(ph, "grants")) << ph;
            EXPECT_EQ(get(ph, "copy_bytes"), 0u) << ph;
        }
    }
    ASSERT_FALSE(back_line.empty());
    EXPECT_NE(back_line.find(" mode=" + mode + " "), std::string::npos) << back_line;
    EXPECT_EQ(get(back_line, "sink_pkts"), kFrames) << back_line;
    EXPECT_EQ(get(back_line, "tx_pkts"), kFrames) << back_line;
    EXPECT_GE(get(back_line, "rx_pkts"), kFrames) << back_line;
    EXPECT_EQ(get(back_line, "sink_lost"), 0u) << back_line;
    EXPECT_EQ(get(back_line, "sink_bad"), 0u) << back_line;
    EXPECT_EQ(get(back_line, "grant_errors"), 0u) << back_line;
    EXPECT_EQ(get(back_line, "rx_broken"), 0u) << back_line;
    EXPECT_EQ(get(back_line, "tx_broken"), 0u) << back_line;
    EXPECT_EQ(get(back_line, "held_after"), 0u) << "every grant released: " << back_line;
    const uint64_t grants = get(back_line, "grants");
    EXPECT_GE(grants, 2 * kFrames) << back_line;
    if (mode == "map") {
        EXPECT_EQ(get(back_line, "map_syscalls"), grants) << "one mmap per grant: " << back_line;
        EXPECT_EQ(get(back_line, "unmap_syscalls"), grants) << back_line;
        EXPECT_EQ(get(back_line, "copy_syscalls"), 0u) << back_line;
    } else if (mode == "copy") {
        EXPECT_EQ(get(back_line, "map_syscalls"), 0u) << back_line;
        // One copy per tx grant, one per rx grant written back.
        EXPECT_GE(get(back_line, "copy_syscalls"), 2 * kFrames) << back_line;
        EXPECT_LE(get(back_line, "copy_syscalls"), grants) << back_line;
    } else {
        EXPECT_LE(get(back_line, "map_syscalls"), 2 * kRing) << "a pool per direction: "
                                                               << back_line;
        EXPECT_EQ(get(back_line, "unmap_syscalls"), get(back_line, "map_syscalls")) << back_line;
        EXPECT_EQ(get(back_line, "pool_evictions"), 0u) << back_line;
        EXPECT_EQ(get(back_line, "pool_hits") + get(back_line, "pool_misses"), grants)
            << back_line;
    }
}

struct Combo {
    const char* fallback;
    bool back_offers;
    bool front_offers;
};

class GrantNegotiation : public ::testing::TestWithParam<Combo> {};

TEST_P(GrantNegotiation, BothSidesAgreeAndEveryFrameArrivesBothWays) {
    const Combo c = GetParam();
    Backend b;
    ASSERT_TRUE(b.start({"--fallback", c.fallback, "--persistent", c.back_offers ? "on" : "off"}));
    lab::Child f = b.front(5, c.front_offers);
    const lab::ExitStatus st = f.finish(60s);
    ASSERT_TRUE(st.ok()) << st.to_string() << "\n" << f.output_tail();
    const std::string want = c.back_offers && c.front_offers ? "persistent" : c.fallback;
    EXPECT_NE(f.output().find("connected domid=5 mode=" + want), std::string::npos)
        << f.output();
    const std::string line = b.report(5);
    ASSERT_NO_FATAL_FAILURE(expect_clean_run(f.output(), line, want));
    // The store holds what was agreed, and both sides closed.
    b.child->stop();
    EXPECT_NE(b.child->output().find("final refused=0"), std::string::npos)
        << b.child->output_tail();
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, GrantNegotiation,
    ::testing::Values(Combo{"map", true, true}, Combo{"map", true, false},
                      Combo{"map", false, true}, Combo{"map", false, false},
                      Combo{"copy", true, true}, Combo{"copy", true, false},
                      Combo{"copy", false, true}, Combo{"copy", false, false}),
    [](const ::testing::TestParamInfo<Combo>& p) {
        return std::string(p.param.fallback) + (p.param.back_offers ? "_BackOffers" : "_BackNot") +
               (p.param.front_offers ? "_FrontOffers" : "_FrontNot");
    });

TEST(GrantBackend, ServesFourGuestsAtOnceEachInItsOwnMode) {
    Backend b;
    ASSERT_TRUE(b.start({"--fallback", "map"}));
    std::vector<lab::Child> fronts;
    for (uint16_t d = 1; d <= 4; ++d) fronts.push_back(b.front(d, d % 2 == 0));
    for (uint16_t d = 1; d <= 4; ++d) {
        lab::Child& f = fronts[d - 1u];
        const lab::ExitStatus st = f.finish(90s);
        ASSERT_TRUE(st.ok()) << "domid " << d << ": " << st.to_string() << "\n"
                             << f.output_tail();
        const std::string want = d % 2 == 0 ? "persistent" : "map";
        SCOPED_TRACE("domid " + std::to_string(d));
        ASSERT_NO_FATAL_FAILURE(expect_clean_run(f.output(), b.report(d), want));
    }
}

TEST(GrantBackend, CopiesThroughProcessVmToo) {
    Backend b;
    ASSERT_TRUE(b.start({"--fallback", "copy", "--persistent", "off", "--copy-via", "process-vm"}));
    lab::Child f = b.front(9, true);
    const lab::ExitStatus st = f.finish(60s);
    ASSERT_TRUE(st.ok()) << st.to_string() << "\n" << f.output_tail();
    ASSERT_NO_FATAL_FAILURE(expect_clean_run(f.output(), b.report(9), "copy"));
}

TEST(GrantBackend, AFrontendThatCannotConnectGetsAClearError) {
    test::TempDir dir;
    ASSERT_TRUE(dir.ok());
    auto f = lab::Child::spawn({PVNET_EXE, "grant-front", "--socket", dir.path() + "/none.sock",
                                "--store", dir.path() + "/store", "--domid", "3"});
    ASSERT_TRUE(f.has_value());
    const lab::ExitStatus st = f->finish(10s);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(f->output().find("connect " + dir.path() + "/none.sock"), std::string::npos)
        << f->output();
}

}  // namespace
}  // namespace pvnet::grant
