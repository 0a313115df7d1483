// Order statistics of latency samples, shared by the benches' reports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pvnet::bench {

/// The sample at rank p (0..1) of `v`, nearest rank below; 0 when empty.
/// Reorders `v` (nth_element), so a caller asking for several ranks pays
/// O(n) each instead of a sort.
inline double percentile(std::vector<uint64_t>& v, double p) {
    if (v.empty()) return 0;
    const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return static_cast<double>(v[k]);
}

}  // namespace pvnet::bench
