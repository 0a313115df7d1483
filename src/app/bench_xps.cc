// `pvnet bench xps`: seed 003's table — default XPS against symmetric
// queues, for T server threads at two offered rates, in one process
// (bench/xps_bench.h). The rates are given, or found: the highest rate the
// default variant sustains (replies within 3% of the offered rate and a
// p99 under 5 ms), then half of it and 90% of it. Variants interleave in each
// round; medians over the rounds, min–max in the JSON.
#include <algorithm>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
#include "bench_meta.h"
#include "cli_checks.h"
#include "pvnet/bench/xps_bench.h"

namespace pvnet::app {
namespace {

constexpr bench::XpsVariant kVariants[] = {bench::XpsVariant::Default,
                                           bench::XpsVariant::Symmetric};

nlohmann::json run_json(const bench::XpsBenchResult& x) {
    nlohmann::json q = nlohmann::json::array(), t = nlohmann::json::array();
    for (const auto& s : x.queues) {
        q.push_back({{"steered", s.steered},
                     {"rx_pkts", s.rx_pkts},
                     {"tx_pkts", s.tx_pkts},
                     {"rx_interrupts", s.rx_interrupts},
                     {"napi_polls", s.napi_polls},
                     {"tx_completions", s.tx_completions}});
    }
    for (const auto& s : x.threads) {
        t.push_back({{"txq_used", s.txq_used}, {"rxq_mismatch", s.rxq_mismatch},
                     {"by_rule", {{"rxqs", s.by_rule[0]}, {"cpus", s.by_rule[1]}, {"hash", s.by_rule[2]}}},
                     {"cpu_s", s.cpu_s}});
    }
    return {{"ok", x.ok},
            {"error", x.error},
            {"window_s", x.window_s},
            {"offered_per_s", x.offered_per_s},
            {"achieved_per_s", x.achieved_per_s},
            {"rtt_min_us", x.rtt_min_us},
            {"rtt_avg_us", x.rtt_avg_us},
            {"rtt_max_us", x.rtt_max_us},
            {"p50_us", x.p50_us},
            {"p99_us", x.p99_us},
            {"interrupts_per_s", x.interrupts_per_s},
            {"ctx_switches_per_s", x.ctx_switches_per_s},
            {"cycles_per_req", x.cycles_per_req},
            {"same_queue_share", x.same_queue_share},
            {"sent", x.sent},
            {"answered", x.answered},
            {"unmatched", x.unmatched},
            {"abandoned", x.abandoned},
            {"backlog_end", x.backlog_end},
            {"drop_sock_full", x.drop_sock_full},
            {"drop_no_buf", x.drop_no_buf},
            {"drop_bad_reply", x.drop_bad_reply},
            {"queues", q},
            {"threads", t}};
}

bool sustained(const bench::XpsBenchResult& r) {
    return r.ok && r.achieved_per_s >= 0.97 * r.offered_per_s && r.p99_us < 5000;
}

}  // namespace

void add_bench_xps(CLI::App& bench) {
    struct Opts {
        std::vector<uint16_t> threads{4, 8};
        std::vector<uint32_t> rates;
        uint16_t flows = 64;
        uint32_t server_ns = 0;
        bool pin = false;
        std::string transport = "in-process";
        int repeat = 5;
        double seconds = 1.0;
        std::string json;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = bench.add_subcommand(
        "xps", "seed 003: default XPS against symmetric queues (xps_rxqs), 2 queue pairs, RSS, "
               "T server threads, open-loop UDP requests");
    using checks::Int;
    cmd->add_option("--threads", o->threads, "server thread counts")
        ->delimiter(',')
        ->check(Int(uint16_t{1}, uint16_t{256}));
    cmd->add_option("--rates", o->rates,
                    "offered requests/s (default: found per thread count: half of and 90% of "
                    "the highest rate the default variant sustains)")
        ->delimiter(',')
        ->check(Int(1000u, 10'000'000u));
    cmd->add_option("--flows", o->flows, "UDP flows (RSS spreads them over the rx queues)")
        ->check(Int(uint16_t{2}, uint16_t{4096}));
    cmd->add_option("--server-ns", o->server_ns, "server work per request, ns")
        ->check(Int(0u, 1'000'000u));
    cmd->add_flag("--pin", o->pin,
                  "pin server thread t to CPU t % ncpu (default: free); with --transport relay: "
                  "udp-rr --steer incoming-cpu (default: hash)");
    cmd->add_option("--transport", o->transport,
                    "in-process: the guest's server threads in this process; relay: `pvnet relay "
                    "--queues 2` between namespaces, udp-rr server and client over real sockets "
                    "(root)")
        ->check(checks::OneOf({"in-process", "relay"}));
    cmd->add_option("--repeat", o->repeat, "rounds")->check(Int(1, 1000));
    cmd->add_option("--seconds", o->seconds, "measured seconds per run")
        ->check(checks::Real(0.1, 600.0));
    cmd->add_option("--json", o->json, "write all runs to this file")->check(checks::OutputPath());

    cmd->callback([o] {
        boost_autogroup();
        // The relay's children exec this binary by path, from inside
        // `ip netns exec` (where /proc/self/exe would be ip itself).
        const std::string self = o->transport == "relay"
                                     ? std::filesystem::read_symlink("/proc/self/exe").string()
                                     : std::string();
        unsigned run_no = 0;
        const auto run = [&](const bench::XpsBenchConfig& c) {
            if (o->transport == "in-process") return bench::run_xps_bench(c);
            const std::string tag = "x" + std::to_string(getpid()) + "-" + std::to_string(run_no++);
            return bench::run_xps_relay_bench(c, self, tag);
        };
        auto config = [&](bench::XpsVariant v, uint16_t threads, uint32_t rate, double seconds) {
            bench::XpsBenchConfig c;
            c.variant = v;
            c.threads = threads;
            c.pin_threads = o->pin;
            c.flows = o->flows;
            c.rate = rate;
            c.server_ns = o->server_ns;
            c.seconds = seconds;
            return c;
        };
        // Per thread count: the offered rates, and the probed maximum (0: given).
        struct Cell {
            uint16_t threads;
            uint32_t rate;
            uint32_t probed_max;
            std::vector<bench::XpsBenchResult> runs[2];
        };
        std::vector<Cell> cells;
        for (uint16_t t : o->threads) {
            if (!o->rates.empty()) {
                for (uint32_t r : o->rates) cells.push_back({t, r, 0, {}});
                continue;
            }
            // Doubling, then four bisection steps, with short runs.
            uint32_t good = 0, bad = 0;
            for (uint32_t r = 20'000; r <= 5'000'000; r *= 2) {
                const auto res = run(config(bench::XpsVariant::Default, t, r, 0.5));
                std::fprintf(stderr, "probe %ux %u/s: %.0f/s p99 %.0f us\n", t, r,
                             res.achieved_per_s, res.p99_us);
                if (!sustained(res)) {
                    bad = r;
                    break;
                }
                good = r;
            }
            if (good == 0) throw std::runtime_error("not even 20000 requests/s is sustained");
            for (int k = 0; k < 4 && bad != 0; ++k) {
                const uint32_t mid = good + (bad - good) / 2;
                const auto res = run(config(bench::XpsVariant::Default, t, mid, 0.5));
                std::fprintf(stderr, "probe %ux %u/s: %.0f/s p99 %.0f us\n", t, mid,
                             res.achieved_per_s, res.p99_us);
                (sustained(res) ? good : bad) = mid;
            }
            cells.push_back({t, good / 2, good, {}});
            cells.push_back({t, good / 10 * 9, good, {}});
        }
        bool all_ok = true;
        const std::size_t total = cells.size() * 2 * static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        for (int r = 0; r < o->repeat; ++r) {
            for (auto& c : cells) {
                for (std::size_t vi = 0; vi < 2; ++vi) {
                    auto res = run(config(kVariants[vi], c.threads, c.rate, o->seconds));
                    ++done;
                    std::fprintf(stderr, "\r[%zu/%zu] %ux %u/s %-10s%s   ", done, total, c.threads,
                                 c.rate, bench::to_string(kVariants[vi]),
                                 res.ok ? "" : (" ERROR: " + res.error).c_str());
                    all_ok = all_ok && res.ok;
                    c.runs[vi].push_back(std::move(res));
                }
            }
        }
        std::fprintf(stderr, "\n");
        using R = bench::XpsBenchResult;
        for (const auto& c : cells) {
            std::printf("\n%u threads  %u requests/s%s, medians of %d\n", c.threads, c.rate,
                        c.probed_max ? (" (highest sustained: " + std::to_string(c.probed_max) + ")").c_str() : "",
                        o->repeat);
            std::printf("  %-26s %18s %18s\n", "", "Default", "Symmetric queues");
            auto row = [&](const char* name, auto field, const char* fmt) {
                std::printf("  %-26s", name);
                for (const auto& runs : c.runs) std::printf(fmt, median_of(runs, field));
                std::printf("\n");
            };
            std::printf("  %-26s", "RTT min/avg/max (usec)");
            for (const auto& runs : c.runs) {
                const std::string s =
                    std::to_string(static_cast<int>(median_of(runs, [](const R& x) { return x.rtt_min_us; }))) + "/" +
                    std::to_string(static_cast<int>(median_of(runs, [](const R& x) { return x.rtt_avg_us; }))) + "/" +
                    std::to_string(static_cast<int>(median_of(runs, [](const R& x) { return x.rtt_max_us; })));
                std::printf(" %18s", s.c_str());
            }
            std::printf("\n");
            row("RTT p50 (usec)", [](const R& x) { return x.p50_us; }, " %18.1f");
            row("RTT p99 (usec)", [](const R& x) { return x.p99_us; }, " %18.1f");
            row("achieved req/s", [](const R& x) { return x.achieved_per_s; }, " %18.0f");
            row("intr/sec", [](const R& x) { return x.interrupts_per_s; }, " %18.0f");
            row("contextswitch/sec", [](const R& x) { return x.ctx_switches_per_s; }, " %18.0f");
            row("cycles/request", [](const R& x) { return x.cycles_per_req; }, " %18.0f");
            row("replies on request's queue %", [](const R& x) { return 100 * x.same_queue_share; },
                " %18.1f");
            std::printf("  %-26s %18s %18s\n", "insn per cycle, cache-misses", "n/a", "n/a");
            std::printf("  (this VM has no hardware counters; cycles from thread CPU time x rdtsc rate)\n");
        }
        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = "xps";
            j["repeat"] = o->repeat;
            j["seconds"] = o->seconds;
            j["flows"] = o->flows;
            j["server_ns"] = o->server_ns;
            j["pinned"] = o->pin;
            j["transport"] = o->transport;
            j["queue_pairs"] = 2;
            j["cycles_source"] =
                o->transport == "relay"
                    ? "CPU time (schedstat) of the relay process and the udp-rr server x rdtsc "
                      "rate; context switches system-wide (/proc/stat ctxt)"
                    : "thread CPU time (CLOCK_THREAD_CPUTIME_ID) of the backend worker, NAPI and "
                      "server threads x rdtsc rate";
            j["hardware_counters"] = "none in this VM: insn per cycle and cache misses not measured";
            for (const auto& c : cells) {
                for (std::size_t vi = 0; vi < 2; ++vi) {
                    nlohmann::json jc;
                    jc["threads"] = c.threads;
                    jc["rate"] = c.rate;
                    jc["probed_max"] = c.probed_max;
                    jc["variant"] = bench::to_string(kVariants[vi]);
                    jc["runs"] = nlohmann::json::array();
                    for (const auto& x : c.runs[vi]) jc["runs"].push_back(run_json(x));
                    j["cells"].push_back(jc);
                }
            }
            std::ofstream(o->json) << j.dump(2) << "\n";
        }
        if (!all_ok) throw std::runtime_error("some runs failed (see ERROR lines)");
    });
}

}  // namespace pvnet::app
