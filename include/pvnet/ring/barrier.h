// Every fence and every non-relaxed atomic of the ring layer (STYLE.md §7).
// Ring idx/flags/event words are reached through std::atomic_ref<uint16_t>;
// ring setup checks their 2-byte alignment. Call sites say `// ORDER:` and
// name the partner operation on the other side.
#pragma once

#include <atomic>
#include <cstdint>

#include "pvnet/ring/ring_idx.h"
#include "pvnet/virtio/le.h"

namespace pvnet::ring {

/// Release-store of a ring index: everything written before (descriptors,
/// ring slots, used elements) is visible to whoever observes this index.
inline void publish_idx(uint16_t* p, RingIdx idx) noexcept {
    std::atomic_ref<uint16_t>(*p).store(virtio::host_to_le(idx.value()),
                                        std::memory_order_release);
}

/// Acquire-load of the peer's ring index: reads of the slots and
/// descriptors it covers come after.
inline RingIdx observe_idx(uint16_t* p) noexcept {
    return RingIdx(virtio::le_to_host(std::atomic_ref<uint16_t>(*p).load(std::memory_order_acquire)));
}

/// Store→load ordering: our index/event store is globally visible before we
/// read the peer's event or flags (the kick and interrupt decisions and the
/// re-arm recheck; Linux a72caae21803).
inline void full_fence() noexcept { std::atomic_thread_fence(std::memory_order_seq_cst); }

/// Event-suppression words (flags, used_event, avail_event) are hints whose
/// ordering comes from full_fence(); relaxed access keeps them tear-free.
inline void store_event(uint16_t* p, uint16_t v) noexcept {
    std::atomic_ref<uint16_t>(*p).store(virtio::host_to_le(v), std::memory_order_relaxed);
}
inline uint16_t load_event(uint16_t* p) noexcept {
    return virtio::le_to_host(std::atomic_ref<uint16_t>(*p).load(std::memory_order_relaxed));
}

/// The inflight log (inflight.h) is read by a later back-end after this one
/// died, never concurrently: what matters is that no store becomes visible
/// before the stores that precede it in program order. A release store
/// gives that (a plain store on x86), no fence needed.
template <typename T>
inline void log_store_release(T* p, T v) noexcept {
    std::atomic_ref<T>(*p).store(v, std::memory_order_release);
}
/// A log store nothing later depends on (its order comes from a later release).
template <typename T>
inline void log_store(T* p, T v) noexcept {
    std::atomic_ref<T>(*p).store(v, std::memory_order_relaxed);
}
/// Recovery's snapshot of a log field: one tear-free read of hostile memory.
template <typename T>
inline T log_load(T* p) noexcept {
    return std::atomic_ref<T>(*p).load(std::memory_order_relaxed);
}

}  // namespace pvnet::ring
