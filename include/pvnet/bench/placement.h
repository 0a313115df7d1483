// Where the two vCPUs of a run sit relative to each other, measured rather
// than assumed: on the development VM they are either near or far (a
// cache-line round trip several times longer) and the host flips them
// within seconds, which halves a two-thread rate. The benches probe before every
// run and report ratios per placement class as well as overall (issue 24).
#pragma once

#include <cstdint>
#include <string>

namespace pvnet::bench {

/// A round trip at or above this counts as far. Far was reported at ~400 ns
/// (near ~70 ns by another measure); this probe measured near at 106–194 ns
/// (median 128, p99 194; 840 probes over 28 minutes with the machine loaded
/// by compiles, a few outliers above) and one bench-compare run saw 201 ns
/// near. 300 ns sits above near's jitter and below far.
constexpr double kFarRoundTripNs = 300;

/// Unknown: the probe could not run (a CPU missing or not allowed).
enum class Placement : uint8_t { Unknown, Near, Far };

const char* to_string(Placement p) noexcept;

/// Near below kFarRoundTripNs, Far at or above it; Unknown unless positive and finite.
Placement classify_round_trip(double round_trip_ns) noexcept;

struct PlacementProbe {
    bool ok = false;
    std::string error;
    int cpu_a = -1, cpu_b = -1;
    double round_trip_ns = 0;  ///< median of one round trip (steady clock, per batch)
    Placement placement = Placement::Unknown;
};

/// Round trips per probe: 32 timed batches of 64, so the probe takes
/// 0.15 ms near and under 1 ms far, plus two thread starts.
constexpr uint32_t kProbeBatches = 32;
constexpr uint32_t kProbeBatchRoundTrips = 64;

/// Two threads, pinned to `cpu_a` and `cpu_b`, pass one cache line back and
/// forth (one writes an odd value, the other answers with the next even
/// one). Each batch of round trips is timed with std::chrono::steady_clock
/// on cpu_a's thread; the result is the median batch time per round trip,
/// so a preemption in one batch does not move it. Never throws; bounded
/// (gives up after 1 s when the other thread does not answer).
PlacementProbe probe_placement(int cpu_a, int cpu_b) noexcept;

}  // namespace pvnet::bench
