// `pvnet bench grants`: issue 13's experiment (seed 004). 1..4 guests
// (`pvnet grant-front` processes) stream to one backend (`pvnet grant-back`)
// and then receive from it, in each mode: map (mmap/munmap per grant), copy
// (pread/pwrite, and process_vm_readv/writev), and persistent grants
// (pools mapped once, data copied: the packet's bytes, or the whole page as
// the seed's first version did). Per run: the seed's columns (sum, average,
// min and max of the guests' Mbit/s), CPU per byte (backend process plus
// frontends, CPU time) and the backend's map/unmap and copy system calls per
// packet. Variants interleave within each round; medians with min–max.
#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "app_commands.h"
#include "bench_common.h"
#include "bench_meta.h"
#include "pvnet/lab/child.h"
#include "pvnet/lab/tool_output.h"

namespace pvnet::app {
namespace {

using namespace std::chrono_literals;

struct Variant {
    std::string name;
    std::vector<std::string> back_args;
    std::vector<std::string> front_args;
};

const std::vector<Variant>& all_variants() {
    static const std::vector<Variant> v{
        {"map", {"--fallback", "map", "--persistent", "off"}, {"--persistent", "off"}},
        {"copy", {"--fallback", "copy", "--persistent", "off"}, {"--persistent", "off"}},
        {"copy-pvm",
         {"--fallback", "copy", "--persistent", "off", "--copy-via", "process-vm"},
         {"--persistent", "off"}},
        {"persistent", {"--persistent", "on"}, {"--persistent", "on"}},
        {"persistent-page", {"--persistent", "on"}, {"--persistent", "on", "--copy-whole-page"}},
    };
    return v;
}

struct Run {
    std::vector<double> mbit;  ///< per guest
    double sum = 0, avg = 0, min = 0, max = 0;
    double cpu_ns_per_kib = 0;      ///< backend process + frontends' CPU time per KiB moved
    double map_calls_per_pkt = 0;   ///< backend mmap + unmapping, per packet
    double copy_calls_per_pkt = 0;  ///< backend pread/pwrite/process_vm_*, per packet
    std::string error;
};

struct Opts {
    std::vector<unsigned> guests{1, 2, 3, 4};
    std::vector<std::string> variants{"map", "copy", "copy-pvm", "persistent", "persistent-page"};
    std::vector<std::string> directions{"tx", "rx"};
    int repeat = 3;
    double seconds = 2;
    std::string json, plot;
};

/// utime + stime of a whole process (every thread, live or gone), in ns.
uint64_t process_cpu_ns(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t close = s.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream in(s.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {
        if (i == 14) utime = std::stoull(field);
        if (i == 15) stime = std::stoull(field);
    }
    return (utime + stime) * (1'000'000'000ull / static_cast<uint64_t>(::sysconf(_SC_CLK_TCK)));
}

std::string line_with(const std::string& out, const std::string& prefix) {
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) {
        if (l.rfind(prefix, 0) == 0) return l;
    }
    return "";
}

double num(const std::string& line, const char* key) {
    const std::string k = std::string(" ") + key + "=";
    const std::size_t at = line.find(k);
    if (at == std::string::npos) throw std::runtime_error(std::string("no ") + key + " in: " + line);
    return std::stod(line.substr(at + k.size()));
}

Run run_once(const std::string& exe, const Variant& v, unsigned guests, const std::string& dir,
             double seconds, int tag) {
    Run r;
    const std::string base = "/tmp/pvnet-bench-grants-" + std::to_string(::getpid()) + "-" +
                             std::to_string(tag);
    std::vector<std::string> bargv{exe, "grant-back", "--socket", base + ".sock", "--store",
                                   base + ".store"};
    bargv.insert(bargv.end(), v.back_args.begin(), v.back_args.end());
    auto back = lab::Child::spawn(bargv);
    if (!back) return Run{{}, 0, 0, 0, 0, 0, 0, 0, back.error()};
    const auto cleanup = [&] { (void)std::system(("rm -rf " + base + ".store").c_str()); };
    if (!back->wait_for_line_if([](std::string_view l) { return l.rfind("listening ", 0) == 0; },
                                10s)) {
        cleanup();
        return Run{{}, 0, 0, 0, 0, 0, 0, 0, "grant-back did not start: " + back->output_tail()};
    }
    std::vector<lab::Child> fronts;
    for (unsigned g = 0; g < guests; ++g) {
        std::vector<std::string> fargv{exe, "grant-front", "--socket", base + ".sock", "--store",
                                       base + ".store", "--domid", std::to_string(g + 1),
                                       "--direction", dir, "--seconds", std::to_string(seconds)};
        fargv.insert(fargv.end(), v.front_args.begin(), v.front_args.end());
        auto f = lab::Child::spawn(fargv);
        if (!f) {
            cleanup();
            return Run{{}, 0, 0, 0, 0, 0, 0, 0, f.error()};
        }
        fronts.push_back(std::move(*f));
    }
    double front_cpu = 0, bytes = 0;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000) + 30000);
    for (unsigned g = 0; g < guests; ++g) {
        const lab::ExitStatus st = fronts[g].finish(timeout);
        const std::string ph = line_with(fronts[g].output(), "phase direction=" + dir);
        if (!st.ok() || ph.empty()) {
            r.error = "guest " + std::to_string(g + 1) + ": " + st.to_string() + ": " +
                      fronts[g].output_tail(300);
            continue;
        }
        r.mbit.push_back(num(ph, "mbit_s"));
        front_cpu += num(ph, "cpu_ns");
        bytes += num(ph, "bytes");
        if (num(ph, "sink_lost") + num(ph, "sink_bad") != 0) r.error = "frames lost: " + ph;
    }
    // Every guest has hung up: wait for their reports, then the CPU time.
    const auto reports = [&] {
        std::size_t n = 0;
        for (std::size_t at = 0; (at = back->output().find("\nguest domid=", at)) != std::string::npos; ++at) ++n;
        return n;
    };
    lab::Child* kids[] = {&*back};
    (void)lab::Child::pump(kids, std::chrono::steady_clock::now() + 10s,
                           [&] { return reports() >= guests; });
    const double back_cpu = static_cast<double>(process_cpu_ns(back->pid()));
    back->stop();
    cleanup();
    double map_calls = 0, copy_calls = 0, pkts = 0;
    std::istringstream in(back->output());
    for (std::string l; std::getline(in, l);) {
        if (l.rfind("guest domid=", 0) != 0) continue;
        map_calls += num(l, "map_syscalls") + num(l, "unmap_syscalls");
        copy_calls += num(l, "copy_syscalls");
        pkts += num(l, "tx_pkts") + num(l, "rx_pkts");
        if (num(l, "grant_errors") != 0 || num(l, "held_after") != 0) r.error = "backend: " + l;
    }
    if (r.mbit.size() != guests && r.error.empty()) r.error = "a guest produced no result";
    if (!r.mbit.empty()) {
        const Stat s = stat_of(r.mbit);
        for (const double m : r.mbit) r.sum += m;
        r.avg = r.sum / static_cast<double>(r.mbit.size());
        r.min = s.min;
        r.max = s.max;
    }
    r.cpu_ns_per_kib = bytes > 0 ? (back_cpu + front_cpu) / (bytes / 1024) : 0;
    r.map_calls_per_pkt = pkts > 0 ? map_calls / pkts : 0;
    r.copy_calls_per_pkt = pkts > 0 ? copy_calls / pkts : 0;
    return r;
}

}  // namespace

void add_bench_grants(CLI::App& bench) {
    auto o = std::make_shared<Opts>();
    CLI::App* c = bench.add_subcommand(
        "grants",
        "Seed 004: 1-4 guest processes stream to one grant backend and back, with grants mapped "
        "per packet, copied, or persistent");
    c->add_option("--guests", o->guests, "Guest counts")->delimiter(',')->capture_default_str();
    c->add_option("--variants", o->variants,
                  "map, copy, copy-pvm, persistent, persistent-page")
        ->delimiter(',')
        ->check(CLI::IsMember({"map", "copy", "copy-pvm", "persistent", "persistent-page"}))
        ->capture_default_str();
    c->add_option("--directions", o->directions, "tx (guests to the sink), rx (back)")
        ->delimiter(',')
        ->check(CLI::IsMember({"tx", "rx"}))
        ->capture_default_str();
    c->add_option("--repeat", o->repeat, "Rounds (variants interleaved in each)")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    c->add_option("--seconds", o->seconds, "Seconds per run")
        ->check(CLI::Range(0.2, 600.0))
        ->capture_default_str();
    c->add_option("--json", o->json, "Write every run and the medians here");
    c->add_option("--plot", o->plot, "Render sum Mbit/s by guests to this PNG (gnuplot)");
    c->callback([o] {
        boost_autogroup();
        const std::string exe = self_exe();
        std::vector<Variant> vs;
        for (const auto& n : o->variants) {
            for (const auto& v : all_variants()) {
                if (v.name == n) vs.push_back(v);
            }
        }
        // runs[dir][guests][variant] = one Run per round.
        std::vector<std::vector<std::vector<std::vector<Run>>>> runs(
            o->directions.size(),
            std::vector<std::vector<std::vector<Run>>>(o->guests.size(),
                                                       std::vector<std::vector<Run>>(vs.size())));
        int tag = 0;
        bool all_ok = true;
        for (int rep = 0; rep < o->repeat; ++rep) {
            for (std::size_t di = 0; di < o->directions.size(); ++di) {
                for (std::size_t gi = 0; gi < o->guests.size(); ++gi) {
                    for (std::size_t vi = 0; vi < vs.size(); ++vi) {
                        Run r = run_once(exe, vs[vi], o->guests[gi], o->directions[di], o->seconds,
                                         tag++);
                        if (!r.error.empty()) {
                            all_ok = false;
                            std::fprintf(stderr, "ERROR %s %u guests %s: %s\n",
                                         o->directions[di].c_str(), o->guests[gi],
                                         vs[vi].name.c_str(), r.error.c_str());
                        }
                        runs[di][gi][vi].push_back(std::move(r));
                    }
                }
            }
        }
        const auto field = [](const std::vector<Run>& rs, auto f) {
            std::vector<double> v;
            for (const Run& r : rs) v.push_back(f(r));
            return stat_of(v);
        };
        for (std::size_t di = 0; di < o->directions.size(); ++di) {
            std::printf("\ngrants, %s (%s), %d rounds of %.1f s, medians (sum: min-max)\n",
                        o->directions[di].c_str(),
                        o->directions[di] == "tx" ? "guests to the backend's sink"
                                                  : "backend's generator to the guests",
                        o->repeat, o->seconds);
            std::printf("  %-16s %6s %22s %9s %9s %9s %12s %10s %10s\n", "mode", "guests",
                        "sum Mbit/s", "avg", "min", "max", "CPU ns/KiB", "map/pkt", "copy/pkt");
            for (std::size_t vi = 0; vi < vs.size(); ++vi) {
                for (std::size_t gi = 0; gi < o->guests.size(); ++gi) {
                    const auto& rs = runs[di][gi][vi];
                    const Stat sum = field(rs, [](const Run& r) { return r.sum; });
                    char range[64];
                    std::snprintf(range, sizeof range, "%.0f (%.0f-%.0f)", sum.median, sum.min,
                                  sum.max);
                    std::printf("  %-16s %6u %22s %9.0f %9.0f %9.0f %12.1f %10.2f %10.2f\n",
                                vs[vi].name.c_str(), o->guests[gi], range,
                                field(rs, [](const Run& r) { return r.avg; }).median,
                                field(rs, [](const Run& r) { return r.min; }).median,
                                field(rs, [](const Run& r) { return r.max; }).median,
                                field(rs, [](const Run& r) { return r.cpu_ns_per_kib; }).median,
                                field(rs, [](const Run& r) { return r.map_calls_per_pkt; }).median,
                                field(rs, [](const Run& r) { return r.copy_calls_per_pkt; }).median);
                }
            }
        }
        if (!o->json.empty()) {
            nlohmann::json j;
            j["meta"] = bench_meta();
            j["experiment"] = "grants";
            j["repeat"] = o->repeat;
            j["seconds"] = o->seconds;
            j["frame_bytes"] = 1514;
            j["ring_size"] = 256;
            j["cpu_source"] =
                "backend process utime+stime (/proc/pid/stat, 10 ms ticks) plus each frontend's "
                "CLOCK_THREAD_CPUTIME_ID over its phase";
            for (std::size_t di = 0; di < o->directions.size(); ++di) {
                for (std::size_t gi = 0; gi < o->guests.size(); ++gi) {
                    for (std::size_t vi = 0; vi < vs.size(); ++vi) {
                        nlohmann::json jc;
                        jc["direction"] = o->directions[di];
                        jc["guests"] = o->guests[gi];
                        jc["variant"] = vs[vi].name;
                        for (const Run& r : runs[di][gi][vi]) {
                            jc["runs"].push_back({{"mbit", r.mbit},
                                                  {"sum", r.sum},
                                                  {"avg", r.avg},
                                                  {"min", r.min},
                                                  {"max", r.max},
                                                  {"cpu_ns_per_kib", r.cpu_ns_per_kib},
                                                  {"map_calls_per_pkt", r.map_calls_per_pkt},
                                                  {"copy_calls_per_pkt", r.copy_calls_per_pkt},
                                                  {"error", r.error}});
                        }
                        j["cells"].push_back(jc);
                    }
                }
            }
            std::ofstream(o->json) << j.dump(2) << "\n";
        }
        if (!o->plot.empty()) {
            std::string data;
            std::string script =
                "set title 'seed 004: sum of guests Mbit/s (median)'\nset xlabel 'guests'\n"
                "set ylabel 'Mbit/s'\nset logscale y\nset key outside\nplot ";
            int col = 2;
            for (std::size_t gi = 0; gi < o->guests.size(); ++gi) {
                data += std::to_string(o->guests[gi]);
                for (std::size_t di = 0; di < o->directions.size(); ++di) {
                    for (std::size_t vi = 0; vi < vs.size(); ++vi) {
                        data += " " + std::to_string(
                                          field(runs[di][gi][vi], [](const Run& r) { return r.sum; })
                                              .median);
                    }
                }
                data += "\n";
            }
            for (std::size_t di = 0; di < o->directions.size(); ++di) {
                for (std::size_t vi = 0; vi < vs.size(); ++vi) {
                    if (col > 2) script += ", ";
                    script += "$DATA using 1:" + std::to_string(col++) + " with linespoints title '" +
                              o->directions[di] + " " + vs[vi].name + "'";
                }
            }
            gnuplot_png(o->plot, script + "\n", data);
        }
        if (!all_ok) throw std::runtime_error("some runs failed (see ERROR lines)");
    });
}

}  // namespace pvnet::app
