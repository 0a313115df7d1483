// Shared pieces of the `pvnet bench` commands: statistics over repeated
// runs, the weight vocabulary, and the boosted autogroup.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "pvnet/backend/vhost_net.h"

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
