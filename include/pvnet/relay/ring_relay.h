// RingRelay: kernel traffic through pvnet's rings (DESIGN.md, data flow).
// Tap A is the guest's network: a guest thread runs the frontend and moves
// what netns A's kernel sends out of tap A onto the tx virtqueue, and what
// arrives on the rx virtqueue into tap A. Tap B is the host's: the backend
// (VhostNet<TapPort>, its own worker) moves the tx ring into tap B and tap
// B's frames onto the rx ring. Headers pass through untouched both ways; the
// kernels validate them (seed 002).
//
// Offloads: with them on, tap A hands us GSO frames of up to 64 KiB (the
// guest's HOST_TSO4/6 + CSUM) and tap B may too (GUEST_TSO4/6 + CSUM, which
// mergeable rx buffers carry across the rx ring).
//
// The direct path (seed 002: "if the vhost TX ring would need a kick and I
// only have a few packets in the batch"): instead of kicking an idle
// worker, the guest thread runs the backend's tx processing itself
// (VhostNet::process_tx_now, a try-lock on the tx queue).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::relay {

struct RingRelayConfig {
    port::TapConfig guest_tap;  ///< tap A (offloads are set from `offloads`)
    port::TapConfig host_tap;   ///< tap B
    bool offloads = true;       ///< CSUM + TSO4/6 both ways (needs mergeable rx)
    /// Queue sizes, tx mode, at-rx, busy poll. buf_bytes, mergeable_rx and
    /// ctrl_vq are set by the relay.
    frontend::VirtioNetConfig fe;
    backend::Weight rx_weight, tx_weight;
    /// Asked for by the guest over the control queue (NOTF_COAL) at start.
    notify::CoalesceParams rx_coalesce, tx_coalesce;
    uint32_t busyloop_usecs = 0;  ///< backend
    bool direct = false;          ///< the direct path
    uint32_t direct_max = 4;      ///< ... for batches of at most this many packets
    /// After a direct transmit the guest spins on rx this long for the
    /// answer (0: only busy_poll_usecs applies).
    uint32_t direct_spin_usecs = 0;
    int guest_cpu = -1, backend_cpu = -1;
};

/// A snapshot of the relay's counters (monotonic; the caller takes deltas).
struct RingRelayCounters {
    uint64_t a_to_b_pkts = 0, a_to_b_bytes = 0;  ///< guest tx, taken by the backend
    uint64_t b_to_a_pkts = 0, b_to_a_bytes = 0;  ///< guest rx, written to tap A
    uint64_t gso_frames_tx = 0, gso_frames_rx = 0;  ///< frames with a GSO header
    uint64_t max_tx_frame = 0;  ///< largest frame read from tap A, header included
    uint64_t kicks = 0, interrupts = 0;
    uint64_t direct_runs = 0, direct_pkts = 0, direct_busy = 0;
    uint64_t tap_a_drops = 0, tap_b_drops = 0;  ///< rejected writes, any errno
    uint64_t tap_a_einval = 0, tap_b_einval = 0;  ///< ... of which a bad vnet header
    uint64_t ring_drops = 0;  ///< frames dropped at the rings (no room, bad length)
    bool broken = false;      ///< a queue broke (device needs reset)
};

class RingRelay {
public:
    static Result<std::unique_ptr<RingRelay>, std::string> create(const RingRelayConfig& cfg);
    ~RingRelay() { stop(); }

    /// Starts the worker and the guest thread; the guest asks for the
    /// configured coalescing first.
    Status<std::string> start();
    /// Stops and joins both threads (idempotent).
    void stop() noexcept;
    RingRelayCounters counters() const noexcept;

    const frontend::QueuePair& guest() const noexcept { return tb_.fe().queue_pair(0); }
    const backend::VhostNet<port::TapPort>& backend() const noexcept { return *dev_; }
    const port::TapPort& tap_a() const noexcept { return *tap_a_; }
    const port::TapPort& tap_b() const noexcept { return *tap_b_; }

private:
    RingRelay() = default;
    void guest_loop() noexcept;
    /// Tap A → tx ring, up to a NAPI budget; returns packets queued.
    uint32_t guest_xmit() noexcept;

    RingRelayConfig cfg_;
    pair::GuestPair tb_;
    std::unique_ptr<port::TapPort> tap_a_, tap_b_;
    std::unique_ptr<backend::VhostNet<port::TapPort>> dev_;
    /// Tap A's kernel does its own socket accounting; the relay's one flow
    /// never waits for credit, it only gives xmit its queue-stop logic.
    std::unique_ptr<frontend::Flow> flow_;
    std::thread guest_thread_;
    std::atomic<bool> stop_{false};
    bool started_ = false;
    Counter gso_tx_, gso_rx_;  ///< guest thread: GSO frames read from / written to tap A
    Counter lost_;             ///< frames read from tap A that the queue refused
    Counter max_tx_frame_;     ///< largest frame read from tap A
    Counter tap_a_full_;       ///< frames for tap A it had no room for (Retry)
    bool tap_a_gone_ = false;  ///< guest thread: tap A's fd reported an error

    /// Guest buffer slots: a page each, hdr + frame (mergeable on rx).
    static constexpr uint32_t kSlotBytes = 4096;
    static constexpr uint32_t kMaxPieces =
        (frontend::kMaxPacketBytes + kSlotBytes - 1) / kSlotBytes;
    uint32_t max_pieces_ = 1;
    std::array<uint32_t, kMaxPieces> tx_ids_{};
    std::array<iovec, kMaxPieces> tx_iov_{};
    std::array<frontend::TxPiece, kMaxPieces> tx_pieces_{};
    /// rx pieces: at most a ring's worth (mergeable num_buffers is bounded by it).
    std::array<iovec, 1024> rx_iov_{};
};

}  // namespace pvnet::relay
