// Flow: a socket-like sender with send credit (SO_SNDBUF), the guest side of
// TCP small queues. Bytes handed to the driver count against `sndbuf_bytes`
// until released: at transmit (Orphan — skb_orphan in virtio_net's
// start_xmit before tx NAPI) or when the device has used the buffer
// (OnCompletion — sock_wfree from the tx completion, as tx NAPI allows).
//
// The seed's point: with free-on-xmit completion and no orphaning, a sender
// at its limit transmits nothing more, so nothing reaps, so credit never
// returns — the stall `stalled()` reports.
#pragma once

#include <cstdint>
#include <optional>

#include "pvnet/util/counters.h"

namespace pvnet::frontend {

/// When a transmitted buffer's bytes stop counting against sndbuf.
enum class SndbufRelease : uint8_t {
    Orphan,        ///< at transmit (free-on-xmit's skb_orphan)
    OnCompletion,  ///< when the tx completion is reaped (tx NAPI, at-rx or at-xmit)
};

struct FlowStats {
    Counter sent_pkts, sent_bytes;     ///< charged by SendQueue::xmit
    Counter completed_pkts;            ///< tx completions reaped for this flow
    Counter sndbuf_refusals;           ///< can_send() said no
    Counter sndbuf_stalls;             ///< stall episodes: a refusal after a success
    Counter sndbuf_stall_ns;           ///< sum over episodes: first refusal → next success
    Counter max_in_flight_bytes;       ///< high-water mark of in_flight_bytes()
};

class Flow {
public:
    /// `sndbuf_bytes` is the credit; a send of more than that never fits.
    explicit Flow(uint32_t sndbuf_bytes,
                  SndbufRelease release = SndbufRelease::OnCompletion) noexcept
        : sndbuf_bytes_(sndbuf_bytes), release_(release) {}
    Flow(const Flow&) = delete;
    Flow& operator=(const Flow&) = delete;

    /// The sender's check before building a packet (sk_stream_memory_free,
    /// strict: in flight + bytes ≤ sndbuf). A refusal starts or continues a
    /// stall; the next success ends it and adds its length to the stall time.
    bool can_send(uint32_t bytes) noexcept;
    /// As can_send(bytes), with the caller's CLOCK_MONOTONIC time (tests).
    bool can_send(uint32_t bytes, uint64_t now_ns) noexcept;
    /// The same test without touching the stall accounting.
    bool has_credit(uint32_t bytes) const noexcept {
        return uint64_t{in_flight_} + bytes <= sndbuf_bytes_;
    }

    /// Hooks for SendQueue: bytes queued to the device (skb_set_owner_w) ...
    void charge(uint32_t bytes) noexcept;
    /// ... and returned (sock_wfree): at transmit when orphaned, else on
    /// completion. `completed` says a completion was reaped for the packet.
    void release(uint32_t bytes, bool completed) noexcept;

    uint32_t in_flight_bytes() const noexcept { return in_flight_; }
    uint32_t sndbuf_bytes() const noexcept { return sndbuf_bytes_; }
    SndbufRelease release_rule() const noexcept { return release_; }
    /// Refused for credit and not yet allowed again.
    bool stalled() const noexcept { return stalled_; }
    /// Length of the current stall at `now_ns` (0 if not stalled).
    uint64_t stall_ns(uint64_t now_ns) const noexcept {
        return stalled_ && now_ns > stall_start_ns_ ? now_ns - stall_start_ns_ : 0;
    }
    const FlowStats& stats() const noexcept { return stats_; }

    /// The rx queue this flow's traffic last arrived on (sk_rx_queue_mapping,
    /// read by XPS's rxqs map; an application sees it as SO_INCOMING_NAPI_ID).
    void record_rx_queue(uint16_t q) noexcept { rx_queue_ = q; }
    std::optional<uint16_t> rx_queue() const noexcept { return rx_queue_; }
    /// The hash the device reported for this flow's last received packet
    /// (VIRTIO_NET_F_HASH_REPORT, RxPiece::hash_value of a type other than
    /// NONE; sk_rxhash, saved by sock_rps_save_rxhash): the flow hash to
    /// hand XPS (VirtioNet::pick_tx), so tx and rx agree on the flow.
    void record_rxhash(uint32_t hash) noexcept { rxhash_ = hash; }
    std::optional<uint32_t> rxhash() const noexcept { return rxhash_; }

private:
    uint32_t sndbuf_bytes_;
    SndbufRelease release_;
    uint32_t in_flight_ = 0;
    uint32_t max_in_flight_ = 0;
    bool stalled_ = false;
    uint64_t stall_start_ns_ = 0;
    FlowStats stats_;
    std::optional<uint16_t> rx_queue_;
    std::optional<uint32_t> rxhash_;
};

}  // namespace pvnet::frontend
