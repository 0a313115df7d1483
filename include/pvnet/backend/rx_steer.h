// RxSteer: the device's receive steering state (VIRTIO 1.2 "Automatic
// receive steering in multiqueue mode", "Receive-side scaling (RSS)"): how
// many queue pairs the driver uses (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET)
// and, once it sent VIRTIO_NET_CTRL_MQ_RSS_CONFIG, the RSS configuration
// that picks a received frame's queue; with VIRTIO_NET_F_HASH_REPORT and
// without RSS, the VIRTIO_NET_CTRL_MQ_HASH_CONFIG that has frames hashed
// (for the report) but not steered ("Hash calculation for incoming packets":
// with RSS negotiated the hash parameters are RSS_CONFIG's, else HASH_CONFIG's).
//
// Threads. The control side (the device's worker applying control commands,
// its control plane on feature negotiation and reset) writes, serialised by
// the caller; steer() and the queries read from any thread. The state is an
// immutable snapshot behind an atomic pointer, read without a lock. Unlike
// xps.cc's versions kept until destruction, the snapshots are two fixed
// slots reused after a grace period: the guest drives the writes, and its
// commands must not grow memory. A reader announces itself in one of two
// counters (chosen by a grace-period epoch) around its use of the snapshot;
// a writer, having published a new snapshot, flips the epoch twice, each
// time waiting until the counter it left is zero. A writer thus waits, at
// most, for readers already inside steer() (a few hundred nanoseconds of
// hashing), never for new ones; a reader never waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>

#include "pvnet/net/rss.h"

namespace pvnet::backend {

class RxSteer {
public:
    /// `max_pairs` (>= 1): max_virtqueue_pairs. Starts with every pair
    /// active and no RSS.
    explicit RxSteer(uint16_t max_pairs);
    RxSteer(const RxSteer&) = delete;
    RxSteer& operator=(const RxSteer&) = delete;

    uint16_t max_pairs() const noexcept { return max_pairs_; }
    /// Queue pairs in use (the rx queues the device may fill).
    uint16_t active_pairs() const noexcept;
    bool rss_enabled() const noexcept;
    /// Frames are hashed: RSS or a HASH_CONFIG is in force.
    bool hashing_enabled() const noexcept;

    /// Where a frame (Ethernet, no virtio_net_hdr) goes: with RSS,
    /// net::select_rx_queue's pick, taken modulo active_pairs() when the
    /// guest's table names a pair beyond max_tx_vq (QEMU's
    /// `index % curr_queue_pairs`); without, `arrival` (the pair whose port
    /// received it) if below active_pairs(), else arrival % active_pairs().
    /// The hash and hash_report are RSS's, else HASH_CONFIG's (net::hash_frame),
    /// else none. Wait-free, no allocation; any thread.
    net::RxSteering steer(std::span<const uint8_t> frame, uint16_t arrival = 0) const noexcept;
    /// The same from the frame's first bytes and its length (at least
    /// min(frame_len, net::kHashHeadBytes) of them): what the device has of
    /// a frame its port wrote into guest memory.
    net::RxSteering steer(std::span<const uint8_t> head, uint32_t frame_len,
                          uint16_t arrival) const noexcept;

    // ---- control side, serialised by the caller ----------------------------

    /// VQ_PAIRS_SET: `n` pairs (clamped to 1..max_pairs), RSS off (QEMU's
    /// virtio_net_handle_mq disables RSS for it).
    void set_active_pairs(uint16_t n) noexcept;
    /// RSS_CONFIG (validated by net::parse_rss_config against max_pairs):
    /// RSS on, max_tx_vq pairs active (QEMU's curr_queue_pairs), any
    /// HASH_CONFIG replaced (RSS's parameters are the hash's).
    void set_rss(const net::RssConfig& c) noexcept;
    /// HASH_CONFIG (validated by net::parse_hash_config): frames hashed with
    /// `c`, the pairs in use and RSS as they were (the device takes it only
    /// without VIRTIO_NET_F_RSS, so there is no RSS). VQ_PAIRS_SET leaves it:
    /// the spec ties the hash parameters to no other command (QEMU drops it).
    void set_hash_config(const net::HashConfig& c) noexcept;
    /// Device reset / feature negotiation: no RSS, no hashing, `active`
    /// pairs (clamped).
    void reset(uint16_t active) noexcept;

private:
    struct State {
        uint16_t active_pairs = 1;
        std::optional<net::RssConfig> rss;
        std::optional<net::HashConfig> hash;  ///< HASH_CONFIG's, never with rss
    };
    /// A reader's hold on the current snapshot (enter/leave its counter).
    class Hold;

    uint16_t clamp_pairs(uint16_t n) const noexcept;
    /// Writes `s` into the spare slot, publishes it, then waits out the
    /// readers that may still see the old one (which becomes the spare).
    void publish(uint16_t active, const std::optional<net::RssConfig>& rss,
                 const std::optional<net::HashConfig>& hash) noexcept;

    const uint16_t max_pairs_;
    State slots_[2];
    std::atomic<const State*> cur_;
    std::atomic<uint32_t> epoch_{0};
    mutable std::atomic<uint32_t> readers_[2] = {0, 0};
};

}  // namespace pvnet::backend
