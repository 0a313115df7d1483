// `pvnet bench stream` and `pvnet bench rr`: seed 000's table — the five
// tx completion variants in columns, 1/10/100 flows, rows of throughput,
// cycles, latency, bytes per packet, interrupts and kicks per second.
// Variants (and busy-poll settings) interleave within each round; medians of
// the rounds with min–max in the JSON.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
#include "bench_meta.h"
#include "cli_checks.h"
#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/backend/vhost_net.h"
#include "pvnet/bench/stream_rr.h"
#include "pvnet/port/gen_port.h"

namespace pvnet::app {
namespace {

constexpr bench::TxVariant kVariants[] = {
    bench::TxVariant::Upstream, bench::TxVariant::Napi, bench::TxVariant::NapiCoalesce,
    bench::TxVariant::NapiAtRx, bench::TxVariant::NapiCoalesceAtRx};

bench::TxVariant parse_variant(const std::string& name) {
    for (auto v : kVariants) {
        if (name == bench::to_string(v)) return v;
    }
    throw std::runtime_error("--variants: unknown variant '" + name +
                             "' (upstream, napi, napi+coalesce, napi+at-rx, napi+both)");
}

nlohmann::json run_json(const bench::StreamRrResult& x) {
    return {{"ok", x.ok},
            {"error", x.error},
            {"window_s", x.window_s},
            {"goodput_gbps", x.goodput_gbps},
            {"frame_gbps", x.frame_gbps},
            {"work", x.work},
            {"work_completed", x.work_completed},
            {"gcycles", x.gcycles},
            {"trans_per_s", x.trans_per_s},
            {"pkts_per_s", x.pkts_per_s},
            {"offered_per_s", x.offered_per_s},
            {"backlog_end", x.backlog_end},
            {"rr_unmatched", x.rr_unmatched},
            {"rr_abandoned", x.rr_abandoned},
            {"max_outstanding", x.max_outstanding},
            {"p50_us", x.p50_us},
            {"p99_us", x.p99_us},
            {"send_lag_p50_us", x.send_lag_p50_us},
            {"send_lag_p99_us", x.send_lag_p99_us},
            {"cycles_per_pkt", x.cycles_per_pkt},
            {"bytes_per_pkt", x.bytes_per_pkt},
            {"interrupts_per_s", x.interrupts_per_s},
            {"tx_interrupts_per_s", x.tx_interrupts_per_s},
            {"tx_reaped_at_rx", x.tx_reaped_at_rx},
            {"coalesce_timer_fires_per_s", x.coalesce_timer_fires_per_s},
            {"kicks_per_s", x.kicks_per_s},
            {"busy_poll_hits_per_s", x.busy_poll_hits_per_s},
            {"sndbuf_stalls_per_s", x.sndbuf_stalls_per_s},
            {"sndbuf_stalls_whole_run", x.sndbuf_stalls},
            {"sndbuf_stall_ms_whole_run", x.sndbuf_stall_ms}};
}

void add_one(CLI::App& bench, bench::Workload workload) {
    struct Opts {
        std::vector<uint16_t> flows{1, 10, 100};
        std::vector<std::string> variants;
        uint32_t rr_rate = 0;
        uint32_t sndbuf = 131072;
        uint32_t tx_frames = 64, tx_usecs = 64, rx_frames = 0, rx_usecs = 0;
        uint32_t busyloop = 0, busy_poll = 0;
        std::vector<uint32_t> busy_sweep;
        uint32_t tx_weight = backend::kPktWeight;
        uint32_t server_ns = 0;
        double work_gbytes = 0;
        uint32_t work_trans = 0;
        int repeat = 5;
        double seconds = 1.0;
        int backend_cpu = 0, frontend_cpu = 1;
        std::string json;
    };
    auto o = std::make_shared<Opts>();
    const bool stream = workload == bench::Workload::Stream;
    CLI::App* cmd = bench.add_subcommand(
        stream ? "stream" : "rr",
        stream ? "N flows stream 64 KiB messages in 1514-byte frames; ACK every 2nd frame"
               : "N flows, one 64-byte request outstanding each (or --rr-rate total/s, open loop)");
    using checks::Int;
    constexpr uint32_t kMaxUsecs = backend::kNotfCoalMaxUsecs;
    constexpr uint32_t kMaxFrames = backend::kNotfCoalMaxPackets;
    // A flow's frames carry UDP source port kUdpSrcPortBase + flow.
    constexpr uint16_t kMaxFlows = UINT16_MAX - port::kUdpSrcPortBase + 1;
    // A send larger than sndbuf never fits (Flow): at least one largest frame and its header.
    constexpr uint32_t kMinSndbuf = port::kMaxFrameBytes + backend::kHdrBytes;
    cmd->add_option("--flows", o->flows, "flow counts")
        ->delimiter(',')
        ->check(Int(uint16_t{1}, kMaxFlows));
    std::vector<std::string> variant_names;
    for (auto v : kVariants) variant_names.emplace_back(bench::to_string(v));
    cmd->add_option("--variants", o->variants, "columns (default: all)")
        ->delimiter(',')
        ->check(checks::OneOf(variant_names));
    if (!stream) {
        // 1e9 / rate is the gap between requests in ns; above 1e9/s it would be 0 (closed loop).
        cmd->add_option("--rr-rate", o->rr_rate,
                        "total requests/s, open loop: each request at its planned time, latency "
                        "from that time (0: closed loop)")
            ->check(Int(0u, 1'000'000'000u, "0: closed loop"));
    }
    cmd->add_option("--sndbuf", o->sndbuf, "send buffer per flow, bytes")
        ->check(Int(kMinSndbuf, UINT32_MAX));
    // ethtool -C's names; they configure the +coalesce variants.
    cmd->add_option("--tx-frames", o->tx_frames,
                    "+coalesce: tx completions per interrupt (seed: 64)")
        ->check(Int(0u, kMaxFrames, "0: off"));
    cmd->add_option("--tx-usecs", o->tx_usecs, "+coalesce: tx interrupt delay, us (seed: 64)")
        ->check(Int(0u, kMaxUsecs, "0: off"));
    cmd->add_option("--rx-frames", o->rx_frames, "+coalesce: rx packets per interrupt (0: off)")
        ->check(Int(0u, kMaxFrames, "0: off"));
    cmd->add_option("--rx-usecs", o->rx_usecs, "+coalesce: rx interrupt delay, us (0: off)")
        ->check(Int(0u, kMaxUsecs, "0: off"));
    cmd->add_option("--busyloop-usecs", o->busyloop, "backend spins this long before sleeping")
        ->check(Int(0u, kMaxUsecs));
    cmd->add_option("--busy-poll-usecs", o->busy_poll,
                    "guest spins on rx this long before sleeping")
        ->check(Int(0u, kMaxUsecs));
    cmd->add_option("--busy-sweep", o->busy_sweep,
                    "busy-poll settings U (both sides spin U us; 0: both sleep), each a column "
                    "group in every round; adds busy / sleeping ratios per variant")
        ->delimiter(',')
        ->check(Int(0u, kMaxUsecs));
    cmd->add_option("--tx-weight", o->tx_weight,
                    "backend tx packet weight: packets completed before rx (ACKs) is served "
                    "(0: no packet limit, the byte weight still applies)")
        ->check(Int(0u, 1'000'000u, "0: no packet limit"));
    cmd->add_option("--server-ns", o->server_ns,
                    "server work per received frame, ns (a host stack's receive cost)")
        ->check(Int(0u, 1'000'000u));
    if (stream) {
        cmd->add_option("--work-gbytes", o->work_gbytes,
                        "fixed work per run: the window closes after this much payload (GB, "
                        "10^9 bytes), at most --seconds; gives seed 000's Gcycles per run (0: "
                        "fixed --seconds)")
            ->check(checks::Real(0.0, 1000.0, "0: fixed --seconds"));
    } else {
        cmd->add_option("--work-trans", o->work_trans,
                        "closed loop: fixed work per run, transactions per flow (at most "
                        "--seconds); gives seed 000's Gcycles per run (0: fixed --seconds)")
            ->check(Int(0u, 1'000'000'000u, "0: fixed --seconds"));
    }
    cmd->add_option("--repeat", o->repeat, "rounds")->check(Int(1, 1000));
    cmd->add_option("--seconds", o->seconds,
                    "measured seconds per run (with fixed work: the most a run may take)")
        ->check(checks::Real(0.05, 600.0));
    cmd->add_option("--backend-cpu", o->backend_cpu, "CPU of the vhost worker (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--frontend-cpu", o->frontend_cpu, "CPU of the guest thread (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--json", o->json, "write all runs to this file")->check(checks::OutputPath());

    cmd->callback([o, workload, stream] {
        std::vector<bench::TxVariant> variants;
        for (const auto& v : o->variants) variants.push_back(parse_variant(v));
        if (variants.empty()) variants.assign(std::begin(kVariants), std::end(kVariants));
        if (o->work_trans && o->rr_rate) {
            throw CLI::ValidationError("--work-trans", "the open loop (--rr-rate) runs for --seconds");
        }
        // Busy settings: the sweep, or the one pair of options.
        struct Busy {
            uint32_t backend, guest;
        };
        std::vector<Busy> busies;
        for (uint32_t u : o->busy_sweep) busies.push_back({u, u});
        if (busies.empty()) busies.push_back({o->busyloop, o->busy_poll});
        auto busy_name = [&](std::size_t bi) {
            const Busy& b = busies[bi];
            if (o->busy_sweep.empty() && b.backend == 0 && b.guest == 0) return std::string();
            return b.backend == 0 && b.guest == 0 ? std::string(" sleep")
                                                  : " busy " + std::to_string(b.backend) + "/" +
                                                        std::to_string(b.guest);
        };
        boost_autogroup();

        // runs[flow index][variant][busy][round]
        using Runs = std::vector<bench::StreamRrResult>;
        std::vector<std::vector<std::vector<Runs>>> runs(
            o->flows.size(),
            std::vector<std::vector<Runs>>(variants.size(), std::vector<Runs>(busies.size())));
        const std::size_t total = o->flows.size() * variants.size() * busies.size() *
                                  static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        bool all_ok = true;
        for (int r = 0; r < o->repeat; ++r) {
            for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
                for (std::size_t vi = 0; vi < variants.size(); ++vi) {
                    for (std::size_t bi = 0; bi < busies.size(); ++bi) {
                        bench::StreamRrConfig cfg;
                        cfg.workload = workload;
                        cfg.variant = variants[vi];
                        cfg.flows = o->flows[fi];
                        cfg.rr_rate = o->rr_rate;
                        cfg.sndbuf_bytes = o->sndbuf;
                        cfg.tx_frames = o->tx_frames;
                        cfg.tx_usecs = o->tx_usecs;
                        cfg.rx_frames = o->rx_frames;
                        cfg.rx_usecs = o->rx_usecs;
                        cfg.busyloop_usecs = busies[bi].backend;
                        cfg.busy_poll_usecs = busies[bi].guest;
                        cfg.tx_weight_pkts = o->tx_weight;
                        cfg.server_ns = o->server_ns;
                        cfg.work = stream ? static_cast<uint64_t>(o->work_gbytes * 1e9)
                                          : uint64_t{o->work_trans} * cfg.flows;
                        cfg.seconds = o->seconds;
                        cfg.backend_cpu = o->backend_cpu;
                        cfg.frontend_cpu = o->frontend_cpu;
                        auto res = bench::run_stream_rr(cfg);
                        if (res.ok && cfg.work && !res.work_completed) {
                            res.ok = false;
                            res.error = "the fixed work did not complete within --seconds";
                        }
                        ++done;
                        std::fprintf(stderr, "\r[%zu/%zu] %3ux %-14s%s%s   ", done, total,
                                     cfg.flows, bench::to_string(cfg.variant),
                                     busy_name(bi).c_str(),
                                     res.ok ? "" : (" ERROR: " + res.error).c_str());
                        if (!res.ok) all_ok = false;
                        runs[fi][vi][bi].push_back(std::move(res));
                    }
                }
            }
        }
        std::fprintf(stderr, "\n");
        std::string title = stream ? "Stream" : "RR";
        if (!stream && o->rr_rate) title += ", open loop at " + std::to_string(o->rr_rate) + " requests/s";
        std::printf("\n%s, medians of %d\n", title.c_str(), o->repeat);
        using R = bench::StreamRrResult;
        for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
            std::printf("%ux %-20s", o->flows[fi], "");
            for (auto v : variants) {
                for (std::size_t bi = 0; bi < busies.size(); ++bi) {
                    std::printf(" %20s", (bench::to_string(v) + busy_name(bi)).c_str());
                }
            }
            std::printf("\n");
            auto row = [&](const char* name, auto field, const char* fmt) {
                std::printf("  %-22s", name);
                for (std::size_t vi = 0; vi < variants.size(); ++vi) {
                    for (std::size_t bi = 0; bi < busies.size(); ++bi) {
                        std::printf(fmt, median_of(runs[fi][vi][bi], field));
                    }
                }
                std::printf("\n");
            };
            if (stream) {
                row("goodput Gbit/s", [](const R& x) { return x.goodput_gbps; }, " %20.2f");
                row("frame Gbit/s", [](const R& x) { return x.frame_gbps; }, " %20.2f");
            } else {
                if (o->rr_rate) {
                    row("offered req/s", [](const R& x) { return x.offered_per_s; }, " %20.0f");
                    row("achieved req/s", [](const R& x) { return x.pkts_per_s; }, " %20.0f");
                    row("backlog at end", [](const R& x) { return static_cast<double>(x.backlog_end); },
                        " %20.0f");
                }
                row("trans/s", [](const R& x) { return x.trans_per_s; }, " %20.0f");
                row("p50 us", [](const R& x) { return x.p50_us; }, " %20.1f");
                row("p99 us", [](const R& x) { return x.p99_us; }, " %20.1f");
                if (o->rr_rate) {
                    row("send lag p50 us", [](const R& x) { return x.send_lag_p50_us; }, " %20.1f");
                    row("send lag p99 us", [](const R& x) { return x.send_lag_p99_us; }, " %20.1f");
                }
            }
            if (stream ? o->work_gbytes > 0 : o->work_trans > 0) {
                row("Gcycles per run", [](const R& x) { return x.gcycles; }, " %20.3f");
            }
            row(stream ? "cycles/pkt" : "cycles/trans", [](const R& x) { return x.cycles_per_pkt; },
                " %20.0f");
            row("bytes/pkt", [](const R& x) { return x.bytes_per_pkt; }, " %20.0f");
            row("interrupts/s", [](const R& x) { return x.interrupts_per_s; }, " %20.0f");
            row("tx interrupts/s", [](const R& x) { return x.tx_interrupts_per_s; }, " %20.0f");
            row("tx reaped at rx %", [](const R& x) { return 100 * x.tx_reaped_at_rx; }, " %20.1f");
            row("timer fires/s", [](const R& x) { return x.coalesce_timer_fires_per_s; }, " %20.0f");
            row("kicks/s", [](const R& x) { return x.kicks_per_s; }, " %20.0f");
            row("busy-poll hits/s", [](const R& x) { return x.busy_poll_hits_per_s; }, " %20.0f");
            row("sndbuf stalls/s", [](const R& x) { return x.sndbuf_stalls_per_s; }, " %20.0f");
            // Like with like: each busy setting against the same variant
            // sleeping, within the same round.
            if (!o->busy_sweep.empty() && o->busy_sweep.front() == 0) {
                for (std::size_t vi = 0; vi < variants.size(); ++vi) {
                    for (std::size_t bi = 1; bi < busies.size(); ++bi) {
                        std::vector<double> ratio;
                        const Runs& base = runs[fi][vi][0];
                        const Runs& busy = runs[fi][vi][bi];
                        for (std::size_t k = 0; k < base.size() && k < busy.size(); ++k) {
                            const double b0 = stream ? base[k].goodput_gbps : base[k].trans_per_s;
                            const double b1 = stream ? busy[k].goodput_gbps : busy[k].trans_per_s;
                            if (b0 > 0) ratio.push_back(b1 / b0);
                        }
                        const Stat s = stat_of(ratio);
                        std::printf("  %s%s / sleeping, same round: %.2f (%.2f–%.2f)\n",
                                    bench::to_string(variants[vi]), busy_name(bi).c_str(),
                                    s.median, s.min, s.max);
                    }
                }
            }
        }
        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = stream ? "stream" : "rr";
            j["rr_rate"] = o->rr_rate;
            j["repeat"] = o->repeat;
            j["seconds"] = o->seconds;
            j["work"] = stream ? nlohmann::json{{"payload_gbytes", o->work_gbytes}}
                               : nlohmann::json{{"trans_per_flow", o->work_trans}};
            j["tx_weight_pkts"] = o->tx_weight;
            j["server_ns"] = o->server_ns;
            j["sndbuf_bytes"] = o->sndbuf;
            j["coalesce"] = {{"tx_frames", o->tx_frames}, {"tx_usecs", o->tx_usecs},
                             {"rx_frames", o->rx_frames}, {"rx_usecs", o->rx_usecs}};
            j["cycles_source"] = "thread CPU time (CLOCK_THREAD_CPUTIME_ID) x rdtsc rate";
            j["goodput"] = "UDP payload (frame - 42 header bytes) the server received";
            for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
                for (std::size_t vi = 0; vi < variants.size(); ++vi) {
                    for (std::size_t bi = 0; bi < busies.size(); ++bi) {
                        nlohmann::json jc;
                        jc["flows"] = o->flows[fi];
                        jc["variant"] = bench::to_string(variants[vi]);
                        jc["busyloop_usecs"] = busies[bi].backend;
                        jc["busy_poll_usecs"] = busies[bi].guest;
                        jc["runs"] = nlohmann::json::array();
                        for (const auto& x : runs[fi][vi][bi]) jc["runs"].push_back(run_json(x));
                        j["cells"].push_back(jc);
                    }
                }
            }
            std::ofstream(o->json) << j.dump(2) << "\n";
        }
        if (!all_ok) throw std::runtime_error("some runs failed (see ERROR lines)");
    });
}

}  // namespace

void add_bench_stream_rr(CLI::App& bench) {
    add_one(bench, bench::Workload::Stream);
    add_one(bench, bench::Workload::Rr);
}

}  // namespace pvnet::app
