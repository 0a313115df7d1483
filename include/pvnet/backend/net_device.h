// NetDevice: the backend's virtio-net device without its ports (DESIGN.md
// layer 7) — what Linux splits between drivers/vhost/vhost.c (vrings set up
// from outside, the worker, signalling) and drivers/vhost/net.c (queue
// pairs, weights, busy polling). VhostNet<Port> (vhost_net.h) adds the
// packet loops over a concrete port.
//
// Control plane. The device is configured from outside through the
// description in device_setup.h: the feature word and the memory table
// while every vring is stopped, then each vring set up, started and
// stopped on its own (GET_VRING_BASE: stop processing, then report
// last_avail_idx), or the whole device reset. A vring starts only when it
// is complete (size, addresses, memory) and its ring passes validation.
// Control calls come from any thread; each is applied between two worker
// rounds under every worker's mutex (a worker holds its own while it works,
// never while it sleeps, and steps aside when a control call waits).
//
// Broken vrings. A ring rule broken by the guest marks that vring broken
// (sticky until reset): the device reports it once (a log line, the
// vrings_broken counter, the vring's err fd, status() NEEDS_RESET), stops
// watching its kick and, for an rx vring, its port's fd, and keeps serving
// every other vring. Whatever finds the break reports it at once through
// report_broken(): a handler's run, the worker's probes of the rings
// (rx_ready, tx_ready, ctrl_ready: after a round, while busy polling, in
// poll mode, for a port without an fd) and the direct path, which wakes the
// worker to report what its run broke. A broken vring is never probed again.
//
// Queue pairs in use (VIRTIO 1.2 multiqueue steering). With VIRTIO_NET_F_CTRL_VQ the
// driver starts on pair 0 alone and widens with VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET
// or RSS_CONFIG (max_tx_vq); without it (vhost-user: QEMU emulates the
// control queue and enables the vrings itself) every pair is in use. The
// spec forbids the device to fill receive queues beyond the pairs in use:
// the worker runs no handle_rx for them and does not watch their ports'
// rx fds; their tx is served as ever. rx_steer() holds that count and the
// guest's RSS configuration, for whatever demultiplexes frames onto the
// pairs' ports.
//
// Threads: one worker per device, or several (VhostNetOptions::workers),
// pair i served by worker i % workers — one per pair is Linux's model, where
// QEMU opens a vhost-net device, and so a worker thread, per queue pair.
// Each worker has its own epoll set and wake fd; worker 0 also serves the
// control queue. The direct path (process_tx_now) runs a pair's tx loop in
// the caller's thread under that pair's tx_mu, which guards the tx vring,
// its coalescer and signal path, tx stats and the port's send side: the
// control plane stops a tx vring under it too (stop_data_vring), and the
// worker's "waiting for the port" flag, which the direct path reads, is an
// atomic (tx_wait_writable).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/backend/device_setup.h"
#include "pvnet/backend/rx_steer.h"
#include "pvnet/notify/coalescer.h"
#include "pvnet/notify/epoll.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/port.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {

/// Linux VHOST_NET_PKT_WEIGHT and VHOST_NET_WEIGHT.
inline constexpr uint32_t kPktWeight = 256;
inline constexpr uint32_t kByteWeight = 0x80000;
/// Packets whose used entries are published (and one signal decision
/// taken) per burst.
inline constexpr uint32_t kMaxBurst = 32;
inline constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
/// The largest packet a guest that accepts GSO can be handed: the header
/// and a 64 KiB payload behind 802.1Q Ethernet and an IPv6 header.
inline constexpr uint32_t kMaxGsoPacketBytes = kHdrBytes + 18 + 40 + 65535;
/// A port that does not tell its largest frame: 1500-byte MTU, Ethernet
/// and 802.1Q headers.
inline constexpr uint32_t kDefaultMaxFrameBytes = 1500 + 14 + 4;

/// What the device implements; set_features() refuses anything else. MQ,
/// RSS and HASH_REPORT only on a device of more than one pair
/// (offered_features()). VIRTIO_F_IN_ORDER: every queue uses its chains in
/// the order popped (docs/vhost-user.md has why each path keeps it); the
/// queues check it (ring::RingError::PushOutOfOrder).
inline constexpr uint64_t kVhostNetFeatures = [] {
    using namespace virtio;
    uint64_t f = 0;
    for (const unsigned b :
         {VIRTIO_F_VERSION_1, VIRTIO_F_NOTIFY_ON_EMPTY, VIRTIO_F_ANY_LAYOUT, VIRTIO_F_IN_ORDER,
          VIRTIO_RING_F_INDIRECT_DESC, VIRTIO_RING_F_EVENT_IDX, VIRTIO_NET_F_CSUM,
          VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
          VIRTIO_NET_F_GUEST_ECN, VIRTIO_NET_F_GUEST_UFO, VIRTIO_NET_F_HOST_TSO4,
          VIRTIO_NET_F_HOST_TSO6, VIRTIO_NET_F_HOST_ECN, VIRTIO_NET_F_HOST_UFO,
          VIRTIO_NET_F_MRG_RXBUF, VIRTIO_NET_F_CTRL_VQ, VIRTIO_NET_F_NOTF_COAL, VIRTIO_NET_F_MQ,
          VIRTIO_NET_F_RSS, VIRTIO_NET_F_HASH_REPORT}) {
        f |= feature_mask(b);
    }
    return f;
}();

/// Event: sleep on eventfds between bursts (the kernel-like default).
/// Poll: spin on the rings with notifications off (DPDK's poll mode).
enum class RunMode : uint8_t { Event, Poll };

/// A handler run stops once it has moved `pkts` packets or `bytes` bytes;
/// 0 means no limit of that kind.
struct Weight {
    uint32_t pkts = kPktWeight;
    uint32_t bytes = kByteWeight;

    constexpr bool exceeded(uint32_t moved_pkts, uint64_t moved_bytes) const noexcept {
        return (pkts != 0 && moved_pkts >= pkts) || (bytes != 0 && moved_bytes >= bytes);
    }
};

/// How the device runs: host-side choices, never negotiated with the guest.
struct VhostNetOptions {
    Weight rx_weight;
    Weight tx_weight;
    RunMode mode = RunMode::Event;
    /// ethtool's rx-frames/rx-usecs: the rx queue's interrupts (the guest's
    /// receive); tx-frames/tx-usecs: the tx queue's completions. 0/0: at once.
    notify::CoalesceParams rx_coalesce;
    notify::CoalesceParams tx_coalesce;
    /// Event mode: spin this long on the rings before sleeping (vhost's
    /// busyloop_timeout); 0: sleep at once.
    uint32_t busyloop_usecs = 0;
    /// Features the device offers (a subset of kVhostNetFeatures).
    uint64_t offered_features = kVhostNetFeatures;
    /// Worker threads, pair i on worker i % workers (capped at the pairs);
    /// 0: one per pair.
    uint16_t workers = 1;
};

/// One queue pair's counters.
struct VhostNetStats {
    Counter tx_pkts, tx_bytes;  ///< taken by the port (Sent): the bytes it was handed
                                ///< (HASH_REPORT: without the hash fields)
    Counter rx_pkts, rx_bytes;  ///< delivered into guest buffers (HASH_REPORT: the
                                ///< hash fields included, as the guest got them)
    Counter tx_runs, rx_runs;                      ///< handler invocations
    Counter tx_weight_requeue, rx_weight_requeue;  ///< runs ended by a weight
    Counter tx_max_run_pkts, rx_max_run_pkts;      ///< most packets (passes) in one run
    Counter tx_kicks, rx_kicks;                    ///< wakeups by a kick
    Counter tx_calls, rx_calls;                    ///< interrupts sent
    Counter tx_signals_coalesced, rx_signals_coalesced;  ///< absorbed by coalescing
    Counter tx_signals_suppressed_event_idx,             ///< coalescer said signal, the
        rx_signals_suppressed_event_idx;                 ///< driver's EVENT_IDX/flags no
    Counter tx_coalesce_timer_fires, rx_coalesce_timer_fires;  ///< timer signalled pending
    Counter rx_ring_empty;     ///< rx stopped: no guest buffers
    Counter rx_ring_short;     ///< rx stopped: guest buffers too few for a packet of known length
    Counter rx_short_recv;     ///< mergeable rx received into fewer bytes than the largest frame
    Counter rx_merged_pkts;    ///< packets spread over several buffers (mergeable)
    Counter tx_drop_bad_chain;  ///< writable part or no header
    Counter tx_drop_port;       ///< the port rejected the packet (it counts why)
    Counter tx_retry;           ///< the port had no room: the chain went back, retried later
    Counter tx_discarded;       ///< consumed by a started but disabled tx vring: used with 0,
                                ///< never sent (vhost-user.rst "Ring states")
    Counter rx_drop_bad_chain;  ///< readable part in an rx chain
    Counter rx_drop_no_room;    ///< recv delivered nothing into the buffers given (port counts why)
    Counter rx_port_unwatched;  ///< port fd unwatched: rx stopped for lack of guest buffers
    Counter direct_runs;        ///< process_tx_now() ran the tx loop in the caller's thread
    Counter direct_pkts;        ///< ... packets it moved
    Counter direct_busy;        ///< ... found tx_mu held
    Counter tx_inflight_dropped, rx_inflight_dropped;  ///< chains a dead predecessor left
                                                       ///< in flight, returned used with 0
};

/// Device-wide counters.
struct DeviceStats {
    Counter wakeups;           ///< worker sleeps that ended
    Counter rounds;            ///< worker rounds that ran handlers
    Counter busy_poll_hits;    ///< a spin found work (no sleep, no kick needed)
    Counter busy_poll_misses;  ///< a spin ran out of budget, then slept
    Counter coalesce_updates;  ///< set_coalesce() messages and NOTF_COAL commands applied
    Counter vrings_broken;     ///< vrings marked broken (each once)
    Counter port_hangups;      ///< a port's fd reported EPOLLERR/EPOLLHUP: no longer watched
    Counter control_ops;       ///< control-plane calls applied
};

class NetDevice {
public:
    virtual ~NetDevice();
    NetDevice(const NetDevice&) = delete;
    NetDevice& operator=(const NetDevice&) = delete;

    uint16_t max_pairs() const noexcept { return static_cast<uint16_t>(pairs_.size()); }
    /// 2 per pair and the control queue.
    uint16_t num_vrings() const noexcept { return static_cast<uint16_t>(ctrl_vring(max_pairs()) + 1); }
    /// The options' offer, without MQ, RSS and HASH_REPORT on a one-pair
    /// device (HASH_REPORT goes where RSS goes: the hash is steering's).
    uint64_t offered_features() const noexcept {
        constexpr uint64_t kMulti = virtio::feature_mask(virtio::VIRTIO_NET_F_MQ) |
                                    virtio::feature_mask(virtio::VIRTIO_NET_F_RSS) |
                                    virtio::feature_mask(virtio::VIRTIO_NET_F_HASH_REPORT);
        return max_pairs() > 1 ? opt_.offered_features : opt_.offered_features & ~kMulti;
    }
    uint64_t features() const noexcept { return features_; }

    // ---- control plane (any thread) -------------------------------------

    /// The negotiated feature word; every vring stopped. Refuses bits not
    /// offered, and RSS or HASH_REPORT without CTRL_VQ (their commands need
    /// the control queue). Sets the pairs in use to their default. With
    /// HASH_REPORT the header is struct virtio_net_hdr_v1_hash both ways;
    /// the ports still see struct virtio_net_hdr (kHdrBytes): the device
    /// leaves the hash fields out of what it hands them.
    Status<DeviceError> set_features(uint64_t features) noexcept;
    /// The backend's view of guest memory (outlives its use); every vring stopped.
    Status<DeviceError> set_mem_table(const mem::MemoryTable* table) noexcept;
    /// Records vring `i`'s setup; the vring must be stopped.
    Status<DeviceError> set_vring(uint16_t i, const VringSetup& s) noexcept;
    /// A new call fd for a vring, running or not (vhost-user SET_VRING_CALL).
    Status<DeviceError> set_vring_call(uint16_t i, const notify::EventFd* call) noexcept;
    /// A tx vring, running or not, enabled or disabled (vhost-user SET_VRING_ENABLE):
    /// a started but disabled one consumes its chains and discards them (used
    /// with length 0, tx_discarded), as vhost-user.rst's ring states want.
    Status<DeviceError> set_tx_vring_enabled(uint16_t i, bool enabled) noexcept;
    /// Maps and validates the ring from its setup and the memory table, then
    /// serves it from its base. BadRing: vring_error(i) tells why.
    Status<DeviceError> start_vring(uint16_t i) noexcept;
    /// Stops serving the vring (pending interrupts are sent first) and
    /// returns where it stands. A vring never started reports its setup's base.
    Result<VringBase, DeviceError> stop_vring(uint16_t i) noexcept;
    /// Features, memory and every vring from `s`, then starts each enabled
    /// vring. Every vring must be stopped; on error nothing is started.
    Status<DeviceError> configure(const DeviceSetup& s) noexcept;
    /// Stops every vring and forgets features, memory, setups, breakage and
    /// the guest's steering (every pair in use, no RSS). The session is over:
    /// each port drops what it holds for the guest (port::HasSession), so the
    /// next session, perhaps another guest's, starts from nothing.
    void reset() noexcept;

    /// Queries from any thread (under the workers' mutexes, between rounds).
    bool vring_started(uint16_t i) const noexcept;
    bool vring_broken(uint16_t i) const noexcept;
    /// Why vring i broke or was refused at start (RingError::Count: neither).
    ring::RingError vring_error(uint16_t i) const noexcept;
    /// VIRTIO_CONFIG_S_NEEDS_RESET once any vring broke, else 0.
    uint8_t status() const noexcept {
        return needs_reset_.load(std::memory_order_relaxed) ? virtio::VIRTIO_CONFIG_S_NEEDS_RESET
                                                            : uint8_t{0};
    }

    /// Starts the worker threads (worker w pinned to CPU (cpu + w) % CPUs if
    /// cpu >= 0).
    void start(int cpu = -1);
    /// Stops and joins the workers.
    void stop() noexcept;
    uint16_t workers() const noexcept { return static_cast<uint16_t>(workers_.size()); }
    /// The worker serving `pair`.
    uint16_t worker_of(uint16_t pair) const noexcept { return pairs_[pair]->worker; }
    std::thread::native_handle_type native_handle(uint16_t worker = 0) noexcept {
        return workers_[worker]->thread.native_handle();
    }

    // ---- the handlers, callable directly when no worker runs (tests) -----

    void handle_tx(uint16_t pair = 0) noexcept;
    void handle_rx(uint16_t pair = 0) noexcept;
    void handle_ctrl() noexcept;
    void handle_tx_timer(uint16_t pair = 0) noexcept;
    void handle_rx_timer(uint16_t pair = 0) noexcept;
    /// The direct path: runs the pair's tx loop now, in the caller's thread,
    /// if its tx_mu is free (try-lock only). False if it is held (counted in
    /// direct_busy) or the tx vring is not running: the caller kicks as
    /// usual. Past the tx weight, the rest goes to the worker through the tx
    /// kick. Callable while the worker runs, from one thread per pair.
    bool process_tx_now(uint16_t pair = 0) noexcept;

    /// New coalescing limits for every pair (VIRTIO_NET_CTRL_NOTF_COAL_RX_SET /
    /// _TX_SET), from any thread: handed to the worker as a message, applied
    /// at the top of its loop. Entries pending under the old limits are
    /// signalled then.
    void set_coalesce(notify::CoalesceParams rx, notify::CoalesceParams tx) noexcept;

    // ---- what the device did ----------------------------------------------

    const VhostNetStats& stats(uint16_t pair = 0) const noexcept { return pairs_[pair]->stats; }
    const DeviceStats& device_stats() const noexcept { return dstats_; }
    /// The pairs in use and the guest's RSS configuration (any thread).
    const RxSteer& rx_steer() const noexcept { return *rx_steer_; }
    /// A started vring's queue (valid until the vring is stopped).
    const ring::SplitDeviceQueue& rx_queue(uint16_t pair = 0) const noexcept {
        return *pairs_[pair]->rx.q;
    }
    const ring::SplitDeviceQueue& tx_queue(uint16_t pair = 0) const noexcept {
        return *pairs_[pair]->tx.q;
    }
    /// The control queue while its vring runs, else null.
    const CtrlQueue* ctrl_queue() const noexcept { return ctrl_.get(); }
    /// Read their stats only (rx's owned by the worker, tx's by tx_mu).
    const notify::Coalescer& rx_coalescer(uint16_t pair = 0) const noexcept {
        return *pairs_[pair]->rx.co;
    }
    const notify::Coalescer& tx_coalescer(uint16_t pair = 0) const noexcept {
        return *pairs_[pair]->tx.co;
    }
    /// Work the handlers queued for themselves (kTxWork | kRxWork).
    uint32_t pending_work(uint16_t pair = 0) const noexcept { return pairs_[pair]->pending; }

    static constexpr uint32_t kTxWork = 1;
    static constexpr uint32_t kRxWork = 2;

protected:
    /// A chain's pieces without the hash fields (cut_hash_fields).
    using CutIov = std::array<iovec, ring::kMaxIov + 1>;
    /// Mergeable rx: the chains (head, bytes, pieces) and pieces one packet
    /// fills. The first `held` chains (`held_iov` pieces, `held_bytes`) were
    /// popped and validated for an earlier packet of this run and not used:
    /// the next packet starts with them, and the run's end gives them back
    /// (release_rx_bufs). Held chains are always the last ones popped, so
    /// unpop returns exactly them.
    struct RxBufs {
        std::array<ring::UsedElem, ring::kMaxIov> heads;
        std::array<uint16_t, ring::kMaxIov> head_iovs;  ///< pieces of heads[k]
        std::array<iovec, ring::kMaxIov> iov;
        uint16_t held = 0;
        std::size_t held_iov = 0;
        uint64_t held_bytes = 0;
    };
    /// handle_tx for a port with send_batch: the burst's packets staged for
    /// one call, in pop order (the last `n` chains popped), each frame's
    /// pieces copied from its chain into `iov`.
    struct TxBatch {
        std::array<port::TxFrame, kMaxBurst> frames;
        std::array<uint16_t, kMaxBurst> heads;
        std::array<uint32_t, kMaxBurst> chain_bytes;  ///< out_bytes, what the weight counted
        std::array<iovec, 2 * (ring::kMaxIov + 1)> iov;  ///< room for any one chain's cut
        uint32_t n = 0;
        std::size_t niov = 0;
    };
    /// One vring of a pair: its setup, its queue while started, its
    /// interrupt path.
    struct Vring {
        VringSetup setup;
        bool configured = false;                ///< set_vring() called since reset
        std::unique_ptr<ring::SplitDeviceQueue> q;  ///< non-null while started
        std::unique_ptr<notify::Coalescer> co;
        bool reported = false;  ///< breakage reported (once)
        ring::RingError error = ring::RingError::Count;
        Counter* calls = nullptr;
        Counter* coalesced = nullptr;
        Counter* suppressed = nullptr;
        Counter* timer_fires = nullptr;
        bool running() const noexcept { return q != nullptr && !q->broken(); }
    };
    /// The fds a port offers the worker's epoll (-1: none).
    struct PortFds {
        int rx_fd = -1;
        int tx_fd = -1;
    };
    struct Pair {
        uint16_t index = 0;
        uint16_t worker = 0;  ///< the worker serving this pair
        Vring rx, tx;
        VhostNetStats stats;
        std::mutex tx_mu;  ///< see the file comment
        std::unique_ptr<ring::DescChain> rx_chain;
        std::unique_ptr<ring::DescChain> tx_chain;
        std::unique_ptr<RxBufs> rx_bufs;  ///< mergeable rx only
        std::unique_ptr<TxBatch> tx_batch;  ///< ports with send_batch only; under tx_mu
        std::unique_ptr<CutIov> rx_cut;   ///< HASH_REPORT only: the worker's
        std::unique_ptr<CutIov> tx_cut;   ///< HASH_REPORT only: under tx_mu
        PortFds port;
        /// hdr + the largest frame the port can hand over without GSO.
        uint32_t rx_max_frame = kHdrBytes + kDefaultMaxFrameBytes;
        uint16_t rx_short_pending = 0;  ///< chains pending when rx came up short
        bool port_want_rx = true;       ///< false while rx waits for guest buffers
        /// A send said Retry: the worker waits for EPOLLOUT. Set under tx_mu
        /// (in the worker's run), cleared by the worker and the control plane
        /// outside it, read by the direct path under it: relaxed, as a stale
        /// true only sends the direct path's caller to the kick.
        std::atomic<bool> tx_wait_writable{false};
        bool port_dead = false;         ///< the port's fd reported an error or hang-up
        uint32_t rx_reg_events = 0;     ///< what port.rx_fd is registered for (0: not)
        uint32_t tx_reg_events = 0;     ///< ... port.tx_fd, when it is another fd
        uint32_t pending = 0;           ///< worker-owned work list (kTxWork | kRxWork)
    };

    NetDevice(const VhostNetOptions& opt) noexcept : opt_(opt) {}
    /// Builds the pairs (one per entry of `ports`), coalescers, epoll and wake
    /// fd; with `tx_batch` (the ports have send_batch) each pair's TxBatch.
    Status<DeviceError> init(std::span<const PortFds> ports, std::span<const uint32_t> max_frames,
                             bool tx_batch) noexcept;

    /// The packet loops, over the concrete port (vhost_net.h). Called with
    /// the pair's worker mutex held (or by process_tx_now without it); run_tx
    /// under tx_mu.
    virtual uint32_t run_tx(Pair& p, bool direct) noexcept = 0;
    virtual void run_rx(Pair& p) noexcept = 0;
    virtual bool port_rx_pending(Pair& p) noexcept = 0;
    /// Hands the negotiated features to every port (port::HasGuestFeatures).
    virtual bool apply_port_features(uint64_t features) noexcept = 0;
    /// A session starts on the pair's port (its rx vring started) or ends
    /// (reset): port::HasSession. Called under every worker's mutex.
    virtual void port_session(Pair& p, bool start) noexcept = 0;

    // ---- helpers of the packet loops ---------------------------------------

    /// `n` used entries were just published on v: coalescer, then the driver.
    void signal(Vring& v, uint32_t n) noexcept;
    /// The coalescer said signal: the driver's suppression decides.
    void raise(Vring& v) noexcept;
    /// The rx vring runs, the port lives, and the pair is in use.
    bool rx_serving(const Pair& p) const noexcept {
        return p.rx.running() && !p.port_dead && p.index < rx_active_pairs_;
    }
    /// Event mode: watch the pair's port for frames (`on`) or not (rx is
    /// out of guest buffers: vhost_net_disable_vq).
    void watch_port_rx(Pair& p, bool on) noexcept;
    /// A send said Retry: wait for the port to become writable (EPOLLOUT),
    /// or, for a port without a tx fd, retry on the next round.
    void wait_port_writable(Pair& p) noexcept;
    /// Hdr+frame bytes mergeable rx gathers for a packet of unknown length.
    uint32_t rx_need_bytes(const Pair& p) const noexcept {
        return (rx_gso_ ? kMaxGsoPacketBytes : p.rx_max_frame) + hdr_extra_;
    }
    /// HASH_REPORT: `chain` (a guest buffer, virtio_net_hdr_v1_hash first)
    /// as the port sees it, without the hash fields, into `out`. The pieces,
    /// or 0 if the chain is shorter than the header (the port then has no
    /// room: a drop).
    static std::size_t cut_hash_fields(std::span<const iovec> chain, CutIov& out) noexcept;
    /// HASH_REPORT, after the port wrote `port_len` bytes (virtio_net_hdr and
    /// frame) into the cut of `chain`: hashes a copy of the frame's head as
    /// the steering does (rx_steer().steer, arrival `p`) and writes
    /// hash_value and hash_report (NONE when nothing was hashed) into the
    /// chain. Returns the chain's length: port_len + the hash fields, or
    /// port_len below a header (nothing written).
    uint32_t report_hash(const Pair& p, std::span<const iovec> chain,
                         uint32_t port_len) const noexcept;
    /// get_rx_bufs: takes the held chains, then pops single-buffer chains
    /// until they hold `need` bytes or kMaxIov pieces. Ok: gathered (nheads chains, niov pieces, `room`
    /// bytes; room < need when the ring ran dry first or, `at_iov_limit`,
    /// the next chain would pass kMaxIov pieces), or a bad chain met and all
    /// nheads returned used with 0 (niov 0); Empty: nothing available; Broken.
    ring::PopStatus get_rx_bufs(Pair& p, uint32_t need, uint16_t& nheads, std::size_t& niov,
                                uint64_t& room, bool& at_iov_limit) noexcept;
    /// After recv wrote `len` bytes into the gathered chains: keeps the
    /// unfilled ones for the run's next packet (held), writes num_buffers,
    /// stages the used entries. Returns the used entries staged.
    uint32_t finish_mergeable(Pair& p, uint16_t nheads, std::size_t niov, uint32_t len) noexcept;
    /// The gathered chains [first, nheads) become the held ones.
    void hold_rx_bufs(Pair& p, uint16_t first, uint16_t nheads, std::size_t niov) noexcept;
    /// A run ends: the held chains go back to the ring, unused.
    void release_rx_bufs(Pair& p) noexcept;
    /// A run moved `pkts` packets of `bytes` in `passes` weight units.
    static void account_run(uint32_t pkts, uint64_t bytes, uint32_t passes, Counter& pkts_ctr,
                            Counter& bytes_ctr, Counter& max_run) noexcept {
        pkts_ctr.add(pkts);
        bytes_ctr.add(bytes);
        if (passes > max_run.get()) max_run.add(passes - max_run.get());
    }

    const VhostNetOptions opt_;
    bool mergeable_rx_ = false;  ///< VIRTIO_NET_F_MRG_RXBUF (hoisted from features_)
    bool rx_gso_ = false;        ///< GUEST_TSO4/6 or GUEST_UFO: 64 KiB frames may arrive
    bool hash_report_ = false;   ///< VIRTIO_NET_F_HASH_REPORT: virtio_net_hdr_v1_hash
    uint32_t hdr_extra_ = 0;     ///< the hash fields' bytes with HASH_REPORT, else 0
    uint16_t rx_active_pairs_ = 1;  ///< rx_steer_'s active_pairs(), the worker's copy

private:
    /// epoll tags: the pair index above kTagShift, the source below.
    enum Tag : uint32_t {
        kTagWake = 0,
        kTagTxKick,
        kTagRxKick,
        kTagPort,
        kTagTxTimer,
        kTagRxTimer,
        kTagCtrlKick,
    };
    static constexpr uint32_t kTagShift = 8;
    static constexpr uint32_t tag(uint16_t pair, Tag t) noexcept {
        return (uint32_t{pair} << kTagShift) | t;
    }
    /// set_coalesce()'s mailbox: the fields, then a release bump of epoch.
    struct CoalesceMsg {
        std::atomic<uint32_t> rx_frames{0}, rx_usecs{0}, tx_frames{0}, tx_usecs{0};
        std::atomic<uint64_t> epoch{0};
    };
    /// One worker thread and what it owns.
    struct Worker {
        uint16_t index = 0;
        std::mutex mu;  ///< held per round; control calls take every worker's
        std::optional<notify::EventFd> wake;  ///< stop(), control calls, messages
        std::optional<notify::Epoll> epoll;
        std::thread thread;
        std::vector<Pair*> pairs;          ///< served by this worker
        std::vector<uint32_t> round_work;  ///< run_work's snapshot, one per pair
        uint64_t coalesce_epoch = 0;       ///< last set_coalesce() epoch applied
    };
    /// Every worker's mutex, in worker order (the one lock order).
    using ControlLock = std::vector<std::unique_lock<std::mutex>>;
    /// A control call in progress: the workers step aside, then their mutexes.
    ControlLock lock_control() noexcept;
    /// The queries' lock: as lock_control, without counting or waking (a
    /// sleeping worker does not hold its mutex).
    ControlLock lock_query() const noexcept;
    /// Another worker's mutex, taken by worker 0's control queue (a NOTF_COAL
    /// command reaches every pair): higher-numbered only, as lock_control orders them.
    std::unique_lock<std::mutex> lock_worker(Worker& w) noexcept;
    /// Device-wide counters written by the workers: a plain add with one
    /// worker, an atomic one with several.
    void count(Counter& c) noexcept {
        if (workers_.size() > 1) {
            c.add_shared();
        } else {
            c.add();
        }
    }
    Worker& worker_of_tag(uint32_t t) noexcept;
    Vring* vring_at(uint16_t i) noexcept;
    const Vring* vring_at(uint16_t i) const noexcept;
    bool all_stopped() const noexcept;
    Status<DeviceError> start_locked(uint16_t i) noexcept;
    VringBase stop_locked(uint16_t i) noexcept;
    void stop_data_vring(Pair& p, Vring& v, bool is_tx) noexcept;
    void hoist_features() noexcept;
    /// Features refused whatever the vrings: not offered, or RSS or
    /// HASH_REPORT without CTRL_VQ.
    bool features_ok(uint64_t features) const noexcept;
    /// rx_steer_'s pairs in use changed: rx of the pairs now out of use
    /// stops (their port fds unwatched), of those now in use resumes.
    /// sync_active_pairs from the control queue (worker 0): takes the other
    /// workers' mutexes first.
    void ctrl_sync_active_pairs() noexcept;
    void sync_active_pairs() noexcept;
    /// The one report of a broken vring (data or control), whoever found the
    /// break: once (`reported`), `error` set, a log line, vrings_broken, the
    /// err fd, NEEDS_RESET, and its kick (epoll tag `kick_tag`) out of the
    /// wait. False if `q` is not broken or was reported already.
    bool report_broken(uint16_t index, const ring::SplitDeviceQueue& q, const VringSetup& s,
                       uint32_t kick_tag, bool& reported, ring::RingError& error) noexcept;
    /// report_broken for the pair's vrings, then stops watching what a
    /// broken one owns (its port fd, its place in the work list).
    void check_broken(Pair& p) noexcept;
    void check_ctrl_broken() noexcept;
    /// The worker's probes (one acquire load of avail.idx each): work for a
    /// handler run. A break the probe finds is reported here (check_broken);
    /// a broken ring is not probed.
    /// rx: running, serving, and more chains than the last run found too few
    /// for a packet.
    bool rx_ready(Pair& p) noexcept;
    /// tx: running, not waiting for the port, and tx_mu free (else the
    /// direct path is serving it, and hands the rest over as a kick).
    bool tx_ready(Pair& p) noexcept;
    bool ctrl_ready() noexcept;

    void worker(Worker& w) noexcept;
    /// One round's handlers, in vhost's FIFO order; w.mu held.
    void run_work(Worker& w) noexcept;
    /// Collects ready event sources (timeout 0: without blocking); `lock`
    /// is released while the wait blocks.
    void wait_for_work(Worker& w, std::unique_lock<std::mutex>& lock, int timeout_ms) noexcept;
    void on_event(Worker& w, uint32_t t, uint32_t events) noexcept;
    bool busy_poll(Worker& w) noexcept;
    void take_coalesce_msg(Worker& w) noexcept;
    /// The one place limits change: the mailbox (each worker, its own pairs)
    /// and the control queue (worker 0, every worker's pairs).
    void apply_coalesce(Worker& w, std::optional<notify::CoalesceParams> rx,
                        std::optional<notify::CoalesceParams> tx) noexcept;
    void apply_coalesce_pairs(const Worker& w, std::optional<notify::CoalesceParams> rx,
                              std::optional<notify::CoalesceParams> tx) noexcept;
    void handle_timer(Vring& v) noexcept;
    void do_tx(Pair& p) noexcept;
    void do_rx(Pair& p) noexcept;
    void do_ctrl() noexcept;
    /// Registers / removes `fd` in the epoll set of the worker tag `t` belongs to.
    void epoll_watch(int fd, uint32_t t, uint32_t events) noexcept;
    void epoll_forget(int fd, uint32_t t) noexcept;
    /// Registers the pair's port fds for what rx and tx want now (one
    /// registration when rx and tx share the fd, as a tap's do).
    void sync_port_watch(Pair& p) noexcept;
    void port_hangup(Pair& p) noexcept;

    std::vector<std::unique_ptr<Pair>> pairs_;
    std::vector<std::unique_ptr<Worker>> workers_;
    uint64_t features_ = 0;
    const mem::MemoryTable* mem_ = nullptr;
    VringSetup ctrl_setup_;
    bool ctrl_configured_ = false;
    bool ctrl_reported_ = false;
    ring::RingError ctrl_error_ = ring::RingError::Count;
    std::unique_ptr<CtrlQueue> ctrl_;  ///< non-null while the control vring runs
    bool ctrl_pending_ = false;
    std::atomic<bool> needs_reset_{false};
    std::optional<RxSteer> rx_steer_;  ///< written by control calls and do_ctrl

    /// Control calls (and worker 0 reaching another worker) waiting for a
    /// worker's mutex: every worker steps aside while it is not 0.
    mutable std::atomic<uint32_t> ctl_waiting_{0};
    std::atomic<bool> stop_{false};
    DeviceStats dstats_;
    CoalesceMsg coalesce_msg_;
    std::mutex coalesce_mu_;  ///< orders concurrent setters (control plane only)
};

}  // namespace pvnet::backend
