// Shared pieces of the `pvnet bench` commands: statistics over repeated
// runs, same-round ratios by placement class, the weight vocabulary, and
// the boosted autogroup.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/bench/placement.h"

namespace pvnet::app {

struct Stat {
    double median = 0, min = 0, max = 0;
};

inline Stat stat_of(std::vector<double> v) {
    if (v.empty()) return {};
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return Stat{med, v.front(), v.back()};
}

/// Median of one field over runs.
template <typename Run, typename F>
double median_of(const std::vector<Run>& runs, F field) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(field(r));
    return stat_of(v).median;
}

/// Largest value of one field over runs (a true maximum, not a median of maxima).
template <typename Run, typename F>
double max_of(const std::vector<Run>& runs, F field) {
    double m = 0;
    for (const auto& r : runs) m = std::max(m, field(r));
    return m;
}

/// "median (min–max)" in format `f`, or "-" when there is no value.
inline std::string fmt(const std::vector<double>& v, const char* f = "%.3f (%.3f–%.3f)") {
    if (v.empty()) return "-";
    const Stat s = stat_of(v);
    char buf[96];
    std::snprintf(buf, sizeof buf, f, s.median, s.min, s.max);
    return buf;
}

/// The probe every bench runs before each run, between the run's two CPUs;
/// 0 and 1 when either is unpinned or both are one (on a 2-vCPU VM those
/// are the vCPUs the run's threads share anyway).
inline bench::PlacementProbe probe_before_run(int cpu_a, int cpu_b) {
    if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) {
        cpu_a = 0;
        cpu_b = 1;
    }
    return bench::probe_placement(cpu_a, cpu_b);
}

/// A run's "placement" in the JSON: {"class", "round_trip_ns" (null when the
/// probe failed), "cpus", "error" when it failed}.
inline nlohmann::json placement_json(const bench::PlacementProbe& p) {
    nlohmann::json j{{"class", bench::to_string(p.placement)},
                     {"round_trip_ns", p.ok ? nlohmann::json(p.round_trip_ns) : nlohmann::json(nullptr)},
                     {"cpus", {p.cpu_a, p.cpu_b}}};
    if (!p.ok) j["error"] = p.error;
    return j;
}

/// The JSON files' note on how "placement" was measured.
inline std::string placement_source() {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "before each run: cache-line ping-pong between the run's two CPUs, median of "
                  "%u batches of %u round trips (steady clock); far at >= %.0f ns",
                  bench::kProbeBatches, bench::kProbeBatchRoundTrips, bench::kFarRoundTripNs);
    return buf;
}

/// "near 3, far 2": how many of the runs had each placement.
inline std::string placement_counts(const std::vector<bench::PlacementProbe>& probes) {
    std::map<std::string, int> n;
    for (const auto& p : probes) ++n[bench::to_string(p.placement)];
    std::string s;
    for (const char* c : {"near", "far", "unknown"}) {
        if (!n[c]) continue;
        if (!s.empty()) s += ", ";
        s += c + std::string(" ") + std::to_string(n[c]);
    }
    return s.empty() ? "-" : s;
}

/// Same-round ratios, overall and by placement class: a ratio's class is
/// the one both of its runs measured, "mixed" when they differ, so a class's
/// median compares runs that met the same placement.
class RoundRatios {
public:
    void add(double ratio, bench::Placement a, bench::Placement b) {
        all_.push_back(ratio);
        by_class_[a == b ? bench::to_string(a) : "mixed"].push_back(ratio);
    }
    const std::vector<double>& all() const { return all_; }

    /// "median (min–max)" over all ratios.
    std::string text(const char* f = "%.3f (%.3f–%.3f)") const { return fmt(all_, f); }

    /// "near 1.012 ×3, far 0.905 ×2": each class's median and count.
    std::string by_class_text(const char* f = "%.3f") const {
        std::string s;
        for (const auto& [c, v] : by_class_) {
            char buf[64];
            std::snprintf(buf, sizeof buf, f, stat_of(v).median);
            if (!s.empty()) s += ", ";
            s += c + " " + buf + " ×" + std::to_string(v.size());
        }
        return s.empty() ? "-" : s;
    }

    /// {"median", "min", "max", "n", "by_placement": {class: {median, min, max, n}}}.
    nlohmann::json json() const {
        const auto one = [](const std::vector<double>& v) {
            const Stat s = stat_of(v);
            return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", v.size()}};
        };
        nlohmann::json j = one(all_);
        j["by_placement"] = nlohmann::json::object();
        for (const auto& [c, v] : by_class_) j["by_placement"][c] = one(v);
        return j;
    }

private:
    std::vector<double> all_;
    std::map<std::string, std::vector<double>> by_class_;
};

/// "baseline": the kernel before seed 001 (rx: byte weight only; tx: 2 ×
/// queue size packets). "none": no packet limit either way. N: both N.
struct WeightRow {
    std::string name;
    backend::Weight rx, tx;
};

inline WeightRow parse_weight(const std::string& w, uint16_t qsize, uint32_t byte_weight) {
    WeightRow r{w, {0, byte_weight}, {0, byte_weight}};
    if (w == "baseline") {
        r.tx.pkts = 2u * qsize;
    } else if (w != "none") {
        std::size_t used = 0;
        const unsigned long n = std::stoul(w, &used);
        if (used != w.size() || n == 0 || n > 1'000'000) {
            throw std::runtime_error("bad weight '" + w + "': baseline, none or 1..1000000");
        }
        r.rx.pkts = r.tx.pkts = static_cast<uint32_t>(n);
        r.name = "weight " + w;
    }
    return r;
}

/// Renders `script` (gnuplot commands; the data file is "$DATA") to a PNG
/// with gnuplot, writing `data` beside it as <png>.dat. Throws if gnuplot
/// is missing or fails.
inline void gnuplot_png(const std::string& png, const std::string& script,
                        const std::string& data) {
    const std::string dat = png + ".dat";
    if (std::FILE* f = std::fopen(dat.c_str(), "w")) {
        std::fputs(data.c_str(), f);
        std::fclose(f);
    } else {
        throw std::runtime_error("cannot write " + dat);
    }
    std::FILE* g = popen("gnuplot", "w");
    if (!g) throw std::runtime_error("gnuplot not found (apt-get install gnuplot-nox)");
    std::fprintf(g, "set terminal pngcairo size 1000,600 font ',10'\nset output '%s'\n", png.c_str());
    // "$DATA" in the script names the data file.
    std::size_t from = 0;
    for (std::size_t at; (at = script.find("$DATA", from)) != std::string::npos; from = at + 5) {
        std::fprintf(g, "%.*s'%s'", static_cast<int>(at - from), script.c_str() + from, dat.c_str());
    }
    std::fputs(script.c_str() + from, g);
    if (pclose(g) != 0) throw std::runtime_error("gnuplot failed for " + png);
}

/// This executable, for the benches that run pvnet's own commands as children.
inline std::string self_exe() {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
    return std::string(buf, static_cast<std::size_t>(n));
}

/// Own session → own autogroup, raised to -20: this kernel's autogroups
/// otherwise share the CPU evenly with whatever else runs.
inline void boost_autogroup() {
    setsid();
    if (std::FILE* f = std::fopen("/proc/self/autogroup", "w")) {
        std::fputs("-20", f);
        std::fclose(f);
    }
}

}  // namespace pvnet::app
