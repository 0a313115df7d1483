// `pvnet bench pvp`: seed 001's PVP table. Every cell (frame size × queue
// size × weight) runs once per round, rounds repeat, so variants interleave
// (A B A B) and a placement flip of the two vCPUs hits all of them alike;
// each run is preceded by a placement probe, and ratios are reported per
// placement class as well as overall.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
#include "bench_meta.h"
#include "cli_checks.h"
#include "pvnet/bench/pvp.h"
#include "pvnet/bench/testpmd.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::app {

void add_bench_pvp(CLI::App& bench) {
    struct Opts {
        std::vector<uint32_t> frames{64, 512, 1518};
        std::vector<uint16_t> queues{256, 512, 1024};
        std::vector<std::string> weights{"baseline", "128", "256", "512", "1024"};
        uint32_t byte_weight = 0x80000;
        std::string mode = "event";
        int repeat = 5;
        double seconds = 1.0;
        double warmup = 0.2;
        bool no_event_idx = false;
        int backend_cpu = 0, frontend_cpu = 1;
        std::string json;
        bool testpmd = false;
        std::string plot;
        std::string transport = "in-process";
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = bench.add_subcommand("pvp", "PVP loop: generator → rx ring → guest forward → tx ring → sink");
    cmd->add_option("--frame-bytes", o->frames, "frame sizes (the generator's range)")
        ->delimiter(',')
        ->check(checks::Int(port::kMinFrameBytes, port::kMaxFrameBytes));
    cmd->add_option("--queue-sizes", o->queues, "ring sizes (power of two)")
        ->delimiter(',')
        ->check(checks::PowerOfTwo(checks::kMinQueueSize, virtio::kMaxQueueSize));
    cmd->add_option("--weights", o->weights,
                    "packet weights: baseline (rx unlimited, tx 2×queue), none, or N")
        ->delimiter(',')
        ->check(checks::PktWeight());
    cmd->add_option("--byte-weight", o->byte_weight, "byte weight (0: none)")
        ->check(checks::Int(0u, UINT32_MAX, "0: none"));
    cmd->add_option("--mode", o->mode, "event or poll")->check(checks::OneOf({"event", "poll"}));
    cmd->add_option("--repeat", o->repeat, "rounds (each runs every cell once)")
        ->check(checks::Int(1, 1000));
    cmd->add_option("--seconds", o->seconds, "measured seconds per run")
        ->check(checks::Real(0.01, 600.0));
    cmd->add_option("--warmup", o->warmup, "seconds before measuring")
        ->check(checks::Real(0.0, 60.0));
    cmd->add_flag("--no-event-idx", o->no_event_idx, "do not negotiate VIRTIO_RING_F_EVENT_IDX");
    cmd->add_option("--backend-cpu", o->backend_cpu, "CPU of the vhost worker (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--frontend-cpu", o->frontend_cpu, "CPU of the guest thread (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--json", o->json, "write all runs and medians to this file")
        ->check(checks::OutputPath());
    cmd->add_option("--plot", o->plot,
                    "PNG: Mpps vs queue size, a line per weight, a panel per frame size")
        ->check(checks::OutputPath())
        ->check(checks::NeedsTool("gnuplot", "apt-get install gnuplot-nox"));
    cmd->add_option("--transport", o->transport,
                    "where the backend runs: in-process (a worker thread), vhost-user (a `pvnet "
                    "serve --gen-loop` process), or both, interleaved, with their ratio")
        ->check(checks::OneOf({"in-process", "vhost-user", "both"}));
    cmd->add_flag("--testpmd", o->testpmd,
                  "baseline: DPDK testpmd's virtio-user (io) <-> vhost (macswap) loop, run once "
                  "per round and queue size before pvnet's cells (root, hugepages, dpdk-dev)");

    cmd->callback([o] {
        if (o->testpmd && !bench::testpmd_available()) {
            throw CLI::ValidationError("--testpmd",
                                       "dpdk-testpmd not found (apt-get install dpdk-dev)");
        }
        boost_autogroup();
        // testpmd baseline per queue size, one entry per round.
        std::map<uint16_t, std::vector<bench::TestpmdResult>> baseline;
        std::map<uint16_t, std::vector<bench::PlacementProbe>> baseline_placement;
        struct Cell {
            uint32_t frame;
            uint16_t queue;
            WeightRow w;
            bench::PvpTransport transport;
            std::vector<bench::PvpResult> runs;
            std::vector<bench::PlacementProbe> placement;  ///< the probe before each run
        };
        std::vector<bench::PvpTransport> transports;
        if (o->transport != "vhost-user") transports.push_back(bench::PvpTransport::InProcess);
        if (o->transport != "in-process") transports.push_back(bench::PvpTransport::VhostUser);
        const auto tname = [](bench::PvpTransport t) {
            return t == bench::PvpTransport::VhostUser ? "vhost-user" : "in-process";
        };
        std::vector<Cell> cells;
        for (uint32_t f : o->frames)
            for (uint16_t q : o->queues)
                for (const auto& w : o->weights)
                    for (const auto t : transports)
                        cells.push_back({f, q, parse_weight(w, q, o->byte_weight), t, {}, {}});

        const std::size_t total = cells.size() * static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        bool all_ok = true;
        for (int r = 0; r < o->repeat; ++r) {
            if (o->testpmd) {
                for (uint16_t q : o->queues) {
                    bench::TestpmdConfig tc;
                    tc.queue_size = q;
                    tc.seconds = o->seconds;
                    tc.vhost_cpu = o->backend_cpu;
                    tc.virtio_cpu = o->frontend_cpu;
                    const bench::PlacementProbe p = probe_before_run(o->backend_cpu, o->frontend_cpu);
                    bench::TestpmdResult t = bench::run_testpmd_pvp(tc);
                    std::fprintf(stderr, "\r[round %d] testpmd q%-5u %7.3f Mpps %-4s %4.0f ns%s   ",
                                 r + 1, q, t.mpps, bench::to_string(p.placement), p.round_trip_ns,
                                 t.ok ? "" : (" ERROR: " + t.error).c_str());
                    if (!t.ok) all_ok = false;
                    baseline[q].push_back(std::move(t));
                    baseline_placement[q].push_back(p);
                }
            }
            for (Cell& c : cells) {
                bench::PvpConfig cfg;
                cfg.frame_bytes = c.frame;
                cfg.queue_size = c.queue;
                cfg.weight = c.w.rx;
                cfg.tx_weight = c.w.tx;
                cfg.mode = o->mode == "poll" ? backend::RunMode::Poll : backend::RunMode::Event;
                cfg.event_idx = !o->no_event_idx;
                cfg.seconds = o->seconds;
                cfg.warmup_s = o->warmup;
                cfg.backend_cpu = o->backend_cpu;
                cfg.frontend_cpu = o->frontend_cpu;
                cfg.transport = c.transport;
                cfg.pvnet_exe = self_exe();
                const bench::PlacementProbe p = probe_before_run(o->backend_cpu, o->frontend_cpu);
                bench::PvpResult res = bench::run_pvp(cfg);
                ++done;
                std::fprintf(stderr, "\r[%zu/%zu] %4u B q%-5u %-11s %-10s %7.3f Mpps %-4s %4.0f ns%s   ",
                             done, total, c.frame, c.queue, c.w.name.c_str(), tname(c.transport),
                             res.mpps, bench::to_string(p.placement), p.round_trip_ns,
                             res.ok ? "" : (" ERROR: " + res.error).c_str());
                if (!res.ok) all_ok = false;
                c.runs.push_back(res);
                c.placement.push_back(p);
            }
        }
        std::fprintf(stderr, "\n");

        // Each cell's runs against testpmd's run of the same round and queue size.
        const auto testpmd_ratios = [&](const Cell& c) {
            RoundRatios ratio;
            const auto& tr = baseline[c.queue];
            const auto& tp = baseline_placement[c.queue];
            for (std::size_t r = 0; r < c.runs.size() && r < tr.size(); ++r) {
                if (tr[r].ok && tr[r].mpps > 0)
                    ratio.add(c.runs[r].mpps / tr[r].mpps, c.placement[r].placement, tp[r].placement);
            }
            return ratio;
        };
        // The seed's table: a row per weight, a column per queue size, per frame size.
        const char* mode = o->mode.c_str();
        for (const auto t : transports)
        for (uint32_t f : o->frames) {
            std::printf("\nPVP %u-byte frames, %s mode, EVENT_IDX %s, backend %s: Mpps median "
                        "(min–max) of %d\n",
                        f, mode, o->no_event_idx ? "off" : "on", tname(t), o->repeat);
            std::printf("%-12s", "queue size");
            for (uint16_t q : o->queues) std::printf(" %22u", q);
            std::printf("\n");
            for (const auto& wname : o->weights) {
                std::string label;
                for (const Cell& c : cells)
                    if (c.frame == f && parse_weight(wname, c.queue, o->byte_weight).name == c.w.name) label = c.w.name;
                std::printf("%-12s", label.c_str());
                for (uint16_t q : o->queues) {
                    for (const Cell& c : cells) {
                        if (c.transport != t || c.frame != f || c.queue != q || c.w.name != parse_weight(wname, q, o->byte_weight).name) continue;
                        std::vector<double> m;
                        for (const auto& r : c.runs) m.push_back(r.mpps);
                        const Stat s = stat_of(m);
                        char buf[64];
                        std::snprintf(buf, sizeof buf, "%.3f (%.3f–%.3f)", s.median, s.min, s.max);
                        std::printf(" %22s", buf);
                    }
                }
                std::printf("\n");
            }
        }
        if (o->testpmd) {
            std::printf("\ntestpmd baseline (virtio-user io <-> vhost macswap, 64-byte tx_first "
                        "loop): Mpps median (min–max), and pvnet/testpmd ratio per cell "
                        "(median of same-round ratios; then the median per placement class of "
                    "both runs, mixed when they differ)\n");
            for (uint16_t q : o->queues) {
                std::vector<double> m;
                for (const auto& t : baseline[q]) m.push_back(t.mpps);
                const Stat s = stat_of(m);
                std::printf("queue %-5u testpmd %.3f (%.3f–%.3f)  placement %s\n", q, s.median, s.min,
                            s.max, placement_counts(baseline_placement[q]).c_str());
            }
            for (const Cell& c : cells) {
                const RoundRatios ratio = testpmd_ratios(c);
                std::printf("  %4u B q%-5u %-12s pvnet/testpmd %s  %s\n", c.frame, c.queue,
                            c.w.name.c_str(), ratio.text().c_str(), ratio.by_class_text().c_str());
            }
        }
        if (transports.size() == 2) {
            // Each vhost-user run against the in-process run of the same round and cell.
            std::printf("\nvhost-user / in-process Mpps, median (min–max) of same-round ratios, "
                        "and per placement class\n");
            for (std::size_t i = 0; i + 1 < cells.size(); i += 2) {
                const Cell& in = cells[i];
                const Cell& vu = cells[i + 1];
                RoundRatios ratio;
                for (std::size_t r = 0; r < in.runs.size() && r < vu.runs.size(); ++r) {
                    if (in.runs[r].mpps > 0) {
                        ratio.add(vu.runs[r].mpps / in.runs[r].mpps, vu.placement[r].placement,
                                  in.placement[r].placement);
                    }
                }
                std::printf("  %4u B q%-5u %-12s %s  %s\n", in.frame, in.queue, in.w.name.c_str(),
                            ratio.text().c_str(), ratio.by_class_text().c_str());
            }
        }
        std::printf("\nper packet (medians): backend/frontend CPU ns and cycles (thread CPU time × rdtsc rate), "
                    "kicks, interrupts, weight requeues per 1000 pkts; drops by reason (sum of runs); "
                    "the runs' placement\n");
        std::printf("%-10s %-6s %-6s %-12s %9s %9s %9s %9s %8s %8s %7s %7s %10s %6s  %s\n", "backend", "frame", "queue", "weight",
                    "be ns", "fe ns", "be cyc", "fe cyc", "kicks", "irqs", "rxreq", "txreq", "tx-full",
                    "other", "placement");
        for (const Cell& c : cells) {
            auto med = [&](auto field) { return median_of(c.runs, field); };
            // Drops by reason, summed over the runs: the guest's tx ring was
            // full (io forwarding's overflow), or anything else.
            uint64_t tx_full = 0, other = 0;
            for (const auto& r : c.runs) {
                tx_full += r.drop_tx_full;
                other += r.drop_other;
            }
            std::printf("%-10s %-6u %-6u %-12s %9.1f %9.1f %9.0f %9.0f %8.4f %8.4f %7.2f %7.2f %10llu %6llu  %s\n", tname(c.transport), c.frame,
                        c.queue, c.w.name.c_str(),
                        med([](const auto& r) { return r.backend_cpu_ns_per_pkt; }),
                        med([](const auto& r) { return r.frontend_cpu_ns_per_pkt; }),
                        med([](const auto& r) { return r.backend_cycles_per_pkt; }),
                        med([](const auto& r) { return r.frontend_cycles_per_pkt; }),
                        med([](const auto& r) { return r.kicks_per_pkt; }),
                        med([](const auto& r) { return r.interrupts_per_pkt; }),
                        med([](const auto& r) { return r.rx_requeue_per_kpkt; }),
                        med([](const auto& r) { return r.tx_requeue_per_kpkt; }),
                        static_cast<unsigned long long>(tx_full),
                        static_cast<unsigned long long>(other), placement_counts(c.placement).c_str());
        }

        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = "pvp";
            j["mode"] = o->mode;
            j["event_idx"] = !o->no_event_idx;
            j["repeat"] = o->repeat;
            j["seconds"] = o->seconds;
            j["byte_weight"] = o->byte_weight;
            j["cycles_source"] = "thread CPU time (CLOCK_THREAD_CPUTIME_ID) x rdtsc rate";
            j["placement_source"] = placement_source();
            for (const Cell& c : cells) {
                nlohmann::json jc;
                jc["frame_bytes"] = c.frame;
                jc["queue_size"] = c.queue;
                jc["weight"] = c.w.name;
                jc["transport"] = tname(c.transport);
                jc["rx_pkt_weight"] = c.w.rx.pkts;
                jc["tx_pkt_weight"] = c.w.tx.pkts;
                std::vector<double> m;
                for (std::size_t ri = 0; ri < c.runs.size(); ++ri) {
                    const auto& r = c.runs[ri];
                    m.push_back(r.mpps);
                    jc["runs"].push_back({{"ok", r.ok}, {"error", r.error}, {"mpps", r.mpps},
                                          {"window_s", r.window_s}, {"generated", r.generated},
                                          {"delivered", r.delivered}, {"drop_tx_full", r.drop_tx_full},
                                          {"drop_other", r.drop_other}, {"lost", r.lost},
                                          {"corrupt", r.corrupt}, {"reordered", r.reordered},
                                          {"backend_cpu_ns_per_pkt", r.backend_cpu_ns_per_pkt},
                                          {"frontend_cpu_ns_per_pkt", r.frontend_cpu_ns_per_pkt},
                                          {"backend_cycles_per_pkt", r.backend_cycles_per_pkt},
                                          {"frontend_cycles_per_pkt", r.frontend_cycles_per_pkt},
                                          {"kicks_per_pkt", r.kicks_per_pkt},
                                          {"interrupts_per_pkt", r.interrupts_per_pkt},
                                          {"rx_requeue_per_kpkt", r.rx_requeue_per_kpkt},
                                          {"tx_requeue_per_kpkt", r.tx_requeue_per_kpkt},
                                          {"rx_max_run_pkts", r.rx_max_run_pkts},
                                          {"tx_max_run_pkts", r.tx_max_run_pkts},
                                          {"placement", placement_json(c.placement[ri])}});
                }
                const Stat s = stat_of(m);
                jc["mpps"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
                if (o->testpmd) jc["ratio_to_testpmd"] = testpmd_ratios(c).json();
                j["cells"].push_back(jc);
            }
            for (const auto& [q, runs] : baseline) {
                nlohmann::json jb;
                jb["queue_size"] = q;
                for (std::size_t ri = 0; ri < runs.size(); ++ri) {
                    const auto& t = runs[ri];
                    jb["runs"].push_back({{"ok", t.ok}, {"error", t.error}, {"mpps", t.mpps},
                                          {"vhost_side_mpps", t.vhost_side_mpps},
                                          {"virtio_side_mpps", t.virtio_side_mpps},
                                          {"placement", placement_json(baseline_placement[q][ri])}});
                }
                j["testpmd"].push_back(jb);
            }
            std::ofstream(o->json) << j.dump(2) << "\n";
        }
        if (!o->plot.empty()) {
            // Rows: frame queue, then median min max per weight in --weights
            // order; one gnuplot index block per frame size.
            std::ostringstream data, script;
            for (uint32_t f : o->frames) {
                for (uint16_t q : o->queues) {
                    data << f << ' ' << q;
                    for (const auto& wname : o->weights) {
                        for (const Cell& c : cells) {
                            if (c.transport != transports.front() || c.frame != f || c.queue != q ||
                                c.w.name != parse_weight(wname, q, o->byte_weight).name) {
                                continue;
                            }
                            std::vector<double> m;
                            for (const auto& r : c.runs) m.push_back(r.mpps);
                            const Stat st = stat_of(m);
                            data << ' ' << st.median << ' ' << st.min << ' ' << st.max;
                        }
                    }
                    data << '\n';
                }
                data << "\n\n";
            }
            script << "set multiplot layout 1," << o->frames.size() << " title 'pvnet PVP, "
                   << o->mode << " mode: Mpps (median, min-max) by queue size'\n"
                   << "set logscale x 2\nset xlabel 'queue size'\nset ylabel 'Mpps'\n"
                   << "set key top left\nset yrange [0:*]\n";
            for (std::size_t fi = 0; fi < o->frames.size(); ++fi) {
                script << "set title '" << o->frames[fi] << "-byte frames'\nplot ";
                for (std::size_t wi = 0; wi < o->weights.size(); ++wi) {
                    const std::size_t col = 3 + 3 * wi;
                    script << (wi ? ", " : "") << "$DATA index " << fi << " using 2:" << col << ':'
                           << col + 1 << ':' << col + 2 << " with yerrorlines title '"
                           << parse_weight(o->weights[wi], 256, o->byte_weight).name << "'";
                }
                script << '\n';
            }
            script << "unset multiplot\n";
            gnuplot_png(o->plot, script.str(), data.str());
        }
        if (!all_ok) throw std::runtime_error("some runs lost frames or broke a queue (see ERROR lines)");
    });
}

}  // namespace pvnet::app
