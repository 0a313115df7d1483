// `pvnet bench relay`: issue 5's experiment (seed 002). Kernel TCP and
// ping-pong between two namespaces through: a veth pair (the kernel's
// ceiling), the plain tun relay (what a user writes without rings) and the
// pvnet relay variants. Each round runs every column once (interleaved),
// each on freshly made namespaces and taps; medians with min–max of rounds.
// ping runs both ways, A→B and B→A, at the seed's interval (-i 0.1); the
// default columns are ordered so that neighbours differ by one mechanism.
// A placement probe precedes each run; the 1-flow ratios against plain and
// veth are taken within a round, overall and per placement class.
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
#include "bench_meta.h"
#include "cli_checks.h"
#include "pvnet/bench/relay_bench.h"
#include "pvnet/lab/child.h"
#include "pvnet/lab/netns_bed.h"

namespace pvnet::app {
namespace {

template <typename T>
struct Cell {
    std::optional<T> v;
    std::string error;
};

/// One column's results in one round.
struct Round {
    std::string setup_error;
    std::vector<Cell<bench::IperfResult>> iperf;  ///< one per --flows entry
    Cell<lab::SockperfReport> udp, tcp;
    Cell<lab::PingReport> ping_ab, ping_ba;  ///< A pings B; B pings A
    std::vector<std::string> relay_argv;     ///< the relay's command line as run
    std::string relay_output;                ///< the relay's final counters line
    bench::PlacementProbe placement;         ///< probed before the column's run
};

/// The seed's ping interval (002: "ping -i 0.1").
constexpr double kPingIntervalS = 0.1;

struct Opts {
    std::vector<uint16_t> flows{1, 10, 100};
    // Neighbours differ by one mechanism (after veth and plain).
    std::vector<std::string> variants{"napi+coalesce", "napi", "napi+at-rx", "napi+at-rx+direct",
                                      "napi+direct"};
    int repeat = 3;
    double seconds = 5;
    double latency_seconds = 5;
    uint32_t ping_count = 100;  ///< per direction: 10 s at -i 0.1
    bool skip_veth = false, skip_plain = false, skip_latency = false;
    std::string json, plot;
};

template <typename T>
Cell<T> cell_of(Result<T, std::string> r) {
    if (r) return {std::move(r.value()), {}};
    return {std::nullopt, r.error()};
}

void on_stop_signal(int) { lab::request_abort(); }

Round run_column(const bench::RelayVariant& v, const Opts& o, const std::string& exe,
                 const std::string& tag) {
    Round r;
    auto bed = bench::RelayBed::create(v, exe, tag);
    if (!bed) {
        r.setup_error = bed.error();
        return r;
    }
    for (uint16_t f : o.flows) r.iperf.push_back(cell_of(bench::run_iperf3(**bed, f, o.seconds)));
    if (!o.skip_latency) {
        r.udp = cell_of(bench::run_sockperf(**bed, false, o.latency_seconds));
        r.tcp = cell_of(bench::run_sockperf(**bed, true, o.latency_seconds));
        r.ping_ab = cell_of(bench::run_ping(**bed, bench::PingFrom::A, o.ping_count, kPingIntervalS));
        r.ping_ba = cell_of(bench::run_ping(**bed, bench::PingFrom::B, o.ping_count, kPingIntervalS));
    }
    r.relay_argv = (*bed)->relay_argv();
    r.relay_output = (*bed)->stop_relay();
    return r;
}

/// A column's value over rounds: only rounds that measured it count.
using Getter = std::function<std::optional<double>(const Round&)>;

std::optional<Stat> stat_over(const std::vector<Round>& rounds, const Getter& get) {
    std::vector<double> v;
    for (const Round& r : rounds) {
        if (auto x = get(r)) v.push_back(*x);
    }
    if (v.empty()) return std::nullopt;
    return stat_of(v);
}

std::string fmt_cell(const std::optional<Stat>& s, int prec) {
    if (!s) return "-";
    char b[96];
    std::snprintf(b, sizeof b, "%.*f (%.*f-%.*f)", prec, s->median, prec, s->min, prec, s->max);
    return b;
}

nlohmann::json to_json(const Cell<lab::PingReport>& c) {
    if (!c.v) return {{"error", c.error}};
    const auto& p = *c.v;
    nlohmann::json j{{"transmitted", p.transmitted}, {"received", p.received},
                     {"loss_pct", p.loss_pct}};
    for (auto [k, v] : {std::pair{"min_ms", p.min_ms}, std::pair{"avg_ms", p.avg_ms},
                        std::pair{"max_ms", p.max_ms}, std::pair{"mdev_ms", p.mdev_ms}}) {
        j[k] = p.has_rtt ? nlohmann::json(v) : nlohmann::json(nullptr);  // nothing came back
    }
    return j;
}

nlohmann::json to_json(const Round& r) {
    nlohmann::json j;
    j["relay_argv"] = r.relay_argv;
    j["relay_output"] = r.relay_output;
    j["placement"] = placement_json(r.placement);
    if (!r.setup_error.empty()) {
        j["setup_error"] = r.setup_error;
        return j;
    }
    for (const auto& c : r.iperf) {
        if (!c.v) {
            j["iperf3"].push_back({{"error", c.error}});
            continue;
        }
        const auto& x = *c.v;
        j["iperf3"].push_back({{"flows", x.flows}, {"gbps", x.gbps}, {"sent_bytes", x.sent_bytes},
                               {"received_bytes", x.received_bytes}, {"retransmits", x.retransmits},
                               {"bytes_per_pkt", x.bytes_per_pkt}, {"cpu_ns", x.cpu_ns},
                               {"cycles_per_byte", x.cycles_per_byte}});
    }
    for (auto [name, c] : {std::pair{"sockperf_udp", &r.udp}, std::pair{"sockperf_tcp", &r.tcp}}) {
        j[name] = c->v ? nlohmann::json{{"p50_us", c->v->p50_us}, {"p99_us", c->v->p99_us},
                                        {"p999_us", c->v->p999_us}, {"avg_us", c->v->avg_us},
                                        {"observations", c->v->observations}}
                       : nlohmann::json{{"error", c->error}};
    }
    j["ping"] = {{"a_to_b", to_json(r.ping_ab)}, {"b_to_a", to_json(r.ping_ba)}};
    return j;
}

void plot(const Opts& o, const std::vector<bench::RelayVariant>& cols,
          const std::function<std::optional<Stat>(std::size_t, const Getter&)>& med) {
    const auto gbps = [](std::size_t fi) -> Getter {
        return [fi](const Round& r) -> std::optional<double> {
            if (fi < r.iperf.size() && r.iperf[fi].v) return r.iperf[fi].v->gbps;
            return std::nullopt;
        };
    };
    // Columns that measured nothing (a failed variant) are left out: gnuplot
    // refuses a histogram series without a valid point.
    std::vector<std::size_t> shown;
    for (std::size_t ci = 0; ci < cols.size(); ++ci) {
        for (std::size_t fi = 0; fi < o.flows.size(); ++fi) {
            if (med(ci, gbps(fi))) {
                shown.push_back(ci);
                break;
            }
        }
    }
    if (shown.empty()) throw std::runtime_error("nothing to plot: every run failed");
    std::string tput = "x";
    for (std::size_t ci : shown) tput += " \"" + cols[ci].name + "\"";
    tput += "\n";
    for (std::size_t fi = 0; fi < o.flows.size(); ++fi) {
        tput += "\"" + std::to_string(o.flows[fi]) + (o.flows[fi] == 1 ? " flow\"" : " flows\"");
        for (std::size_t ci : shown) {
            const auto s = med(ci, gbps(fi));
            tput += ' ';
            tput += s ? std::to_string(s->median) : "NaN";
        }
        tput += "\n";
    }
    const std::string n = std::to_string(shown.size() + 1);
    gnuplot_png(o.plot + "-throughput.png",
                "set title 'TCP through the relay (iperf3, medians of " + std::to_string(o.repeat) +
                    ")'\nset style data histograms\nset style histogram clustered gap 1\n"
                    "set style fill solid 0.8 border -1\nset ylabel 'Gbit/s'\nset yrange [0:*]\n"
                    "set key top right\nplot for [i=2:" + n + "] $DATA using i:xtic(1) title columnheader(i)\n",
                tput);
    if (o.skip_latency) return;
    const std::vector<Getter> lat_cols = {
        [](const Round& r) -> std::optional<double> {
            return r.udp.v ? std::optional(r.udp.v->p50_us) : std::nullopt;
        },
        [](const Round& r) -> std::optional<double> {
            return r.tcp.v ? std::optional(r.tcp.v->p50_us) : std::nullopt;
        },
        [](const Round& r) -> std::optional<double> {
            return r.ping_ab.v && r.ping_ab.v->has_rtt ? std::optional(r.ping_ab.v->avg_ms * 1000)
                                                       : std::nullopt;
        },
        [](const Round& r) -> std::optional<double> {
            return r.ping_ba.v && r.ping_ba.v->has_rtt ? std::optional(r.ping_ba.v->avg_ms * 1000)
                                                       : std::nullopt;
        }};
    std::string lat =
        "x \"sockperf UDP p50\" \"sockperf TCP p50\" \"ping A>B avg\" \"ping B>A avg\"\n";
    for (std::size_t ci : shown) {
        lat += "\"" + cols[ci].name + "\"";
        for (const Getter& g : lat_cols) {
            const auto s = med(ci, g);
            lat += ' ';
            lat += s ? std::to_string(s->median) : "NaN";
        }
        lat += "\n";
    }
    gnuplot_png(o.plot + "-latency.png",
                "set title 'Round trip of 64-byte messages (sockperf ping-pong) and ping -i 0.1, "
                "medians'\nset style data histograms\nset style histogram clustered gap 1\n"
                "set style fill solid 0.8 border -1\nset ylabel 'us'\nset yrange [0:*]\n"
                "set key top left\nplot for [i=2:5] $DATA using i:xtic(1) title columnheader(i)\n",
                lat);
}

}  // namespace

void add_bench_relay(CLI::App& bench) {
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = bench.add_subcommand(
        "relay", "veth vs the plain tun relay vs pvnet relay variants: iperf3, sockperf, ping "
                 "between two namespaces (root)");
    cmd->add_option("--flows", o->flows, "iperf3 parallel streams, one run each")
        ->delimiter(',')
        ->check(checks::Int(uint16_t{1}, uint16_t{128}));  // iperf3 -P's limit
    cmd->add_option("--variants", o->variants,
                    "relay columns after veth and plain: plain-nooff, or "
                    "napi[+at-rx][+direct[+spin]][+coalesce][+vu] (+vu: the backend in a pvnet serve process)")
        ->delimiter(',')
        ->check(checks::RelayVariant());
    cmd->add_option("--repeat", o->repeat, "rounds")->check(checks::Int(1, 100));
    cmd->add_option("--seconds", o->seconds, "seconds per iperf3 run")
        ->check(checks::Real(1.0, 600.0));
    cmd->add_option("--latency-seconds", o->latency_seconds, "seconds per sockperf run")
        ->check(checks::Real(1.0, 600.0));
    cmd->add_option("--ping-count", o->ping_count, "pings per direction, 0.1 s apart")
        ->check(checks::Int(1u, 100000u));
    cmd->add_flag("--skip-veth", o->skip_veth, "no veth column");
    cmd->add_flag("--skip-plain", o->skip_plain, "no plain tun relay column");
    cmd->add_flag("--skip-latency", o->skip_latency, "iperf3 only (no sockperf, no ping)");
    cmd->add_option("--json", o->json, "write every run to this file")->check(checks::OutputPath());
    cmd->add_option("--plot", o->plot, "write PREFIX-throughput.png and PREFIX-latency.png")
        ->check(checks::OutputPath())
        ->check(checks::NeedsTool("gnuplot", "apt-get install gnuplot-nox"));

    cmd->callback([o] {
        if (::geteuid() != 0) {
            throw std::runtime_error("pvnet bench relay needs root (namespaces, taps, veth)");
        }
        std::vector<std::string> tools = {"ip", "iperf3"};
        if (!o->skip_latency) tools.insert(tools.end(), {"sockperf", "ping"});
        for (const auto& t : tools) {
            if (!checks::tool_in_path(t)) {
                throw std::runtime_error(t + " not found (make bench-deps installs it)");
            }
        }
        std::vector<bench::RelayVariant> cols;
        std::vector<std::string> names;
        if (!o->skip_veth) names.push_back("veth");
        if (!o->skip_plain) names.push_back("plain");
        names.insert(names.end(), o->variants.begin(), o->variants.end());
        for (const auto& n : names) {
            auto v = bench::relay_variant(n);
            if (!v) throw std::runtime_error(v.error());
            for (const auto& c : cols) {
                if (c.name == v->name) throw std::runtime_error("variant '" + n + "' given twice");
            }
            cols.push_back(std::move(*v));
        }
        if (cols.empty()) throw std::runtime_error("no columns to measure");

        boost_autogroup();
        // A stop request ends the current tool early; the testbed then tears down.
        struct sigaction sa {};
        sa.sa_handler = on_stop_signal;
        sigaction(SIGINT, &sa, nullptr);
        sigaction(SIGTERM, &sa, nullptr);

        const std::string exe = self_exe();
        lab::remove_stale_netns(bench::kRelayNetnsPrefix);
        std::vector<std::vector<Round>> runs(cols.size());
        const std::size_t total = cols.size() * static_cast<std::size_t>(o->repeat);
        std::size_t done = 0;
        bool all_ok = true;
        for (int r = 0; r < o->repeat && !lab::abort_requested(); ++r) {
            for (std::size_t ci = 0; ci < cols.size() && !lab::abort_requested(); ++ci) {
                const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(done);
                // The relay's threads are not pinned: probe the machine's first two CPUs.
                const bench::PlacementProbe p = probe_before_run(-1, -1);
                Round round = run_column(cols[ci], *o, exe, tag);
                round.placement = p;
                ++done;
                std::string err = round.setup_error;
                for (const auto& c : round.iperf) {
                    if (err.empty() && !c.v) err = c.error;
                }
                for (const std::string* e : {&round.udp.error, &round.tcp.error,
                                             &round.ping_ab.error, &round.ping_ba.error}) {
                    if (err.empty()) err = *e;
                }
                if (!err.empty()) all_ok = false;
                std::fprintf(stderr, "[%zu/%zu] %-14s %-4s %4.0f ns %s\n", done, total,
                             cols[ci].name.c_str(), bench::to_string(p.placement), p.round_trip_ns,
                             err.empty() ? "ok" : ("ERROR: " + err).c_str());
                runs[ci].push_back(std::move(round));
            }
        }
        if (lab::abort_requested()) throw std::runtime_error("interrupted; namespaces removed");

        const auto med = [&](std::size_t ci, const Getter& g) { return stat_over(runs[ci], g); };
        std::printf("\nRelay between two namespaces, medians of %d (min-max)\n%-22s", o->repeat, "");
        for (const auto& c : cols) std::printf(" %-24s", c.name.c_str());
        std::printf("\n");
        const auto row = [&](const std::string& name, const Getter& g, int prec, bool na_veth) {
            std::printf("%-22s", name.c_str());
            for (std::size_t ci = 0; ci < cols.size(); ++ci) {
                std::printf(" %-24s", na_veth && cols[ci].veth ? "n/a" : fmt_cell(med(ci, g), prec).c_str());
            }
            std::printf("\n");
        };
        for (std::size_t fi = 0; fi < o->flows.size(); ++fi) {
            const auto iperf = [fi](auto field) -> Getter {
                return [fi, field](const Round& r) -> std::optional<double> {
                    if (fi < r.iperf.size() && r.iperf[fi].v) return field(*r.iperf[fi].v);
                    return std::nullopt;
                };
            };
            using I = bench::IperfResult;
            const std::string f = std::to_string(o->flows[fi]) + (o->flows[fi] == 1 ? " flow " : " flows ");
            row(f + "Gbit/s", iperf([](const I& x) { return x.gbps; }), 2, false);
            row(f + "bytes/pkt", iperf([](const I& x) { return x.bytes_per_pkt; }), 0, false);
            row(f + "cycles/byte", iperf([](const I& x) { return x.cycles_per_byte; }), 2, true);
            row(f + "retransmits", iperf([](const I& x) { return static_cast<double>(x.retransmits); }),
                0, false);
        }
        if (!o->skip_latency) {
            using S = lab::SockperfReport;
            for (const auto& proto_member : {std::pair{"UDP", &Round::udp}, std::pair{"TCP", &Round::tcp}}) {
                const char* proto = proto_member.first;
                const auto member = proto_member.second;  // clang 14 cannot capture a binding
                const auto sp = [member](double S::*field) -> Getter {
                    return [member, field](const Round& r) -> std::optional<double> {
                        const auto& c = r.*member;
                        return c.v ? std::optional((*c.v).*field) : std::nullopt;
                    };
                };
                row(std::string(proto) + " 64B p50 us", sp(&S::p50_us), 1, false);
                row(std::string(proto) + " 64B p99 us", sp(&S::p99_us), 1, false);
                row(std::string(proto) + " 64B p99.9 us", sp(&S::p999_us), 1, false);
            }
            using P = lab::PingReport;
            for (const auto& dir_member :
                 {std::pair{"A>B", &Round::ping_ab}, std::pair{"B>A", &Round::ping_ba}}) {
                const std::string dir = dir_member.first;
                const auto member = dir_member.second;
                // rtt figures only from runs where something came back; loss from every run.
                const auto pg = [member](double P::*field, bool needs_rtt) -> Getter {
                    return [member, field, needs_rtt](const Round& r) -> std::optional<double> {
                        const auto& c = r.*member;
                        if (!c.v || (needs_rtt && !c.v->has_rtt)) return std::nullopt;
                        return (*c.v).*field;
                    };
                };
                row("ping " + dir + " min ms", pg(&P::min_ms, true), 3, false);
                row("ping " + dir + " avg ms", pg(&P::avg_ms, true), 3, false);
                row("ping " + dir + " max ms", pg(&P::max_ms, true), 3, false);
                row("ping " + dir + " mdev ms", pg(&P::mdev_ms, true), 3, false);
                row("ping " + dir + " loss %", pg(&P::loss_pct, false), 1, false);
            }
        }
        std::printf("%-22s", "placement");
        for (std::size_t ci = 0; ci < cols.size(); ++ci) {
            std::vector<bench::PlacementProbe> ps;
            for (const Round& r : runs[ci]) ps.push_back(r.placement);
            std::printf(" %-24s", placement_counts(ps).c_str());
        }
        std::printf("\n");
        if (!o->skip_latency) {
            std::printf("ping A>B: namespace A (the relay's guest tap) pings B (its host tap); "
                        "B>A the other way; %u each, -i %.1f\n",
                        o->ping_count, kPingIntervalS);
        }
        // The goals are ratios of 1-flow throughput against plain and veth.
        const Getter first_gbps = [](const Round& r) -> std::optional<double> {
            if (!r.iperf.empty() && r.iperf[0].v) return r.iperf[0].v->gbps;
            return std::nullopt;
        };
        std::optional<Stat> veth_s, plain_s;
        for (std::size_t ci = 0; ci < cols.size(); ++ci) {
            if (cols[ci].name == "veth") veth_s = med(ci, first_gbps);
            if (cols[ci].name == "plain") plain_s = med(ci, first_gbps);
        }
        std::printf("\n%u-flow Gbit/s ratios (medians):", o->flows.front());
        for (std::size_t ci = 0; ci < cols.size(); ++ci) {
            const auto s = med(ci, first_gbps);
            if (!s || cols[ci].veth) continue;
            std::printf("  %s", cols[ci].name.c_str());
            if (plain_s && plain_s->median > 0 && cols[ci].name != "plain") {
                std::printf(" %.2fx plain", s->median / plain_s->median);
            }
            if (veth_s && veth_s->median > 0) std::printf(" %.0f%% of veth", 100 * s->median / veth_s->median);
        }
        std::printf("\n");
        // The same against the plain and veth runs of each round.
        const auto same_round = [&](std::size_t ci, const std::string& ref) {
            RoundRatios ratio;
            for (std::size_t ri = 0; ri < cols.size(); ++ri) {
                if (cols[ri].name != ref) continue;
                for (std::size_t r = 0; r < runs[ci].size() && r < runs[ri].size(); ++r) {
                    const auto a = first_gbps(runs[ci][r]);
                    const auto b = first_gbps(runs[ri][r]);
                    if (a && b && *b > 0) {
                        ratio.add(*a / *b, runs[ci][r].placement.placement,
                                  runs[ri][r].placement.placement);
                    }
                }
            }
            return ratio;
        };
        std::printf("%u-flow Gbit/s, same-round ratios: median (min-max), then per placement class of "
                    "both runs (mixed: they differ)\n",
                    o->flows.front());
        for (std::size_t ci = 0; ci < cols.size(); ++ci) {
            if (cols[ci].veth) continue;
            for (const char* ref : {"plain", "veth"}) {
                if (cols[ci].name == ref) continue;
                const RoundRatios ratio = same_round(ci, ref);
                if (ratio.all().empty()) continue;
                std::printf("  %-22s / %-5s %s  %s\n", cols[ci].name.c_str(), ref,
                            ratio.text("%.3f (%.3f-%.3f)").c_str(), ratio.by_class_text().c_str());
            }
        }
        for (std::size_t ci = 0; ci < cols.size(); ++ci) {
            for (std::size_t ri = 0; ri < runs[ci].size(); ++ri) {
                if (!runs[ci][ri].setup_error.empty()) {
                    std::printf("%s round %zu: %s\n", cols[ci].name.c_str(), ri + 1,
                                runs[ci][ri].setup_error.c_str());
                }
            }
        }

        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = "relay";
            j["repeat"] = o->repeat;
            j["seconds"] = o->seconds;
            j["latency_seconds"] = o->latency_seconds;
            j["ping_count"] = o->ping_count;
            j["ping_interval_s"] = kPingIntervalS;
            j["flows"] = o->flows;
            j["cpu_source"] =
                "relay process, all threads: /proc/<pid>/task/*/schedstat run time x rdtsc rate, "
                "per byte iperf3 received";
            j["bytes_per_pkt_source"] = "host-side interface rx_bytes / rx_packets over the run";
            j["placement_source"] = placement_source();
            // Each column's "same_round_gbps_ratio": against plain and veth, at this many flows.
            j["same_round_gbps_ratio_flows"] = o->flows.front();
            for (std::size_t ci = 0; ci < cols.size(); ++ci) {
                nlohmann::json jc{{"variant", cols[ci].name}, {"veth", cols[ci].veth},
                                  {"relay_args", cols[ci].relay_args}};
                for (const Round& r : runs[ci]) jc["rounds"].push_back(to_json(r));
                for (const char* ref : {"plain", "veth"}) {
                    const RoundRatios ratio = same_round(ci, ref);
                    if (!cols[ci].veth && cols[ci].name != ref && !ratio.all().empty())
                        jc["same_round_gbps_ratio"][ref] = ratio.json();
                }
                j["columns"].push_back(jc);
            }
            std::ofstream f(o->json);
            f << j.dump(2) << "\n";
            if (!f) throw std::runtime_error("cannot write " + o->json);
        }
        if (!o->plot.empty()) plot(*o, cols, med);
        if (!all_ok) throw std::runtime_error("some runs failed (see ERROR lines)");
    });
}

}  // namespace pvnet::app
