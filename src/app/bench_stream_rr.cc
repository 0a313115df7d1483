// `pvnet bench stream` and `pvnet bench rr`: seed 000's table — the five
// tx completion variants in columns, 1/10/100 flows, rows of throughput,
// cycles, latency, bytes per packet, interrupts and kicks per second.
// Variants interleave within each round; medians of the rounds.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
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

void add_one(CLI::App& bench, bench::Workload workload) {
    struct Opts {
        std::vector<uint16_t> flows{1, 10, 100};
        uint32_t rr_rate = 0;
        uint32_t sndbuf = 131072;
        uint32_t tx_frames = 64, tx_usecs = 64, rx_frames = 0, rx_usecs = 0;
        uint32_t busyloop = 0, busy_poll = 0;
        uint32_t tx_weight = backend::kPktWeight;
        uint32_t server_ns = 0;
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
               : "N flows, one 64-byte request outstanding each (or --rr-rate total/s)");
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
    if (!stream) {
        // 1e9 / rate is the gap between requests in ns; above 1e9/s it would be 0 (closed loop).
        cmd->add_option("--rr-rate", o->rr_rate, "total requests/s (0: closed loop)")
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
    cmd->add_option("--tx-weight", o->tx_weight,
                    "backend tx packet weight: packets completed before rx (ACKs) is served "
                    "(0: no packet limit, the byte weight still applies)")
        ->check(Int(0u, 1'000'000u, "0: no packet limit"));
    cmd->add_option("--server-ns", o->server_ns,
                    "server work per received frame, ns (a host stack's receive cost)")
        ->check(Int(0u, 1'000'000u));
    cmd->add_option("--repeat", o->repeat, "rounds")->check(Int(1, 1000));
    cmd->add_option("--seconds", o->seconds, "measured seconds per run")
        ->check(checks::Real(0.05, 600.0));
    cmd->add_option("--backend-cpu", o->backend_cpu, "CPU of the vhost worker (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--frontend-cpu", o->frontend_cpu, "CPU of the guest thread (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--json", o->json, "write all runs to this file")->check(checks::OutputPath());

    cmd->callback([o, workload, stream] {
        boost_autogroup();
        // runs[flow index][variant][round]
        std::vector<std::vector<std::vector<bench::StreamRrResult>>> runs(
            o->flows.size(), std::vector<std::vector<bench::StreamRrResult>>(std::size(kVariants)));
        const std::size_t total = o->flows.size() * std::size(kVariants) * static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        bool all_ok = true;
        for (int r = 0; r < o->repeat; ++r) {
            for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
                for (std::size_t vi = 0; vi < std::size(kVariants); ++vi) {
                    bench::StreamRrConfig cfg;
                    cfg.workload = workload;
                    cfg.variant = kVariants[vi];
                    cfg.flows = o->flows[fi];
                    cfg.rr_rate = o->rr_rate;
                    cfg.sndbuf_bytes = o->sndbuf;
                    cfg.tx_frames = o->tx_frames;
                    cfg.tx_usecs = o->tx_usecs;
                    cfg.rx_frames = o->rx_frames;
                    cfg.rx_usecs = o->rx_usecs;
                    cfg.busyloop_usecs = o->busyloop;
                    cfg.busy_poll_usecs = o->busy_poll;
                    cfg.tx_weight_pkts = o->tx_weight;
                    cfg.server_ns = o->server_ns;
                    cfg.seconds = o->seconds;
                    cfg.backend_cpu = o->backend_cpu;
                    cfg.frontend_cpu = o->frontend_cpu;
                    auto res = bench::run_stream_rr(cfg);
                    ++done;
                    std::fprintf(stderr, "\r[%zu/%zu] %3ux %-14s%s   ", done, total, cfg.flows,
                                 bench::to_string(cfg.variant),
                                 res.ok ? "" : (" ERROR: " + res.error).c_str());
                    if (!res.ok) all_ok = false;
                    runs[fi][vi].push_back(std::move(res));
                }
            }
        }
        std::fprintf(stderr, "\n");
        std::printf("\n%s, medians of %d%s\n", stream ? "Stream" : "RR", o->repeat,
                    !stream && o->rr_rate ? (", " + std::to_string(o->rr_rate) + " requests/s").c_str()
                                          : "");
        for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
            std::printf("%ux %-16s", o->flows[fi], "");
            for (auto v : kVariants) std::printf(" %14s", bench::to_string(v));
            std::printf("\n");
            auto row = [&](const char* name, auto field, const char* fmt) {
                std::printf("  %-18s", name);
                for (std::size_t vi = 0; vi < std::size(kVariants); ++vi) {
                    std::printf(fmt, median_of(runs[fi][vi], field));
                }
                std::printf("\n");
            };
            using R = bench::StreamRrResult;
            if (stream) {
                row("Gbit/s", [](const R& x) { return x.gbps; }, " %14.2f");
            } else {
                row("trans/s", [](const R& x) { return x.trans_per_s; }, " %14.0f");
                row("p50 us", [](const R& x) { return x.p50_us; }, " %14.1f");
                row("p99 us", [](const R& x) { return x.p99_us; }, " %14.1f");
            }
            row("cycles/pkt", [](const R& x) { return x.cycles_per_pkt; }, " %14.0f");
            row("bytes/pkt", [](const R& x) { return x.bytes_per_pkt; }, " %14.0f");
            row("interrupts/s", [](const R& x) { return x.interrupts_per_s; }, " %14.0f");
            row("tx interrupts/s", [](const R& x) { return x.tx_interrupts_per_s; }, " %14.0f");
            row("tx reaped at rx %", [](const R& x) { return 100 * x.tx_reaped_at_rx; }, " %14.1f");
            row("timer fires/s", [](const R& x) { return x.coalesce_timer_fires_per_s; }, " %14.0f");
            row("kicks/s", [](const R& x) { return x.kicks_per_s; }, " %14.0f");
            row("busy-poll hits/s", [](const R& x) { return x.busy_poll_hits_per_s; }, " %14.0f");
            row("sndbuf stalls", [](const R& x) { return static_cast<double>(x.sndbuf_stalls); }, " %14.0f");
        }
        if (!o->json.empty()) {
            nlohmann::json j;
            j["experiment"] = stream ? "stream" : "rr";
            j["rr_rate"] = o->rr_rate;
            j["repeat"] = o->repeat;
            j["tx_weight_pkts"] = o->tx_weight;
            j["server_ns"] = o->server_ns;
            j["cycles_source"] = "thread CPU time (CLOCK_THREAD_CPUTIME_ID) x rdtsc rate";
            for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
                for (std::size_t vi = 0; vi < std::size(kVariants); ++vi) {
                    nlohmann::json jc;
                    jc["flows"] = o->flows[fi];
                    jc["variant"] = bench::to_string(kVariants[vi]);
                    for (const auto& x : runs[fi][vi]) {
                        jc["runs"].push_back({{"ok", x.ok}, {"error", x.error}, {"gbps", x.gbps},
                                              {"trans_per_s", x.trans_per_s},
                                              {"pkts_per_s", x.pkts_per_s}, {"p50_us", x.p50_us},
                                              {"p99_us", x.p99_us}, {"cycles_per_pkt", x.cycles_per_pkt},
                                              {"bytes_per_pkt", x.bytes_per_pkt},
                                              {"interrupts_per_s", x.interrupts_per_s},
                                              {"tx_interrupts_per_s", x.tx_interrupts_per_s},
                                              {"tx_reaped_at_rx", x.tx_reaped_at_rx},
                                              {"coalesce_timer_fires_per_s", x.coalesce_timer_fires_per_s},
                                              {"kicks_per_s", x.kicks_per_s},
                                              {"busy_poll_hits_per_s", x.busy_poll_hits_per_s},
                                              {"sndbuf_stalls", x.sndbuf_stalls},
                                              {"sndbuf_stall_ms", x.sndbuf_stall_ms}});
                    }
                    j["cells"].push_back(jc);
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
