// FlowRxQueueTable: the rx queue each flow last arrived on, for a guest that
// forwards frames rather than terminating them in sockets (the relay: netns
// A's sockets are behind tap A, out of the frontend's reach). It plays
// sk_rx_queue_mapping's part for XPS's rx-queue map, keyed as tun's flow
// table is (tun_flow_update / tun_flow_find) by the symmetric flow hash, so
// a reply finds its request's queue.
//
// Fixed size, no allocation after construction; one 64-bit word per bucket
// (hash and queue together), so a reader never sees half an update. Writers
// are the rx NAPI threads, readers the transmitting threads: a lost race
// only means one frame uses the previous queue, as with the kernel's
// unlocked sk_rx_queue_mapping.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

namespace pvnet::frontend {

class FlowRxQueueTable {
public:
    /// 4096 buckets, as tun's TUN_NUM_FLOW_ENTRIES is 1024 per device.
    static constexpr uint32_t kBuckets = 4096;

    FlowRxQueueTable() : slots_(std::make_unique<std::atomic<uint64_t>[]>(kBuckets)) {}

    /// Flow `hash` (0: none, not recorded) arrived on rx queue `rxq`.
    void record(uint32_t hash, uint16_t rxq) noexcept {
        if (hash == 0) return;
        const uint64_t word = (uint64_t{hash} << 32) | rxq;
        std::atomic<uint64_t>& s = slots_[hash & (kBuckets - 1)];
        // Skip the store when nothing changes: the bucket's cache line stays
        // shared with the transmitting threads.
        if (s.load(std::memory_order_relaxed) != word) s.store(word, std::memory_order_relaxed);
    }
    /// The rx queue flow `hash` last arrived on, if this bucket still holds it.
    std::optional<uint16_t> lookup(uint32_t hash) const noexcept {
        if (hash == 0) return std::nullopt;
        const uint64_t word = slots_[hash & (kBuckets - 1)].load(std::memory_order_relaxed);
        if (static_cast<uint32_t>(word >> 32) != hash) return std::nullopt;
        return static_cast<uint16_t>(word & 0xffff);
    }

private:
    std::unique_ptr<std::atomic<uint64_t>[]> slots_;
};

}  // namespace pvnet::frontend
