// XPS (transmit packet steering) as the Linux stack decides it: per tx queue
// an rx-queue mask (xps_rxqs) and a CPU mask (xps_cpus), and the selection in
// net/core/dev.c's order (get_xps_queue: rxqs first, then cpus; else
// skb_tx_hash). VirtioNet owns one per device (VirtioNet::xps, pick_tx).
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pvnet/util/counters.h"

namespace pvnet::frontend {

inline constexpr unsigned kXpsMaxBits = 256;

/// A CPU or queue set in sysfs mask syntax.
struct XpsMask {
    std::bitset<kXpsMaxBits> bits;
    /// bitmap_parse rules: comma-separated groups of ≤ 8 hex digits, 32 bits
    /// each, most significant first; surrounding whitespace tolerated. A bit
    /// at or above `nbits` is an error (the kernel's -EOVERFLOW). Returns the
    /// error text (naming the group / character) or nullopt on success.
    static std::optional<std::string> parse(std::string_view s, unsigned nbits, XpsMask& out);
    /// As sysfs prints it (bitmap_print_to_pagebuf "%*pb"): ceil(nbits/32)
    /// groups, zero-padded to 8 digits except the first.
    std::string format(unsigned nbits) const;
};

/// Which rule picked the tx queue.
enum class XpsRule : uint8_t { Rxqs, Cpus, Hash };

struct XpsPick {
    uint16_t txq;
    XpsRule rule;
};

/// One sending thread's XPS outcomes (the seed's per-thread view): the tx
/// queues it used, the rule that decided, and how often a flow with a
/// recorded rx queue left on another queue.
struct XpsThreadStats {
    explicit XpsThreadStats(uint16_t num_txq) : txq_used(num_txq) {}
    std::vector<Counter> txq_used;
    std::array<Counter, 3> by_rule;  ///< indexed by XpsRule
    Counter rxq_mismatch;

    void record(XpsPick p, std::optional<uint16_t> rx_queue) noexcept {
        if (p.txq < txq_used.size()) txq_used[p.txq].add();
        by_rule[static_cast<std::size_t>(p.rule)].add();
        if (rx_queue && *rx_queue != p.txq) rxq_mismatch.add();
    }
};

class Xps {
public:
    Xps(uint16_t num_txq, uint16_t num_rxq, uint16_t num_cpus);
    ~Xps();
    Xps(const Xps&) = delete;
    Xps& operator=(const Xps&) = delete;

    /// Set tx queue `txq`'s mask (sysfs text). Error text, or nullopt.
    std::optional<std::string> set_rxqs(uint16_t txq, std::string_view mask);
    std::optional<std::string> set_cpus(uint16_t txq, std::string_view mask);
    /// rx queue i → tx queue i for i < min(n, queues).
    void symmetric(uint16_t n);
    /// virtio_net's virtnet_set_affinity for `pairs` queue pairs in use: the
    /// CPUs split into consecutive groups, one per queue (the first
    /// num_cpus % pairs queues one CPU more; fewer CPUs than queues wrap), set
    /// as each tx queue's xps_cpus. Returns each queue's first CPU: where its
    /// interrupt (and so its NAPI) goes.
    std::vector<unsigned> virtnet_set_affinity(uint16_t pairs);

    /// netdev_pick_tx: `rx_queue` is the flow's recorded rx queue (if any),
    /// `cpu` the sending CPU, `hash` the flow hash. Wait-free, no allocation.
    XpsPick pick(std::optional<uint16_t> rx_queue, unsigned cpu, uint32_t hash) const noexcept;

    uint16_t num_txq() const noexcept { return num_txq_; }

private:
    // Immutable once published. For each rx queue / CPU, the tx queues whose
    // mask covers it (the kernel's xps_map->queues), inverted at set time.
    struct Map {
        std::vector<XpsMask> rxqs, cpus;                 // per tx queue, as set
        std::vector<std::vector<uint16_t>> by_rxq, by_cpu;
    };
    std::optional<std::string> update(uint16_t txq, std::string_view mask, bool rxqs);
    void publish(std::unique_ptr<Map> m);

    uint16_t num_txq_, num_rxq_, num_cpus_;
    // Readers load the pointer (acquire) and read a map that never changes.
    // Writers (rare: configuration) copy, modify, and swap under mutex_. Old
    // maps are kept until ~Xps instead of RCU-style reclamation: a reader
    // never needs a grace period, and configuration changes are few.
    std::atomic<const Map*> map_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<Map>> versions_;
};

}  // namespace pvnet::frontend
