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
//
// Queues (issue 12): with queues = N > 1 both taps are IFF_MULTI_QUEUE with
// N queues each, the device has N queue pairs, and pair i joins tap A's
// queue i to tap B's queue i: guest thread i serves frontend pair i and
// tap A queue i, the backend's one worker serves every pair, pair i on tap
// B queue i. tun spreads the flows over its queues (tun_automq_select_queue:
// by flow hash, or the queue a flow's last frame was written on), so a
// flow stays on one pair both ways.
//
// XPS (issue 12, seed 003): with `xps` on, guest thread i still reads tap A
// queue i, but each frame's tx pair is picked in netdev_pick_tx's order by
// the device's Xps (VirtioNet::xps): the flow's recorded rx queue through
// xps_rxqs, else the thread's CPU through xps_cpus, else the flow hash. The
// flow's rx queue is recorded when its frames come off an rx ring
// (FlowRxQueueTable, the symmetric flow hash). A thread sending on another
// pair takes that pair's tx lock (HARD_TX_LOCK) and copies the frame into
// that pair's buffers (its own buffers return to its own pool); the pools are
// then shared (VirtioNetConfig::shared_pool). The copy is a cost the kernel
// does not pay (an skb goes to any queue); it is counted (xps_copied).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/frontend/flow_table.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/frontend/xps.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"
#include "pvnet/vhost_user/frontend.h"

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
    uint16_t workers = 1;         ///< backend workers (VhostNetOptions::workers; 0: one per pair)
    bool direct = false;          ///< the direct path
    uint32_t direct_max = 4;      ///< ... for batches of at most this many packets
    /// After a direct transmit the guest spins on rx this long for the
    /// answer (0: only busy_poll_usecs applies).
    uint32_t direct_spin_usecs = 0;
    /// Queue pairs, 1..kMaxRelayQueues; more than one: both taps multi-queue.
    uint16_t queues = 1;
    /// Guest thread i runs on (guest_cpu + i) mod the online CPUs, the
    /// worker on backend_cpu (-1: any).
    int guest_cpu = -1, backend_cpu = -1;
    /// Pick each frame's tx pair by XPS (above); off: thread i sends on pair i.
    bool xps = false;
    /// With xps: sysfs masks per tx queue, applied over the defaults
    /// (xps_cpus as virtnet_set_affinity sets them, xps_rxqs empty), then
    /// `symmetric` (rx queue i → tx queue i in xps_rxqs).
    std::vector<std::pair<uint16_t, std::string>> xps_cpus, xps_rxqs;
    bool symmetric = false;
    /// Two processes (issue 14, seed 002's shape): tap B and the backend are
    /// `pvnet serve --tap B` behind this vhost-user socket, and this process
    /// is the guest alone (host_tap, the backend knobs and the direct path
    /// are the other process's). One queue pair; the coalescing asked for
    /// (rx/tx_coalesce) goes over serve's control queue where it offers one
    /// (serve --ctrl-vq); offloads only if serve offers them.
    std::string vhost_user;
    bool vhost_user_server = false;  ///< listen on the socket (serve --client connects)
};

inline constexpr uint16_t kMaxRelayQueues = 16;

/// One queue pair's share of RingRelayCounters (the same meanings).
struct RingRelayQueueCounters {
    uint64_t a_to_b_pkts = 0, a_to_b_bytes = 0;
    uint64_t b_to_a_pkts = 0, b_to_a_bytes = 0;
    uint64_t kicks = 0, interrupts = 0;
    uint64_t a_read = 0, b_read = 0;  ///< frames read from this queue of tap A / tap B
    uint64_t napi_polls = 0;      ///< the guest's rx NAPI polls of this pair
    uint64_t tx_completions = 0;  ///< tx completions the guest reaped on this pair
};

/// One guest thread's XPS outcomes (with xps on).
struct RingRelayThreadCounters {
    std::vector<uint64_t> txq_used;  ///< frames it sent on each tx queue
    uint64_t by_rxqs = 0, by_cpus = 0, by_hash = 0;  ///< the rule that picked
    uint64_t rxq_mismatch = 0;  ///< frames of a flow with a recorded rx queue sent on another
    uint64_t copied = 0;        ///< frames copied into another pair's buffers
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
    /// With vhost_user: the backend's counters are the serve process's (the
    /// backend and tap B fields above are then the guest's view or 0).
    bool remote_backend = false;
    uint64_t backend_losses = 0, backend_reconnects = 0;

    // Accounting, per direction (frames in = frames out + drops by reason).
    // After stop() the rings are drained (bounded): both in-flight counts
    // are then 0 unless the drain timed out.
    // Guest to host: tap A read → tx ring → backend → tap B written.
    uint64_t a_read = 0;            ///< frames read from tap A (its rx_pkts)
    uint64_t a_read_drops = 0;      ///< ... read and dropped by tap A (rx_drops())
    uint64_t g2h_queued = 0;        ///< chains the guest queued on tx (frontend tx_pkts)
    uint64_t g2h_ring_full = 0;     ///< ... refused, no descriptor (tx_drop_ring_full)
    uint64_t g2h_lost = 0;          ///< ... refused otherwise (queue stopped)
    uint64_t g2h_bad_chain = 0;     ///< consumed by the backend, dropped as a bad chain
    uint64_t g2h_port_drops = 0;    ///< ... rejected by tap B (backend tx_drop_port)
    uint64_t g2h_in_flight = 0;     ///< queued, not yet consumed by the backend
    uint64_t b_written = 0;         ///< tap B tx_pkts (= a_to_b_pkts)
    uint64_t b_write_drops = 0;     ///< tap B tx_drops()
    uint64_t b_write_retry = 0;     ///< tap B tx_retry (not drops: offered again)
    uint64_t g2h_retry = 0;         ///< backend tx_retry
    // Host to guest: tap B read → backend → rx ring → guest → tap A written.
    uint64_t b_read = 0;            ///< frames read from tap B (its rx_pkts)
    uint64_t b_read_drops = 0;      ///< ... read and dropped by tap B (rx_drops())
    uint64_t h2g_delivered = 0;     ///< backend rx_pkts: into guest buffers
    uint64_t h2g_no_room = 0;       ///< backend rx_drop_no_room
    uint64_t h2g_bad_chain = 0;     ///< backend rx_drop_bad_chain (chains, not frames)
    uint64_t h2g_in_flight = 0;     ///< delivered, not yet reaped by the guest
    uint64_t h2g_bad_len = 0;       ///< guest: used entries shorter than a header
    uint64_t h2g_length_errors = 0; ///< guest: bad num_buffers
    uint64_t h2g_lost = 0;          ///< guest: more pieces than it can write at once
    uint64_t a_written = 0;         ///< tap A tx_pkts
    uint64_t a_write_drops = 0;     ///< tap A tx_drops()
    uint64_t a_full = 0;            ///< tap A had no room (Retry): a counted drop

    /// Per queue pair, pair i at [i]; the totals above are their sums.
    std::vector<RingRelayQueueCounters> queues;
    /// Per guest thread (thread i reads tap A queue i), with xps on; else empty.
    std::vector<RingRelayThreadCounters> threads;
};

class RingRelay {
public:
    static Result<std::unique_ptr<RingRelay>, std::string> create(const RingRelayConfig& cfg);
    ~RingRelay() { stop(); }

    /// Starts the worker and the guest threads; the guest asks for the
    /// configured coalescing first.
    Status<std::string> start();
    /// Stops and joins every thread (idempotent). First each guest thread
    /// stops reading its tap A queue and waits (at most kDrainMs) until the
    /// backend has consumed every chain it queued on its pair; after the
    /// worker stopped, what it left on each pair's rx used ring is written
    /// to that pair's tap A queue.
    void stop() noexcept;
    static constexpr int kDrainMs = 1000;
    /// From any thread while the relay runs (the relay command's stats
    /// loop): it reads only Counters and relaxed atomics (the queues'
    /// broken(), the device's status()).
    RingRelayCounters counters() const;

    uint16_t queues() const noexcept { return static_cast<uint16_t>(queues_.size()); }
    /// A sysfs write at run time: tx queue `txq`'s xps_rxqs (`rxqs`) or
    /// xps_cpus mask, from any thread while the relay runs (the next burst
    /// of each guest thread sees it). The error text, or nullopt. Needs xps.
    std::optional<std::string> set_xps_mask(bool rxqs, uint16_t txq, std::string_view mask);
    /// What counters() reads. While the relay runs, guest thread i owns
    /// guest(i) and tap_a(i), the worker backend() and every tap_b(i):
    /// other threads may read their Counter stats and broken() only.
    const frontend::QueuePair& guest(uint16_t i = 0) const noexcept {
        return tb_.fe().queue_pair(i);
    }
    /// The in-process backend (not with vhost_user).
    const backend::VhostNet<port::TapPort>& backend() const noexcept { return *dev_; }
    const port::TapPort& tap_a(uint16_t i = 0) const noexcept { return *queues_[i]->tap_a; }
    const port::TapPort& tap_b(uint16_t i = 0) const noexcept { return *tap_b_[i]; }

private:
    /// Guest buffer slots: a page each, hdr + frame (mergeable on rx).
    static constexpr uint32_t kSlotBytes = 4096;
    static constexpr uint32_t kMaxPieces =
        (frontend::kMaxPacketBytes + kSlotBytes - 1) / kSlotBytes;

    /// Queue pair `index` as its guest thread sees it: tap A's queue, the
    /// thread's scratch and its counters (written by that thread only).
    struct GuestQueue {
        RingRelay* relay = nullptr;
        uint16_t index = 0;
        std::unique_ptr<port::TapPort> tap_a;
        /// Tap A's kernel does its own socket accounting; the relay's one
        /// flow per queue never waits for credit, it only gives xmit its
        /// queue-stop logic.
        std::unique_ptr<frontend::Flow> flow;
        std::thread thread;
        Counter gso_tx, gso_rx;  ///< GSO frames read from / written to tap A
        Counter lost;            ///< frames read from tap A that the queue refused
        Counter lost_rx;         ///< rx packets of more pieces than rx_iov holds
        Counter max_tx_frame;    ///< largest frame read from tap A
        Counter tap_a_full;      ///< frames for tap A it had no room for (Retry)
        Counter xps_copied;      ///< frames sent on another pair (copied into its buffers)
        bool tap_a_gone = false; ///< tap A's fd reported an error
        /// HARD_TX_LOCK of this pair's send queue, with xps: any guest thread
        /// may send on it. Its pool has its own lock (shared_pool).
        std::mutex tx_lock;
        std::unique_ptr<frontend::XpsThreadStats> xps_stats;  ///< with xps
        std::array<uint32_t, kMaxPieces> tx_ids{};
        std::array<iovec, kMaxPieces> tx_iov{};
        std::array<frontend::TxPiece, kMaxPieces> tx_pieces{};
        /// rx pieces: at most a ring's worth (mergeable num_buffers is bounded by it).
        std::array<iovec, 1024> rx_iov{};
    };

    RingRelay() = default;
    void guest_loop(GuestQueue& q) noexcept;
    /// Tap A → tx ring, up to a NAPI budget; returns packets queued.
    uint32_t guest_xmit(GuestQueue& q) noexcept;
    /// The same with xps: each frame to the pair Xps picks. `direct` is set
    /// if a flush ran the device's tx in this thread.
    uint32_t guest_xmit_xps(GuestQueue& q, bool& direct) noexcept;
    /// Reads one frame from tap A into `q.tx_ids`; its length (0: none, or
    /// the pool had no room) and the slots it filled in `used`.
    uint32_t read_tap_a(GuestQueue& q, frontend::QueuePair& qp, uint32_t& used) noexcept;
    /// Sends the frame in q.tx_ids[0, used) (length `len`) on `qp`, counting
    /// what xmit_sg refused; true if queued.
    bool send_frame(GuestQueue& q, frontend::QueuePair& qp, uint32_t used, uint32_t len) noexcept;
    /// One received packet into tap A (the rx NAPI sink).
    bool deliver_rx(GuestQueue& q, std::span<const frontend::RxPiece> pieces) noexcept;
    /// Chains queued on pair i's tx the backend has not consumed (with
    /// vhost_user: not yet reaped as completed).
    uint64_t tx_in_flight(uint16_t i) const noexcept;
    bool any_broken() const noexcept;
    bool remote() const noexcept { return vu_ != nullptr; }

    RingRelayConfig cfg_;
    pair::GuestPair tb_;
    std::vector<std::unique_ptr<GuestQueue>> queues_;
    std::vector<std::unique_ptr<port::TapPort>> tap_b_;
    std::unique_ptr<backend::VhostNet<port::TapPort>> dev_;
    std::unique_ptr<vhost_user::Frontend> vu_;  ///< with vhost_user, instead of dev_
    std::unique_ptr<vhost_user::Reconnector> reconnector_;
    Counter vu_losses_, vu_reconnects_;
    bool remote_ctrl_ = false;  ///< serve offered its control queue (--ctrl-vq)
    frontend::FlowRxQueueTable flows_;  ///< with xps: each flow's last rx queue
    std::atomic<bool> stop_{false};
    std::atomic<bool> draining_{false};  ///< stop(): no more reads from tap A
    bool started_ = false;
    uint32_t max_pieces_ = 1;
};

}  // namespace pvnet::relay
