// The placement probe: a cache-line ping-pong between two pinned threads.
#include "pvnet/bench/placement.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <thread>
#include <vector>

#include "pvnet/util/cpu.h"
#include "pvnet/util/thread.h"

namespace pvnet::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGiveUp = std::chrono::seconds(1);

// The ping-pong line alone in its cache line, so the probe measures one
// line's transfers and nothing else shares (or false-shares) it. The value
// is the only message: relaxed order is enough, no other data rides on it.
struct alignas(64) Line {
    std::atomic<uint32_t> v{0};
};

struct Shared {
    Line line;
    alignas(64) std::atomic<bool> stop{false};
    std::atomic<int> answerer{0};  ///< 0: starting, 1: pinned and answering, -1: not pinned
};

bool pinned_to(int cpu) {
    pin_current_thread(cpu);
    return sched_getcpu() == cpu;
}

// cpu_b's side: answers each odd value with the next even one. No pause in
// the spin: it would add its own latency to every round trip.
void answer(Shared& s, int cpu) {
    if (!pinned_to(cpu)) {
        s.answerer.store(-1, std::memory_order_relaxed);
        return;
    }
    s.answerer.store(1, std::memory_order_relaxed);
    for (uint32_t expect = 1; !s.stop.load(std::memory_order_relaxed);) {
        if (s.line.v.load(std::memory_order_relaxed) == expect) {
            s.line.v.store(expect + 1, std::memory_order_relaxed);
            expect += 2;
        }
    }
}

// cpu_a's side: sends, waits for the answer, times each batch.
void ask(Shared& s, int cpu, PlacementProbe& out) {
    if (!pinned_to(cpu)) {
        out.error = "cannot pin a thread to CPU " + std::to_string(cpu);
        return;
    }
    const auto deadline = Clock::now() + kGiveUp;
    for (int st; (st = s.answerer.load(std::memory_order_relaxed)) != 1;) {
        if (st < 0) {
            out.error = "cannot pin a thread to CPU " + std::to_string(out.cpu_b);
            return;
        }
        if (Clock::now() > deadline) {
            out.error = "the thread on CPU " + std::to_string(out.cpu_b) + " never started";
            return;
        }
        cpu_relax();
    }
    uint32_t next = 1;
    const auto round_trip = [&] {
        s.line.v.store(next, std::memory_order_relaxed);
        for (uint32_t spins = 0; s.line.v.load(std::memory_order_relaxed) != next + 1;) {
            if ((++spins & 0xffff) == 0 && Clock::now() > deadline) return false;
        }
        next += 2;
        return true;
    };
    // One untimed batch: both threads spinning, the line in play.
    for (uint32_t i = 0; i < kProbeBatchRoundTrips; ++i) {
        if (!round_trip()) {
            out.error = "no answer from CPU " + std::to_string(out.cpu_b) + " within 1 s";
            return;
        }
    }
    std::vector<double> per_trip;
    per_trip.reserve(kProbeBatches);
    for (uint32_t b = 0; b < kProbeBatches; ++b) {
        const auto t0 = Clock::now();
        for (uint32_t i = 0; i < kProbeBatchRoundTrips; ++i) {
            if (!round_trip()) {
                out.error = "no answer from CPU " + std::to_string(out.cpu_b) + " within 1 s";
                return;
            }
        }
        const std::chrono::duration<double, std::nano> dt = Clock::now() - t0;
        per_trip.push_back(dt.count() / kProbeBatchRoundTrips);
    }
    std::nth_element(per_trip.begin(), per_trip.begin() + kProbeBatches / 2, per_trip.end());
    out.round_trip_ns = per_trip[kProbeBatches / 2];
    out.placement = classify_round_trip(out.round_trip_ns);
    out.ok = out.placement != Placement::Unknown;
    if (!out.ok) out.error = "round trip not measurable";
}

}  // namespace

const char* to_string(Placement p) noexcept {
    switch (p) {
        case Placement::Near: return "near";
        case Placement::Far: return "far";
        case Placement::Unknown: break;
    }
    return "unknown";
}

Placement classify_round_trip(double round_trip_ns) noexcept {
    if (!std::isfinite(round_trip_ns) || round_trip_ns <= 0) return Placement::Unknown;
    return round_trip_ns < kFarRoundTripNs ? Placement::Near : Placement::Far;
}

PlacementProbe probe_placement(int cpu_a, int cpu_b) noexcept {
    PlacementProbe out;
    out.cpu_a = cpu_a;
    out.cpu_b = cpu_b;
    if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) {
        out.error = "the probe needs two different CPUs";
        return out;
    }
    Shared s;
    try {
        std::thread b([&] { answer(s, cpu_b); });
        try {
            std::thread([&] { ask(s, cpu_a, out); }).join();
        } catch (const std::exception& e) {  // the asking thread could not start
            out.error = e.what();
        }
        s.stop.store(true, std::memory_order_relaxed);
        b.join();
    } catch (const std::exception& e) {  // the answering thread could not start
        out.error = e.what();
    }
    return out;
}

}  // namespace pvnet::bench
