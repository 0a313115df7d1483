// Statistics counters: one writer thread (add_shared for the few with
// several), any number of readers. The writer uses a relaxed load+store (no
// locked read-modify-write on the hot path); readers see a value that is at
// most slightly stale.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pvnet {

class Counter {
public:
    void add(uint64_t n = 1) noexcept {
        v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    /// For a counter with several writers (a plain add() would lose updates).
    void add_shared(uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
    uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }
    void reset() noexcept { v_.store(0, std::memory_order_relaxed); }

private:
    std::atomic<uint64_t> v_{0};
};

/// One counter per value of an enum whose last enumerator is `Count`.
template <typename Enum>
class CounterArray {
public:
    static constexpr std::size_t kSize = static_cast<std::size_t>(Enum::Count);
    void add(Enum e, uint64_t n = 1) noexcept { c_[static_cast<std::size_t>(e)].add(n); }
    uint64_t get(Enum e) const noexcept { return c_[static_cast<std::size_t>(e)].get(); }
    uint64_t total() const noexcept {
        uint64_t t = 0;
        for (const auto& c : c_) t += c.get();
        return t;
    }

private:
    std::array<Counter, kSize> c_{};
};

}  // namespace pvnet
