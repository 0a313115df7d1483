// pvnet-microbench: Google Benchmark microbenchmarks of the split ring.
//
// Single-threaded, per operation: one iteration runs a full cycle over the
// ring (128 two-descriptor chains: 64 readable + 64 writable bytes each, in a
// 256-entry ring) and times only the phase under test with steady_clock
// (manual time: two clock reads per 128 buffers, ~0.3 ns/buffer); the rest
// of the cycle (what the peer does) is untimed.
//   Add   add x burst, then kick_prepare() (publish + kick decision) per burst
//   Pop   pop x 128 (chain walk, validation, translation)
//   Push  add_used x burst, then flush_used() + should_signal() per burst
//   Reap  get_used x 128 (checks id/len; callbacks off as in a NAPI poll)
// Pop and Reap have no per-burst step: the consumer observes the producer's
// index once per refill of its shadow, whatever the producer's burst.
//
// Two threads: the driver runs in the benchmark thread, the device in a
// spawned thread, 64 bytes copied per buffer each way (driver writes the
// request, device copies it into the writable part, driver reads it back),
// so the figure is not a pure index benchmark. Device and driver either spin
// (busy polling, notifications off: kicks/interrupts are the decisions that
// would have been sent) or sleep on eventfds with the race-free re-arm
// (kicks/interrupts are eventfd writes).
//
// EventFdSignal: one doorbell's cost, write() against the kernel-made signal
// peer-held eventfds use (notify/event_fd.h).
//
// Timing claims live here, never in ctest (STYLE.md §11). Run in a boosted
// autogroup and with repetitions; see README.md "Microbenchmarks".
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/util/cpu.h"

namespace pvnet::ring {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kGuestBase = 0x10000;
constexpr uint16_t kRingSize = 256;
constexpr uint64_t kDataOff = 0x4000;
constexpr uint32_t kBufBytes = 64;
constexpr uint64_t kSlotBytes = 2u * kBufBytes;  // readable + writable part
constexpr uint32_t kCycle = kRingSize / 2;       // two-descriptor chains that fit
constexpr uint64_t kDataSlots = 2u * kCycle;
constexpr std::size_t kRegionBytes = kDataOff + kDataSlots * kSlotBytes;
static_assert(split_ring_bytes(kRingSize) <= kDataOff);

/// One shared region at guest address 0x10000 holding ring and data, and
/// both queues on it. Setup failure aborts the benchmark with an error.
struct BenchRing {
    std::unique_ptr<mem::MemoryRegion> region;
    mem::MemoryTable table;
    std::unique_ptr<SplitDriverQueue> driver;
    std::unique_ptr<SplitDeviceQueue> device;

    bool setup(bool event_idx) {
        auto r = mem::MemoryRegion::create(kRegionBytes, "pvnet-microbench");
        if (!r) return false;
        region = std::make_unique<mem::MemoryRegion>(std::move(*r));
        if (!table.add(mem::GuestAddr(kGuestBase), region->bytes())) return false;
        const SplitRingAddrs addrs = split_ring_addrs_at(mem::GuestAddr(kGuestBase), kRingSize);
        DriverQueueConfig dc;
        dc.addrs = addrs;
        dc.event_idx = event_idx;
        auto d = SplitDriverQueue::create(table, dc);
        if (!d) return false;
        driver = std::move(*d);
        DeviceQueueConfig vc;
        vc.addrs = addrs;
        vc.features = event_idx ? pvnet::virtio::feature_mask(pvnet::virtio::VIRTIO_RING_F_EVENT_IDX) : 0;
        auto v = SplitDeviceQueue::create(table, vc);
        if (!v) return false;
        device = std::move(*v);
        return true;
    }

    static uint64_t slot_off(uint64_t seq) { return kDataOff + (seq % kDataSlots) * kSlotBytes; }
    std::byte* host(uint64_t off) const { return region->host() + off; }

    AddStatus add(uint64_t seq) {
        const uint64_t off = slot_off(seq);
        const Buf out[1] = {{mem::GuestAddr(kGuestBase + off), kBufBytes}};
        const Buf in[1] = {{mem::GuestAddr(kGuestBase + off + kBufBytes), kBufBytes}};
        return driver->add(out, in, seq);
    }
};

// ---------------------------------------------------------------------------
// Single-threaded per-operation benchmarks.
// ---------------------------------------------------------------------------
enum class Phase { Add, Pop, Push, Reap };

void run_phase_bench(benchmark::State& state, Phase phase) {
    const bool event_idx = state.range(0) != 0;
    const auto burst = static_cast<uint32_t>(state.range(1));
    BenchRing r;
    if (!r.setup(event_idx)) {
        state.SkipWithError("ring setup failed");
        return;
    }
    SplitDriverQueue& drv = *r.driver;
    SplitDeviceQueue& dev = *r.device;
    auto chain = std::make_unique<DescChain>();
    std::array<uint16_t, kCycle> heads{};
    // Both sides poll: notifications off, as in a busy-polling datapath.
    drv.disable_cb();
    dev.disable_notify();

    uint64_t seq = 0;
    double timed_ns = 0;
    for (auto _ : state) {
        Clock::time_point t0, t1;
        // 1. Driver adds a cycle of chains.
        if (phase == Phase::Add) t0 = Clock::now();
        for (uint32_t k = 0; k < kCycle; k += burst) {
            for (uint32_t b = 0; b < burst; ++b) benchmark::DoNotOptimize(r.add(seq++));
            benchmark::DoNotOptimize(drv.kick_prepare());
        }
        if (phase == Phase::Add) t1 = Clock::now();
        // 2. Device pops them.
        if (phase == Phase::Pop) t0 = Clock::now();
        for (uint32_t k = 0; k < kCycle; ++k) {
            benchmark::DoNotOptimize(dev.pop(*chain));
            heads[k] = chain->head;
        }
        if (phase == Phase::Pop) t1 = Clock::now();
        // 3. Device returns them.
        if (phase == Phase::Push) t0 = Clock::now();
        for (uint32_t k = 0; k < kCycle; k += burst) {
            for (uint32_t b = 0; b < burst; ++b) {
                benchmark::DoNotOptimize(dev.add_used(heads[k + b], kBufBytes));
            }
            dev.flush_used();
            benchmark::DoNotOptimize(dev.should_signal());
        }
        if (phase == Phase::Push) t1 = Clock::now();
        // 4. Driver reaps them.
        if (phase == Phase::Reap) t0 = Clock::now();
        UsedBuf u;
        for (uint32_t k = 0; k < kCycle; ++k) {
            benchmark::DoNotOptimize(drv.get_used(u));
            benchmark::DoNotOptimize(u);
        }
        if (phase == Phase::Reap) t1 = Clock::now();

        const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
        timed_ns += ns;
        state.SetIterationTime(ns * 1e-9);
    }
    if (drv.broken() || dev.broken() || drv.in_flight() != 0) {
        state.SkipWithError("ring broke or lost buffers");
        return;
    }
    const auto items = static_cast<double>(state.iterations()) * kCycle;
    state.SetItemsProcessed(static_cast<int64_t>(items));
    state.counters["ns_per_buf"] = timed_ns / items;
}

void BM_SplitAdd(benchmark::State& state) { run_phase_bench(state, Phase::Add); }
void BM_SplitPop(benchmark::State& state) { run_phase_bench(state, Phase::Pop); }
void BM_SplitPush(benchmark::State& state) { run_phase_bench(state, Phase::Push); }
void BM_SplitReap(benchmark::State& state) { run_phase_bench(state, Phase::Reap); }

BENCHMARK(BM_SplitAdd)->ArgNames({"event_idx", "burst"})->ArgsProduct({{0, 1}, {1, 32}})
    ->UseManualTime();
BENCHMARK(BM_SplitPop)->ArgNames({"event_idx", "burst"})->ArgsProduct({{0, 1}, {32}})
    ->UseManualTime();
BENCHMARK(BM_SplitPush)->ArgNames({"event_idx", "burst"})->ArgsProduct({{0, 1}, {1, 32}})
    ->UseManualTime();
BENCHMARK(BM_SplitReap)->ArgNames({"event_idx", "burst"})->ArgsProduct({{0, 1}, {32}})
    ->UseManualTime();

// ---------------------------------------------------------------------------
// Two threads: driver here, device in a spawned thread.
// ---------------------------------------------------------------------------
constexpr uint32_t kBurst = 32;
constexpr int64_t kPollUs = 2'000'000;  // a longer sleep with work published is a lost wakeup

using notify::EventFd;

/// The device loop: pop a burst, copy each chain's 64 readable bytes into its
/// writable part, push, one flush and one signal decision per burst.
class DeviceWorker {
public:
    DeviceWorker(SplitDeviceQueue& q, bool use_eventfd, const EventFd& kick, const EventFd& call)
        : q_(q), use_eventfd_(use_eventfd), kick_(kick), call_(call),
          chain_(std::make_unique<DescChain>()) {}

    void run() {
        q_.disable_notify();
        while (!stop_.load(std::memory_order_relaxed)) {
            uint32_t n = 0;
            PopStatus st = PopStatus::Ok;
            while (n < kBurst && (st = q_.pop(*chain_)) == PopStatus::Ok) {
                serve();
                ++n;
            }
            q_.flush_used();
            if (n > 0 && q_.should_signal()) {
                ++interrupts_;
                if (use_eventfd_) call_.signal();
            }
            if (st == PopStatus::Broken) {
                failed_.store(true);
                return;
            }
            if (st != PopStatus::Empty) continue;
            if (!use_eventfd_) {
                cpu_relax();  // busy polling: notifications stay off
                continue;
            }
            if (q_.enable_notify()) {
                q_.disable_notify();
                continue;
            }
            if (!kick_.wait(kPollUs)) {
                if (stop_.load()) return;
                if (q_.pending() > 0) {  // published, armed, and no kick came
                    failed_.store(true);
                    return;
                }
            }
            kick_.consume();
            q_.disable_notify();
        }
    }

    void stop() {
        stop_.store(true);
        kick_.signal();
    }
    bool failed() const { return failed_.load(); }
    uint64_t interrupts() const { return interrupts_; }

private:
    void serve() {
        const DescChain& ch = *chain_;
        if (ch.out_num >= 1 && ch.in_num >= 1) {
            const iovec& src = ch.iov[0];
            const iovec& dst = ch.iov[ch.out_num];
            std::memcpy(dst.iov_base, src.iov_base, std::min(src.iov_len, dst.iov_len));
        }
        // The push cannot fail for a chain we just popped; keep the call honest.
        benchmark::DoNotOptimize(q_.add_used(ch.head, kBufBytes));
    }

    SplitDeviceQueue& q_;
    bool use_eventfd_;
    const EventFd& kick_;
    const EventFd& call_;
    std::unique_ptr<DescChain> chain_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> failed_{false};
    uint64_t interrupts_ = 0;  // read after join
};

void BM_SplitTwoThreadCopy64(benchmark::State& state) {
    const bool event_idx = state.range(0) != 0;
    const bool use_eventfd = state.range(1) != 0;
    BenchRing r;
    auto kick = EventFd::create();
    auto call = EventFd::create();
    if (!r.setup(event_idx) || !kick || !call) {
        state.SkipWithError("ring setup failed");
        return;
    }
    SplitDriverQueue& drv = *r.driver;
    DeviceWorker worker(*r.device, use_eventfd, *kick, *call);
    std::thread device_thread([&worker] { worker.run(); });

    drv.disable_cb();
    uint64_t added = 0, reaped = 0, kicks = 0, lost = 0;
    std::array<std::byte, kBufBytes> req{}, resp{};
    // One pass of the driver: add a burst (at most kCycle chains in flight),
    // one kick decision, reap everything used; when there was nothing to do,
    // spin or re-arm and sleep. False when the run must stop.
    auto pass = [&]() -> bool {
        uint32_t n = 0;
        while (n < kBurst && added - reaped < kCycle) {
            const uint64_t off = BenchRing::slot_off(added);
            std::memcpy(req.data(), &added, sizeof added);
            std::memcpy(r.host(off), req.data(), kBufBytes);
            if (r.add(added) != AddStatus::Ok) break;
            ++added;
            ++n;
        }
        if (n > 0 && drv.kick_prepare()) {
            ++kicks;
            if (use_eventfd) kick->signal();
        }
        UsedBuf u;
        uint32_t got = 0;
        while (drv.get_used(u)) {
            std::memcpy(resp.data(), r.host(BenchRing::slot_off(u.token) + kBufBytes), kBufBytes);
            benchmark::DoNotOptimize(resp);
            ++reaped;
            ++got;
        }
        if (n > 0 || got > 0) return true;
        if (drv.broken() || worker.failed() || lost > 0) return false;
        if (!use_eventfd) {
            cpu_relax();
            return true;
        }
        // Ring full and nothing used: re-arm (race-free) and sleep on the call fd.
        if (!drv.enable_cb()) {
            drv.disable_cb();
            return true;
        }
        if (!call->wait(kPollUs) && drv.poll(drv.last_used_idx())) ++lost;
        call->consume();
        drv.disable_cb();
        return true;
    };

    // One iteration: kBurst more buffers completed the round trip.
    bool ok = true;
    const auto t0 = Clock::now();
    for (auto _ : state) {
        const uint64_t target = reaped + kBurst;
        while (ok && reaped < target) ok = pass();
        if (!ok) {
            state.SkipWithError("ring broke or a wakeup was lost");
            break;
        }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    worker.stop();
    device_thread.join();

    if (!ok) return;
    const auto bufs = static_cast<double>(reaped);
    state.SetItemsProcessed(static_cast<int64_t>(reaped));
    state.SetBytesProcessed(static_cast<int64_t>(reaped * kBufBytes));
    state.counters["ns_per_buf"] = bufs > 0 ? secs * 1e9 / bufs : 0.0;
    state.counters["kicks_per_buf"] = bufs > 0 ? static_cast<double>(kicks) / bufs : 0.0;
    state.counters["irqs_per_buf"] =
        bufs > 0 ? static_cast<double>(worker.interrupts()) / bufs : 0.0;
}

BENCHMARK(BM_SplitTwoThreadCopy64)
    ->ArgNames({"event_idx", "eventfd"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->UseRealTime();

/// One doorbell signal: write() (pvnet's own eventfds) against the kernel-made
/// signal of an eventfd a peer holds (EventFd::hand_over(): one io_uring NOP,
/// its completion reaped in userspace). The count is drained every 1024
/// signals, as a waiter would, outside the timing's interest.
void BM_EventFdSignal(benchmark::State& state) {
    auto e = EventFd::create();
    if (!e) {
        state.SkipWithError("eventfd failed");
        return;
    }
    if (state.range(0) != 0) {
        e->hand_over();
        if (!e->kernel_signalled()) {
            state.SkipWithError("io_uring unavailable");
            return;
        }
    }
    uint32_t n = 0;
    for (auto _ : state) {
        e->signal();
        if ((++n & 1023u) == 0) (void)e->consume();
    }
}
BENCHMARK(BM_EventFdSignal)->ArgName("kernel")->Arg(0)->Arg(1);

/// consume() of a signalled eventfd (preadv2 with RWF_NOWAIT), signal included.
void BM_EventFdSignalConsume(benchmark::State& state) {
    auto e = EventFd::create();
    if (!e) {
        state.SkipWithError("eventfd failed");
        return;
    }
    if (state.range(0) != 0) e->hand_over();
    for (auto _ : state) {
        e->signal();
        benchmark::DoNotOptimize(e->consume());
    }
}
BENCHMARK(BM_EventFdSignalConsume)->ArgName("kernel")->Arg(0)->Arg(1);

}  // namespace
}  // namespace pvnet::ring

BENCHMARK_MAIN();
