// L2Switch and SwitchPort: `pvnet serve --switch`, a learning Ethernet
// switch between the devices of one process (as Linux's bridge: br_fdb.c,
// br_forward.c). One SwitchPort per (device, queue pair), all attached to one
// L2Switch. A frame the guest sends (send(), handle_tx) teaches the switch
// its source MAC's device, then goes to the device that owns its destination
// MAC, or, for an unknown, broadcast or multicast destination, to every other
// device (flood). It arrives at a destination port's queue and the guest
// there takes it (recv(), handle_rx) with a zeroed virtio_net_hdr (serve
// offers no offloads with this port, as with MacswapPort).
//
// Threads: each device's worker sends on its own ports and delivers into
// other devices' ports, so a port's queue has many producers: they take the
// port's producer mutex around the ReplyQueue's reserve/commit (which is
// single-producer), and its one reader stays lock-free. The forwarding table
// has its own mutex; no thread holds two of these locks at once.
//
// A slow or absent receiver never stalls a sender: a full destination queue
// is a counted drop, not a Retry (a Retry would also repeat the copies a
// flood already queued elsewhere).
//
// Accounting, on the sender's port (only its worker writes them):
//   tx_pkts = tx_unicast + tx_flooded + drops other than queue_full;
//   every copy (1 per unicast, devices-1 per flood) is forwarded or a
//   queue_full drop. On the receiver's port: queue().stats (queued, rx_pkts,
//   rx_drop_no_room; retry_full there counts the copies producers found no
//   room for, each also a queue_full drop at its sender).
// Port contract: include/pvnet/port/port.h.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "pvnet/port/port.h"
#include "pvnet/port/reply_queue.h"
#include "pvnet/util/counters.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port {

class SwitchPort;

/// Why a frame (or one copy of it) was not forwarded.
enum class SwitchDrop : uint8_t {
    Runt,       ///< shorter than hdr + Ethernet header, or iovecs short of len
    Oversize,   ///< frame longer than max_frame_bytes()
    BadSource,  ///< multicast or all-zero source MAC (never learned, as br_handle_frame)
    OwnDevice,  ///< destination learned on the sender's own device
    QueueFull,  ///< one copy: the destination's queue had no free slot
    Count
};

std::string_view to_string(SwitchDrop d) noexcept;

struct SwitchConfig {
    static constexpr uint32_t kDefaultMaxEntries = 4096;
    /// Linux's bridge default ageing_time.
    static constexpr std::chrono::nanoseconds kDefaultAgeing = std::chrono::seconds(300);

    uint32_t max_entries = kDefaultMaxEntries;         ///< learned MACs at most (1..1 << 20)
    std::chrono::nanoseconds ageing = kDefaultAgeing;  ///< an entry older than this is not used
    /// Monotonic time; empty: std::chrono::steady_clock. Tests inject one.
    std::function<std::chrono::nanoseconds()> now;
};

/// What one frame did to the forwarding table (reported to the sender's port).
struct SwitchDecision {
    static constexpr uint32_t kFlood = UINT32_MAX;
    uint32_t dst_dev = kFlood;  ///< the destination's device, or kFlood
    bool learned = false;       ///< the source MAC was added
    bool moved = false;         ///< the source MAC moved here from another device
    bool table_full = false;    ///< the source MAC was new and found no room
    uint32_t aged = 0;          ///< entries removed for being older than the ageing time
};

class L2Switch {
public:
    using Mac = uint64_t;  ///< 48 bits, first octet in the top byte

    static Result<std::unique_ptr<L2Switch>, PortError> create(SwitchConfig cfg) noexcept;
    L2Switch(const L2Switch&) = delete;
    L2Switch& operator=(const L2Switch&) = delete;

    /// Attaches a port as the next queue pair of device `dev` (SwitchPort::create
    /// does). Setup only: every port attaches before any send(), and every
    /// port outlives every other port's last send().
    void attach(uint32_t dev, SwitchPort& p);

    /// Learns `src` on `dev` and looks `dst` up (SwitchPort::send's step).
    SwitchDecision forward(uint32_t dev, Mac src, Mac dst) noexcept;

    /// Device numbers below this may have ports.
    uint32_t devices() const noexcept { return static_cast<uint32_t>(ports_.size()); }
    bool has_ports(uint32_t dev) const noexcept { return !ports_[dev].empty(); }
    /// Queue pair `q` of `dev` (which has ports), modulo its count (a
    /// destination with fewer pairs).
    SwitchPort& port(uint32_t dev, uint32_t q) const noexcept {
        return *ports_[dev][q % ports_[dev].size()];
    }
    /// Learned entries, fresh or not yet removed.
    uint32_t size() const;

private:
    struct Entry {
        uint64_t key = 0;  ///< kUsed | MAC, 0: empty
        uint32_t dev = 0;
        int64_t seen_ns = 0;
    };
    static constexpr uint64_t kUsed = uint64_t{1} << 63;

    L2Switch(SwitchConfig cfg, std::vector<Entry> slots, uint64_t seed) noexcept;
    int64_t now_ns() const noexcept;
    std::size_t home(uint64_t key) const noexcept;
    Entry* find(uint64_t key) noexcept;
    void erase(Entry* e) noexcept;
    uint32_t sweep(int64_t now) noexcept;
    bool fresh(const Entry& e, int64_t now) const noexcept { return now - e.seen_ns <= ageing_ns_; }

    SwitchConfig cfg_;
    int64_t ageing_ns_;
    mutable std::mutex mu_;
    // Open addressing, linear probing, at most half full (so every probe
    // ends at an empty slot); erase shifts back, no tombstones. The hash is
    // a multiply by a random odd number: a guest cannot aim its source
    // MACs at one chain.
    std::vector<Entry> slots_;
    uint64_t seed_;
    unsigned shift_;
    uint32_t used_ = 0;
    int64_t last_sweep_ns_;
    std::vector<std::vector<SwitchPort*>> ports_;  ///< [dev][q]; fixed after setup
};

class SwitchPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    static constexpr uint32_t kEthHdrBytes = 14;
    static constexpr uint32_t kDefaultSlots = 256;

    /// The next queue pair of device `dev` on `sw` (which outlives it);
    /// frames up to `max_frame_bytes` (no virtio header), `slots` queued at most.
    static Result<std::unique_ptr<SwitchPort>, PortError> create(
        L2Switch& sw, uint32_t dev, uint32_t max_frame_bytes,
        uint32_t slots = kDefaultSlots) noexcept;

    bool rx_pending() noexcept { return q_->pending(); }
    uint32_t peek_len() noexcept { return q_->peek_len(); }
    uint32_t recv(std::span<const iovec> dst) noexcept { return q_->pop(dst); }
    /// Switches the frame: Sent (forwarded to at least one queue, or flooded
    /// with no other device) or Dropped (counted); never Retry.
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept;
    int rx_fd() const noexcept { return q_->rx_fd(); }
    uint32_t max_frame_bytes() const noexcept { return max_frame_; }

    uint32_t dev() const noexcept { return dev_; }
    uint32_t queue_index() const noexcept { return q_index_; }
    const ReplyQueue& queue() const noexcept { return *q_; }

    Counter tx_pkts;           ///< frames taken (every send())
    Counter tx_unicast;        ///< to the one device that owns the destination
    Counter tx_flooded;        ///< unknown, broadcast or multicast destination: every other device
    Counter forwarded;         ///< copies queued at a destination
    Counter learned;           ///< source MACs this port's frames added to the table
    Counter moved;             ///< source MACs that moved to this port's device
    Counter aged;              ///< stale entries its frames met (removed, or re-learned fresh)
    Counter learn_table_full;  ///< new source MACs not learned: the table was full
    CounterArray<SwitchDrop> drops;

private:
    SwitchPort(L2Switch& sw, uint32_t dev, std::unique_ptr<ReplyQueue> q,
               uint32_t max_frame) noexcept
        : sw_(sw), dev_(dev), q_(std::move(q)), max_frame_(max_frame) {}
    friend class L2Switch;  // sets q_index_ at attach()
    /// Queues one copy (any thread): false when no slot is free.
    bool enqueue(std::span<const iovec> src, uint32_t frame_len) noexcept;
    void deliver(SwitchPort& to, std::span<const iovec> src, uint32_t frame_len) noexcept;

    L2Switch& sw_;
    uint32_t dev_;
    uint32_t q_index_ = 0;
    std::mutex producer_mu_;  ///< the senders into q_ (reserve..commit)
    std::unique_ptr<ReplyQueue> q_;
    uint32_t max_frame_;
};

static_assert(Port<SwitchPort> && HasRxFd<SwitchPort> && HasPeekLen<SwitchPort> &&
              HasMaxFrame<SwitchPort>);

}  // namespace pvnet::port
