// `pvnet bench vhost-user`: DPDK's virtio-user driver (testpmd, io
// forwarding, `start tx_first 32`, one polling lcore) as the guest of a
// vhost-user backend on the other CPU: testpmd's net_vhost in macswap mode
// (the DPDK reference), and `pvnet serve --macswap` in poll and event mode.
// Every cell (frame size × queue size × the client's in_order setting) runs
// each backend once per round, so the backends interleave (A B A B) and a
// placement change of the two vCPUs hits them alike; ratios are taken within
// a round. in_order=1 is DPDK's default and takes the client's in-order
// paths where the backend offers VIRTIO_F_IN_ORDER (both do); in_order=0
// takes its general ones. Each run records what the client negotiated.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
#include "bench_meta.h"
#include "cli_checks.h"
#include "pvnet/bench/testpmd.h"

namespace pvnet::app {
namespace {

constexpr const char* kDpdk = "dpdk";

// The pvnet backends are "pvnet-<mode>".
std::vector<std::string> backend_command(const std::string& backend, const std::string& pvnet,
                                         int cpu) {
    if (backend == kDpdk) return {};
    return {pvnet, "serve", "--vhost-user", "{sock}", "--macswap",
            "--mode", backend.substr(backend.find('-') + 1), "--backend-cpu", std::to_string(cpu)};
}

std::string this_executable() {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
    return std::string(buf, static_cast<std::size_t>(n));
}

double ns_per_pkt(const bench::VirtioUserPeerResult& r) {
    return r.window_rx_pkts ? r.backend_cpu_s * 1e9 / static_cast<double>(r.window_rx_pkts) : 0;
}

std::string hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

// "0x910018000 (inorder / inorder)" for what the runs negotiated, each
// distinct value once ("|" between); "-" when no run logged it.
std::string negotiated(const std::vector<bench::VirtioUserPeerResult>& runs) {
    std::vector<std::string> seen;
    for (const auto& r : runs) {
        if (r.features == 0) continue;
        std::string v = hex(r.features) + " (" + r.rx_path + " / " + r.tx_path + ")";
        if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(std::move(v));
    }
    if (seen.empty()) return "-";
    std::string out = seen[0];
    for (std::size_t i = 1; i < seen.size(); ++i) out += " | " + seen[i];
    return out;
}

}  // namespace

void add_bench_vhost_user(CLI::App& bench) {
    struct Opts {
        std::vector<uint32_t> frames{64, 512, 1518};
        std::vector<uint16_t> queues{256, 1024};
        std::vector<int> in_orders{1, 0};
        std::vector<std::string> backends{kDpdk, "pvnet-poll", "pvnet-event"};
        int repeat = 5;
        double seconds = 1.0;
        double warmup = 1.0;
        int backend_cpu = 0, client_cpu = 1;
        bool no_hugepages = false;
        std::string pvnet;
        std::string json;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = bench.add_subcommand(
        "vhost-user", "DPDK virtio-user (testpmd io fwd) against testpmd net_vhost and pvnet serve");
    cmd->add_option("--frame-bytes", o->frames, "frame sizes (testpmd set txpkts)")
        ->delimiter(',')
        ->check(checks::Int(60u, 1518u));
    cmd->add_option("--queue-sizes", o->queues, "virtio-user queue_size and --txd/--rxd")
        ->delimiter(',')
        ->check(checks::PowerOfTwo(64, 4096));
    cmd->add_option("--in-order", o->in_orders,
                    "the client's virtio_user in_order devarg: 1 (DPDK's default), 0, or both")
        ->delimiter(',')
        ->check(checks::Int(0, 1));
    cmd->add_option("--backends", o->backends,
                    "dpdk (testpmd net_vhost macswap), pvnet-poll, pvnet-event (pvnet serve)")
        ->delimiter(',')
        ->check(checks::OneOf({kDpdk, "pvnet-poll", "pvnet-event"}));
    cmd->add_option("--repeat", o->repeat, "rounds (each runs every cell and backend once)")
        ->check(checks::Int(1, 1000));
    cmd->add_option("--seconds", o->seconds, "measured seconds per run")
        ->check(checks::Real(0.1, 600.0));
    cmd->add_option("--warmup", o->warmup, "seconds after tx_first before measuring")
        ->check(checks::Real(0.0, 60.0));
    cmd->add_option("--backend-cpu", o->backend_cpu, "CPU of the backend")->check(checks::Cpu());
    cmd->add_option("--client-cpu", o->client_cpu, "CPU of the virtio-user testpmd")
        ->check(checks::Cpu());
    cmd->add_flag("--no-hugepages", o->no_hugepages,
                  "DPDK with --no-huge -m 256 (memfd) instead of 2 MiB hugepages");
    cmd->add_option("--pvnet", o->pvnet, "the pvnet binary run as `serve` (default: this one)");
    cmd->add_option("--json", o->json, "write all runs and medians to this file")
        ->check(checks::OutputPath());

    cmd->callback([o] {
        if (!bench::testpmd_available())
            throw CLI::ValidationError("vhost-user", "dpdk-testpmd not found (apt-get install dpdk)");
        if (o->backend_cpu < 0 || o->client_cpu < 0)
            throw CLI::ValidationError("--backend-cpu", "both CPUs must be given (>= 0)");
        const std::string pvnet = o->pvnet.empty() ? this_executable() : o->pvnet;
        boost_autogroup();
        struct Cell {
            uint32_t frame;
            uint16_t queue;
            bool in_order;
            std::map<std::string, std::vector<bench::VirtioUserPeerResult>> runs;  // by backend
            std::map<std::string, std::vector<bench::PlacementProbe>> placement{};  // before each run
        };
        std::vector<Cell> cells;
        for (uint32_t f : o->frames)
            for (uint16_t q : o->queues)
                for (int io : o->in_orders) cells.push_back({f, q, io != 0, {}});

        const std::size_t total = cells.size() * o->backends.size() * static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        bool all_ok = true;
        for (int r = 0; r < o->repeat; ++r) {
            for (Cell& c : cells) {
                for (const std::string& b : o->backends) {
                    bench::VirtioUserPeerConfig cfg;
                    cfg.backend_command = backend_command(b, pvnet, o->backend_cpu);
                    cfg.backend_cpu = o->backend_cpu;
                    cfg.client_cpu = o->client_cpu;
                    cfg.queue_size = c.queue;
                    cfg.frame_bytes = static_cast<uint16_t>(c.frame);
                    cfg.in_order = c.in_order;
                    cfg.seconds = o->seconds;
                    cfg.warmup_s = o->warmup;
                    cfg.hugepages = !o->no_hugepages;
                    const bench::PlacementProbe p = probe_before_run(o->backend_cpu, o->client_cpu);
                    bench::VirtioUserPeerResult res = bench::run_virtio_user_peer(cfg);
                    ++done;
                    std::fprintf(stderr, "\r[%zu/%zu] %4u B q%-5u in_order=%d %-12s %7.3f Mpps%s   ",
                                 done, total, c.frame, c.queue, c.in_order, b.c_str(), res.rx_mpps,
                                 res.ok ? "" : (" ERROR: " + res.error + "\n").c_str());
                    std::fprintf(stderr, "%s %.0f ns   ", bench::to_string(p.placement), p.round_trip_ns);
                    if (!res.ok) all_ok = false;
                    c.runs[b].push_back(std::move(res));
                    c.placement[b].push_back(p);
                }
            }
        }
        std::fprintf(stderr, "\n");

        const auto mpps_of = [](const std::vector<bench::VirtioUserPeerResult>& runs) {
            std::vector<double> m;
            for (const auto& r : runs)
                if (r.ok) m.push_back(r.rx_mpps);
            return m;
        };
        // pvnet / DPDK within each round where both ran.
        const auto ratios_of = [&](const Cell& c, const std::string& b) {
            RoundRatios v;
            const auto& d = c.runs.at(kDpdk);
            const auto& p = c.runs.at(b);
            for (std::size_t r = 0; r < p.size() && r < d.size(); ++r)
                if (p[r].ok && d[r].ok && d[r].rx_mpps > 0)
                    v.add(p[r].rx_mpps / d[r].rx_mpps, c.placement.at(b)[r].placement,
                          c.placement.at(kDpdk)[r].placement);
            return v;
        };
        // Every run of the cell, all backends.
        const auto cell_placement = [&](const Cell& c) {
            std::vector<bench::PlacementProbe> all;
            for (const auto& [b, ps] : c.placement) all.insert(all.end(), ps.begin(), ps.end());
            return placement_counts(all);
        };
        const bool have_dpdk =
            std::find(o->backends.begin(), o->backends.end(), kDpdk) != o->backends.end();

        std::printf("\nvhost-user: DPDK virtio-user (testpmd io fwd, tx_first 32, CPU %d) against "
                    "each backend (CPU %d), %s: client rx Mpps median (min–max) of %d\n",
                    o->client_cpu, o->backend_cpu, o->no_hugepages ? "no hugepages" : "2 MiB hugepages",
                    o->repeat);
        std::printf("%-6s %-6s %-8s", "frame", "queue", "in_order");
        for (const auto& b : o->backends) std::printf(" %24s", b.c_str());
        std::printf("  placement\n");
        for (const Cell& c : cells) {
            std::printf("%-6u %-6u %-8d", c.frame, c.queue, c.in_order);
            for (const auto& b : o->backends) std::printf(" %24s", fmt(mpps_of(c.runs.at(b))).c_str());
            std::printf("  %s\n", cell_placement(c).c_str());
        }
        if (have_dpdk && o->backends.size() > 1) {
            std::printf("\npvnet/DPDK: median (min–max) of same-round ratios\n%-6s %-6s %-8s", "frame",
                        "queue", "in_order");
            for (const auto& b : o->backends)
                if (b != kDpdk) std::printf(" %24s", b.c_str());
            std::printf("\n");
            for (const Cell& c : cells) {
                std::printf("%-6u %-6u %-8d", c.frame, c.queue, c.in_order);
                for (const auto& b : o->backends)
                    if (b != kDpdk) std::printf(" %24s", ratios_of(c, b).text().c_str());
                std::printf("\n");
            }
            std::printf("\npvnet/DPDK by placement class of both runs (mixed: they differ): "
                        "median ×rounds\n");
            for (const Cell& c : cells) {
                for (const auto& b : o->backends)
                    if (b != kDpdk)
                        std::printf("%-6u %-6u %-12s %s\n", c.frame, c.queue, b.c_str(),
                                    ratios_of(c, b).by_class_text().c_str());
            }
        }
        std::printf("\nbackend CPU ns per packet (process utime+stime / client rx in the window; "
                    "a poller spends its whole CPU): median (min–max)\n%-6s %-6s %-8s", "frame", "queue",
                    "in_order");
        for (const auto& b : o->backends) std::printf(" %24s", b.c_str());
        std::printf("\n");
        for (const Cell& c : cells) {
            std::printf("%-6u %-6u %-8d", c.frame, c.queue, c.in_order);
            for (const auto& b : o->backends) {
                std::vector<double> v;
                for (const auto& r : c.runs.at(b))
                    if (r.ok) v.push_back(ns_per_pkt(r));
                std::printf(" %24s", fmt(v, "%.1f (%.1f–%.1f)").c_str());
            }
            std::printf("\n");
        }
        // The same client, so the same features against each backend, or the
        // comparison is not of the backends alone.
        std::printf("\nnegotiated virtio features (the client's log; rx / tx path), "
                    "every run of the cell unless listed\n%-6s %-6s %-8s", "frame", "queue", "in_order");
        for (const auto& b : o->backends) std::printf(" %38s", b.c_str());
        std::printf("\n");
        for (const Cell& c : cells) {
            std::printf("%-6u %-6u %-8d", c.frame, c.queue, c.in_order);
            for (const auto& b : o->backends) std::printf(" %38s", negotiated(c.runs.at(b)).c_str());
            std::printf("\n");
        }

        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = "vhost-user";
            j["repeat"] = o->repeat;
            j["seconds"] = o->seconds;
            j["warmup"] = o->warmup;
            j["hugepages"] = !o->no_hugepages;
            j["backend_cpu"] = o->backend_cpu;
            j["client_cpu"] = o->client_cpu;
            j["backends"] = o->backends;
            j["client"] = "dpdk-testpmd net_virtio_user, io fwd, start tx_first 32";
            j["cpu_source"] = "backend process /proc/PID/stat utime+stime over the window";
            j["placement_source"] = placement_source();
            for (const Cell& c : cells) {
                nlohmann::json jc;
                jc["frame_bytes"] = c.frame;
                jc["queue_size"] = c.queue;
                jc["in_order"] = c.in_order ? 1 : 0;
                for (const auto& b : o->backends) {
                    nlohmann::json jb;
                    for (const auto& r : c.runs.at(b)) {
                        jb["runs"].push_back(
                            {{"ok", r.ok}, {"error", r.error}, {"rx_mpps", r.rx_mpps},
                             {"tx_mpps", r.tx_mpps}, {"window_rx_pkts", r.window_rx_pkts},
                             {"backend_cpu_s", r.backend_cpu_s}, {"backend_cpu_ns_per_pkt", ns_per_pkt(r)},
                             {"client_rx", r.client_rx}, {"client_tx", r.client_tx},
                             {"backend_rx", r.backend_rx}, {"backend_tx", r.backend_tx},
                             {"backend_final", r.backend_final},
                             {"offered_features", hex(r.offered_features)},
                             {"features", hex(r.features)}, {"rx_path", r.rx_path},
                             {"tx_path", r.tx_path}});
                        const std::size_t ri = jb["runs"].size() - 1;
                        jb["runs"][ri]["placement"] = placement_json(c.placement.at(b)[ri]);
                    }
                    const Stat s = stat_of(mpps_of(c.runs.at(b)));
                    jb["mpps"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
                    jb["negotiated"] = negotiated(c.runs.at(b));
                    if (have_dpdk && b != kDpdk) {
                        jb["ratio_to_dpdk"] = ratios_of(c, b).json();
                    }
                    jc["backends"][b] = jb;
                }
                j["cells"].push_back(jc);
            }
            std::ofstream(o->json) << j.dump(2) << "\n";
        }
        if (!all_ok) throw std::runtime_error("some runs failed (see ERROR lines)");
    });
}

}  // namespace pvnet::app
