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
// Tenants. Each device is a guest that may be hostile to the others, so the
// switch holds each to what Linux's bridge and OVS users configure:
//   - no MAC move while fresh: a source MAC learned on another device and
//     seen there within the ageing time is refused (the frame dropped,
//     mac_move), as a bridge port's `sticky` fdb entries and port security
//     refuse it; Linux's default and OVS move at once, which lets any guest
//     take another's traffic with one frame. An entry that aged out, or whose
//     device's session ended (forgotten), may be learned anywhere.
//   - a limit of learned MACs per device (SwitchConfig::max_dev_macs, as
//     the bridge's max_learned): past it nothing new is learned
//     (learn_dev_limit) and the frame is still forwarded; other devices'
//     entries are never evicted for it.
//   - an optional fixed MAC per device (L2Switch::fix_mac, as libvirt's
//     no-mac-spoofing): a frame with another source is dropped
//     (spoofed_source), so nothing else is ever learned for that device.
//   - storm control per port: broadcast, multicast and unknown unicast (each
//     a flood) spend a token bucket of SwitchConfig::flood_pps frames/s and
//     flood_burst frames; past it the frame is dropped (storm).
// A session's end (session_end(), from the device's reset) forgets the
// device's learned MACs, drops what its port still queued and takes the
// port down: floods skip it and unicast to it is dropped (port_down) until
// the next session starts its rx vring (session_start()).
//
// Accounting, on the sender's port (only its worker writes them):
//   tx_pkts = tx_unicast + tx_flooded + drops other than queue_full;
//   every copy (1 per unicast, one per other device whose port is up for a
//   flood) is forwarded or a queue_full drop. On the receiver's port:
//   queue().stats (queued, rx_pkts, rx_drop_no_room, drop_session_end;
//   retry_full there counts the copies producers found no room for, each
//   also a queue_full drop at its sender). Every counter runs for the
//   process's life, across sessions, as a Linux interface's do across a
//   link flap; what is per session is state: the learned MACs, the queue,
//   the link.
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
    MacMove,    ///< source MAC fresh on another device: refused, not moved
    Spoofed,    ///< source is not the sender's device's fixed MAC
    Storm,      ///< a flood past the port's storm-control budget
    PortDown,   ///< unicast to a device with no session
    Count
};

std::string_view to_string(SwitchDrop d) noexcept;

struct SwitchConfig {
    static constexpr uint32_t kDefaultMaxEntries = 4096;
    /// Linux's bridge default ageing_time.
    static constexpr std::chrono::nanoseconds kDefaultAgeing = std::chrono::seconds(300);

    /// A guest with a bridge or containers inside has a few dozen MACs; a
    /// spray is stopped here, long before it fills the table.
    static constexpr uint32_t kDefaultMaxDevMacs = 256;
    /// Storm control: far above a guest's ARP/ND/DHCP/mDNS and the first
    /// frames to a MAC not yet learned, far below what a spinning guest sends;
    /// the burst is half a port's default queue, so a storm never fills it.
    static constexpr uint32_t kDefaultFloodPps = 10000;
    static constexpr uint32_t kDefaultFloodBurst = 128;
    static constexpr uint32_t kMaxFloodPps = 100'000'000;

    uint32_t max_entries = kDefaultMaxEntries;         ///< learned MACs at most (1..1 << 20)
    std::chrono::nanoseconds ageing = kDefaultAgeing;  ///< an entry older than this is not used
    uint32_t max_dev_macs = kDefaultMaxDevMacs;  ///< learned MACs per device (1..; max_entries caps it)
    uint32_t flood_pps = kDefaultFloodPps;       ///< per port (0: no storm control; ..kMaxFloodPps)
    uint32_t flood_burst = kDefaultFloodBurst;   ///< per port, frames (1..1 << 20)
    /// Monotonic time; empty: CLOCK_MONOTONIC_COARSE (a vDSO read, no
    /// syscall; its tick is ample for ageing and storm control). Tests inject one.
    std::function<std::chrono::nanoseconds()> now;
};

/// What one frame did to the forwarding table (reported to the sender's port).
struct SwitchDecision {
    static constexpr uint32_t kFlood = UINT32_MAX;
    uint32_t dst_dev = kFlood;  ///< the destination's device, or kFlood
    bool learned = false;       ///< the source MAC was added
    bool moved = false;         ///< the source MAC was stale on another device (removed there)
    bool table_full = false;    ///< the source MAC was new and found no room
    bool dev_limit = false;     ///< the source MAC was new and its device at max_dev_macs
    bool move_refused = false;  ///< the source MAC is fresh on another device: drop the frame
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

    /// Setup only (before any send()): frames of `dev` must have source `mac`.
    void fix_mac(uint32_t dev, Mac mac);
    /// The fixed source MAC of `dev`, 0 if none.
    Mac fixed_mac(uint32_t dev) const noexcept { return fixed_[dev]; }

    /// Learns `src` on `dev` and looks `dst` up (SwitchPort::send's step) at time `now`.
    SwitchDecision forward(uint32_t dev, Mac src, Mac dst, int64_t now) noexcept;
    /// Removes every entry learned on `dev` (its session ended); how many.
    uint32_t forget(uint32_t dev) noexcept;
    /// The switch's clock (SwitchConfig::now), in nanoseconds.
    int64_t now_ns() const noexcept;
    const SwitchConfig& config() const noexcept { return cfg_; }

    /// Device numbers below this may have ports.
    uint32_t devices() const noexcept { return static_cast<uint32_t>(ports_.size()); }
    bool has_ports(uint32_t dev) const noexcept { return !ports_[dev].empty(); }
    /// Queue pair `q` of `dev` (which has ports), modulo its count (a
    /// destination with fewer pairs).
    SwitchPort& port(uint32_t dev, uint32_t q) const noexcept {
        return *ports_[dev][q % ports_[dev].size()];
    }
    /// Learned entries, fresh or not yet removed (all, or `dev`'s).
    uint32_t size() const;
    uint32_t size(uint32_t dev) const;

private:
    struct Entry {
        uint64_t key = 0;  ///< kUsed | MAC, 0: empty
        uint32_t dev = 0;
        int64_t seen_ns = 0;
    };
    static constexpr uint64_t kUsed = uint64_t{1} << 63;

    L2Switch(SwitchConfig cfg, std::vector<Entry> slots, uint64_t seed) noexcept;
    void insert(uint64_t key, uint32_t dev, int64_t now) noexcept;
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
    std::vector<uint32_t> dev_used_;  ///< entries per device (under mu_)
    std::vector<std::vector<SwitchPort*>> ports_;  ///< [dev][q]; fixed after setup
    std::vector<Mac> fixed_;                       ///< [dev]; fixed after setup
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
    /// The device's session started its rx vring: copies are queued here again.
    void session_start() noexcept;
    /// The device's session ended (port contract, HasSession): the port
    /// goes down, what it queued is dropped (queue().stats.drop_session_end)
    /// and the device's learned MACs are forgotten. The caller is the
    /// port's reader (no recv() runs meanwhile).
    void session_end() noexcept;
    bool up() const noexcept;

    uint32_t dev() const noexcept { return dev_; }
    uint32_t queue_index() const noexcept { return q_index_; }
    const ReplyQueue& queue() const noexcept { return *q_; }

    Counter tx_pkts;           ///< frames taken (every send())
    Counter tx_unicast;        ///< to the one device that owns the destination
    Counter tx_flooded;        ///< unknown, broadcast or multicast destination: every other device
    Counter forwarded;         ///< copies queued at a destination
    Counter learned;           ///< source MACs this port's frames added to the table
    Counter moved;             ///< source MACs learned here that had aged out on another device
    Counter aged;              ///< stale entries its frames met (removed, or re-learned fresh)
    Counter learn_table_full;  ///< new source MACs not learned: the table was full
    Counter learn_dev_limit;   ///< new source MACs not learned: the device had max_dev_macs
    Counter forgotten;         ///< entries of this device forgotten at a session's end
    CounterArray<SwitchDrop> drops;

private:
    SwitchPort(L2Switch& sw, uint32_t dev, std::unique_ptr<ReplyQueue> q,
               uint32_t max_frame) noexcept;
    friend class L2Switch;  // sets q_index_ at attach()
    enum class Enqueued : uint8_t { Queued, Full, Down };
    /// Queues one copy (any thread).
    Enqueued enqueue(std::span<const iovec> src, uint32_t frame_len) noexcept;
    void deliver(SwitchPort& to, std::span<const iovec> src, uint32_t frame_len,
                 bool unicast) noexcept;
    /// Storm control: takes one flood's token at `now`.
    bool flood_allowed(int64_t now) noexcept;

    L2Switch& sw_;
    uint32_t dev_;
    uint32_t q_index_ = 0;
    mutable std::mutex producer_mu_;  ///< the senders into q_ (reserve..commit), and up_
    bool up_ = true;                  ///< copies are queued (under producer_mu_)
    std::unique_ptr<ReplyQueue> q_;
    uint32_t max_frame_;
    // Storm control (the sender's, as the counters): GCRA, the theoretical
    // arrival time of the next flood; a flood passes while tat_ - now stays
    // within the burst's worth of intervals.
    int64_t flood_interval_ns_ = 0;  ///< 0: no storm control
    int64_t flood_tolerance_ns_ = 0;
    int64_t flood_tat_ns_ = INT64_MIN;
};

static_assert(Port<SwitchPort> && HasRxFd<SwitchPort> && HasPeekLen<SwitchPort> &&
              HasMaxFrame<SwitchPort> && HasSession<SwitchPort>);

}  // namespace pvnet::port
