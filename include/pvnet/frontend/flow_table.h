// FlowRxQueueTable: the rx queue each flow last arrived on, for a guest that
// forwards frames rather than terminating them in sockets (the relay: netns
// A's sockets are behind tap A, out of the frontend's reach). It plays
// sk_rx_queue_mapping's part for XPS's rx-queue map, keyed as tun's flow
// table is (tun_flow_update / tun_flow_find) by the symmetric flow hash, so
// a reply finds its request's queue.
//
// Set-associative, 4 ways a set: two live flows whose hashes share a set
// both stay (a direct-mapped table made them evict each other on every
// frame, so ~3% of 16-flow runs lost the map for two flows). A full set
// evicts its least recently refreshed way, as tun's flows age out
// (TUN_FLOW_EXPIRE), so dead flows make room before live ones.
//
// Fixed size, no allocation after construction; one 64-bit word per way
// (hash, queue and a coarse age together), so a reader never sees half an
// update. Writers are the rx NAPI threads, readers the transmitting threads:
// a lost race only means one frame uses the previous queue, as with the
// kernel's unlocked sk_rx_queue_mapping, and the flow's next frame repairs
// the entry.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

namespace pvnet::frontend {

class FlowRxQueueTable {
public:
    static constexpr uint32_t kWays = 4;
    /// 4096 entries, as tun's TUN_NUM_FLOW_ENTRIES is 1024 per device.
    static constexpr uint32_t kSets = 1024;

    FlowRxQueueTable() : slots_(std::make_unique<std::atomic<uint64_t>[]>(kSets * kWays)) {}

    /// Flow `hash` (0: none, not recorded) arrived on rx queue `rxq`.
    void record(uint32_t hash, uint16_t rxq) noexcept { record_at(hash, rxq, now_tick()); }

    /// As record, at age tick `tick` (tests drive the clock).
    void record_at(uint32_t hash, uint16_t rxq, uint16_t tick) noexcept {
        if (hash == 0) return;
        std::atomic<uint64_t>* set = &slots_[(hash & (kSets - 1)) * kWays];
        const uint64_t word = (uint64_t{hash} << 32) | (uint64_t{tick} << 16) | rxq;
        std::atomic<uint64_t>* victim = nullptr;
        uint16_t victim_age = 0;
        for (uint32_t w = 0; w < kWays; ++w) {
            const uint64_t cur = set[w].load(std::memory_order_relaxed);
            if (static_cast<uint32_t>(cur >> 32) == hash) {
                // Store only on change (queue, or age once a tick): the
                // line stays shared with the transmitting threads.
                if (cur != word) set[w].store(word, std::memory_order_relaxed);
                return;
            }
            // An empty way is the oldest; otherwise age in ticks, modulo 2^16.
            const uint16_t age =
                cur == 0 ? uint16_t{0xffff} : static_cast<uint16_t>(tick - (cur >> 16));
            if (victim == nullptr || age > victim_age) {
                victim = &set[w];
                victim_age = age;
            }
        }
        victim->store(word, std::memory_order_relaxed);
    }

    /// The rx queue flow `hash` last arrived on, if its set still holds it.
    std::optional<uint16_t> lookup(uint32_t hash) const noexcept {
        if (hash == 0) return std::nullopt;
        const std::atomic<uint64_t>* set = &slots_[(hash & (kSets - 1)) * kWays];
        for (uint32_t w = 0; w < kWays; ++w) {
            const uint64_t cur = set[w].load(std::memory_order_relaxed);
            if (static_cast<uint32_t>(cur >> 32) == hash) return static_cast<uint16_t>(cur);
        }
        return std::nullopt;
    }

private:
    /// About a quarter second (2^28 ns) a tick, from the vDSO's coarse clock
    /// (no syscall, no TSC calibration).
    static uint16_t now_tick() noexcept {
        timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u +
                            static_cast<uint64_t>(ts.tv_nsec);
        return static_cast<uint16_t>(ns >> 28);
    }

    std::unique_ptr<std::atomic<uint64_t>[]> slots_;
};

}  // namespace pvnet::frontend
