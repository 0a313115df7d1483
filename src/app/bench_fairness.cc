// `pvnet bench fairness`: seed 001's claim that without an rx packet
// weight "under rx flood with small packets, tx can be delayed for a very
// long time". Variants interleave (A B A B); medians with min/max.
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
#include "pvnet/bench/fairness.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::app {

void add_bench_fairness(CLI::App& bench) {
    struct Opts {
        std::vector<uint16_t> queues{256, 1024};
        std::vector<std::string> weights{"baseline", "256"};
        uint32_t byte_weight = 0x80000;
        uint32_t tx_pps = 20'000;
        std::string mode = "event";
        int repeat = 5;
        double seconds = 1.0;
        int backend_cpu = 0, frontend_cpu = 1;
        std::string json;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = bench.add_subcommand(
        "fairness", "rx flood of 64-byte frames vs the guest's paced tx stream on one worker");
    cmd->add_option("--queue-sizes", o->queues, "ring sizes (power of two)")
        ->delimiter(',')
        ->check(checks::PowerOfTwo(checks::kMinQueueSize, virtio::kMaxQueueSize));
    cmd->add_option("--weights", o->weights,
                    "packet weights: baseline (rx unlimited, tx 2×queue), none, or N")
        ->delimiter(',')
        ->check(checks::PktWeight());
    cmd->add_option("--byte-weight", o->byte_weight, "byte weight (0: none)")
        ->check(checks::Int(0u, UINT32_MAX, "0: none"));
    cmd->add_option("--tx-pps", o->tx_pps, "the guest's tx rate")
        ->check(checks::Int(1u, 5'000'000u));
    cmd->add_option("--mode", o->mode, "event or poll")->check(checks::OneOf({"event", "poll"}));
    cmd->add_option("--repeat", o->repeat, "rounds")->check(checks::Int(1, 1000));
    cmd->add_option("--seconds", o->seconds, "measured seconds per run")
        ->check(checks::Real(0.05, 600.0));
    cmd->add_option("--backend-cpu", o->backend_cpu, "CPU of the vhost worker (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--frontend-cpu", o->frontend_cpu, "CPU of the guest thread (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--json", o->json, "write all runs and medians to this file")
        ->check(checks::OutputPath());

    cmd->callback([o] {
        boost_autogroup();
        struct Cell {
            uint16_t queue;
            WeightRow w;
            std::vector<bench::FairnessResult> runs;
        };
        std::vector<Cell> cells;
        for (uint16_t q : o->queues)
            for (const auto& w : o->weights) cells.push_back({q, parse_weight(w, q, o->byte_weight), {}});
        const std::size_t total = cells.size() * static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        bool all_ok = true;
        for (int r = 0; r < o->repeat; ++r) {
            for (Cell& c : cells) {
                bench::FairnessConfig cfg;
                cfg.queue_size = c.queue;
                cfg.rx_weight = c.w.rx;
                cfg.tx_weight = c.w.tx;
                cfg.mode = o->mode == "poll" ? backend::RunMode::Poll : backend::RunMode::Event;
                cfg.tx_pps = o->tx_pps;
                cfg.seconds = o->seconds;
                cfg.backend_cpu = o->backend_cpu;
                cfg.frontend_cpu = o->frontend_cpu;
                bench::FairnessResult res = bench::run_fairness(cfg);
                ++done;
                std::fprintf(stderr, "\r[%zu/%zu] q%-5u %-11s tx p99 %9.1f us%s   ", done, total,
                             c.queue, c.w.name.c_str(), res.lat_p99_us,
                             res.ok ? "" : (" ERROR: " + res.error).c_str());
                if (!res.ok) all_ok = false;
                c.runs.push_back(std::move(res));
            }
        }
        std::fprintf(stderr, "\n");
        std::printf("\nFairness: rx flood of 64-byte frames + guest tx stream at %u pps, %s mode; "
                    "medians of %d (tx latency = guest xmit → handle_tx; max = the largest "
                    "over all runs)\n",
                    o->tx_pps, o->mode.c_str(), o->repeat);
        std::printf("%-6s %-12s %10s %10s %9s %11s %11s %11s %11s %9s\n", "queue", "weight",
                    "tx sent/s", "tx done/s", "rx Mpps", "p50 us", "p99 us", "max us all",
                    "p99 range", "rxreq/k");
        for (const Cell& c : cells) {
            auto med = [&](auto f) { return median_of(c.runs, f); };
            std::vector<double> p99;
            for (const auto& r : c.runs) p99.push_back(r.lat_p99_us);
            const Stat s = stat_of(p99);
            char range[40];
            std::snprintf(range, sizeof range, "%.0f–%.0f", s.min, s.max);
            std::printf("%-6u %-12s %10.0f %10.0f %9.3f %11.1f %11.1f %11.1f %11s %9.2f\n", c.queue,
                        c.w.name.c_str(), med([](const auto& r) { return r.tx_offered_pps; }),
                        med([](const auto& r) { return r.tx_delivered_pps; }),
                        med([](const auto& r) { return r.rx_mpps; }),
                        med([](const auto& r) { return r.lat_p50_us; }), s.median,
                        max_of(c.runs, [](const auto& r) { return r.lat_max_us; }), range,
                        med([](const auto& r) { return r.rx_requeue_per_kpkt; }));
        }
        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = "fairness";
            j["seconds"] = o->seconds;
            j["byte_weight"] = o->byte_weight;
            j["mode"] = o->mode;
            j["tx_pps"] = o->tx_pps;
            j["repeat"] = o->repeat;
            for (const Cell& c : cells) {
                nlohmann::json jc;
                jc["queue_size"] = c.queue;
                jc["weight"] = c.w.name;
                jc["rx_pkt_weight"] = c.w.rx.pkts;
                jc["tx_pkt_weight"] = c.w.tx.pkts;
                for (const auto& r : c.runs) {
                    jc["runs"].push_back({{"ok", r.ok}, {"error", r.error},
                                          {"tx_offered_pps", r.tx_offered_pps},
                                          {"tx_delivered_pps", r.tx_delivered_pps},
                                          {"rx_mpps", r.rx_mpps}, {"lat_p50_us", r.lat_p50_us},
                                          {"lat_p99_us", r.lat_p99_us}, {"lat_max_us", r.lat_max_us},
                                          {"tx_sent", r.tx_sent}, {"tx_delivered", r.tx_delivered},
                                          {"tx_lost", r.tx_lost}, {"tx_stalls", r.tx_stalls},
                                          {"rx_requeue_per_kpkt", r.rx_requeue_per_kpkt}});
                }
                j["cells"].push_back(jc);
            }
            std::ofstream(o->json) << j.dump(2) << "\n";
        }
        if (!all_ok) throw std::runtime_error("some runs broke a queue or lost tx frames");
    });
}

}  // namespace pvnet::app
