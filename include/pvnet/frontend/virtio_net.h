// VirtioNet: the guest-side virtio-net driver (Linux drivers/net/virtio_net.c),
// a set of QueuePairs (virtnet_info's send_queue/receive_queue arrays). A
// QueuePair lays its rings and packet buffers out in guest memory, keeps the
// rx ring filled (try_fill_recv), reaps rx in a NAPI poll with a budget and
// re-arms interrupts race-free, and transmits in one of two tx modes (the
// seed's "virtio-net tx napi" thread):
//   FreeOnXmit — tx interrupts off, completions reaped at the next transmit
//                (free_old_xmit in start_xmit);
//   Napi       — tx interrupts on with the delayed enable (EVENT_IDX),
//                completions reaped in poll_tx (virtnet_poll_tx), and with
//                clean_tx_at_rx also in poll_rx (virtnet_poll_cleantx).
// xmit(Flow&, ...) charges a Flow's send credit and returns it at transmit
// (orphan) or on completion; the tx queue stops while the ring is full
// (check_sq_full_and_disable). busy_poll_rx spins before the caller sleeps.
//
// Buffers are one pool of fixed-size slots; a received buffer can be sent
// on as is (the guest's io forwarding) and returns to the pool when the tx
// completion is reaped.
//
// Large frames (64 KiB GSO): with mergeable_rx (VIRTIO_NET_F_MRG_RXBUF,
// VIRTIO 1.2 5.1.6.4) a received packet spans num_buffers slots and
// poll_rx_packets hands it over as a list of pieces (Linux
// receive_mergeable); xmit_sg sends one packet spread over several slots as
// one chain, indirect when indirect_desc (VIRTIO_F_INDIRECT_DESC) is on.
//
// The direct path (seed 002): with a DirectTx set, tx_flush, when the ring
// needs a kick and at most max_batch packets were queued since the last
// flush, asks the device to process the ring in this thread instead
// (VhostNet::process_tx_now); if it declines, it kicks as usual.
//
// With ctrl_vq, the device also has a control virtqueue (VIRTIO 1.2
// 5.1.6.5): set_coalesce sends VIRTIO_NET_CTRL_NOTF_COAL commands on it
// one at a time and waits, bounded, for the device's ack, as Linux's
// virtnet_send_command does (without its unbounded spin).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pvnet/frontend/flow.h"
#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/coalescer.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/util/assert.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::frontend {

/// Linux NAPI_POLL_WEIGHT.
inline constexpr uint32_t kNapiBudget = 64;

/// The largest packet, header included: a 64 KiB GSO frame (802.1Q
/// Ethernet, IPv6 header, 65,535 bytes of payload) behind virtio_net_hdr.
inline constexpr uint32_t kMaxPacketBytes = 12 + 18 + 40 + 65535;

/// One buffer of a received packet; the first starts with the virtio_net_hdr.
struct RxPiece {
    uint32_t buf_id = 0;
    std::byte* host = nullptr;
    uint32_t len = 0;  ///< bytes the device wrote (checked against the buffer)
};

/// One buffer of a packet to send; the first starts with the virtio_net_hdr.
struct TxPiece {
    uint32_t buf_id = 0;
    uint32_t len = 0;
};

enum class FrontendError : uint8_t {
    AreaTooSmall,
    AreaUnmapped,
    RingSetup,
    NoCtrlVq,       ///< a control command without a control virtqueue
    CtrlBusy,       ///< an earlier command timed out and is still with the device
    CtrlTimeout,    ///< the device did not use the command in time
    CtrlBroken,     ///< the control ring is broken (the device broke a ring rule)
    CtrlDeviceErr,  ///< the device acked VIRTIO_NET_ERR (or wrote no ack)
    Count
};

/// How tx completions are reaped (virtio_net's napi_tx module parameter).
enum class TxMode : uint8_t {
    FreeOnXmit,  ///< tx interrupts off; reaped at the next transmit
    Napi,        ///< tx interrupts on (delayed enable); reaped in poll_tx
};

/// What xmit(Flow&, ...) did with the buffer.
enum class XmitStatus : uint8_t {
    Ok,        ///< queued; the queue owns the buffer
    NoCredit,  ///< the flow is over its sndbuf; the caller keeps the buffer
    Stopped,   ///< the tx queue is stopped (ring full); the caller keeps the buffer
    Dropped,   ///< the ring refused it (broken); buffer freed, drop counted
};

struct VirtioNetConfig {
    uint16_t queue_pairs = 1;   ///< VIRTIO_NET_F_MQ's max_virtqueue_pairs
    uint16_t rx_size = 256;
    uint16_t tx_size = 256;
    bool event_idx = true;
    uint32_t buf_bytes = 2048;  ///< one rx buffer: virtio_net_hdr + frame
    uint32_t n_bufs = 0;        ///< 0: enough for both rings twice over
    TxMode tx_mode = TxMode::FreeOnXmit;
    bool clean_tx_at_rx = false;  ///< poll_rx reaps tx completions too (Napi mode only)
    uint32_t busy_poll_usecs = 0; ///< net.core.busy_poll: rx spin before sleeping
    /// A stopped tx queue restarts at this many free descriptors; 0 means
    /// the stop threshold (Linux's choice). Capped at tx_size.
    uint16_t tx_wake_descs = 0;
    /// VIRTIO_NET_F_MRG_RXBUF: a received packet may span several buffers.
    bool mergeable_rx = false;
    /// Slots one xmit_sg packet may span, capped at tx_size; to send
    /// kMaxPacketBytes: ceil(kMaxPacketBytes / buf_bytes). Without indirect
    /// descriptors the tx queue stops while fewer descriptors than this are
    /// free (Linux reserves 2 + MAX_SKB_FRAGS); with them a packet takes one.
    uint16_t tx_max_pieces = 1;
    /// VIRTIO_F_INDIRECT_DESC: an xmit_sg chain goes into an indirect table
    /// (laid out after the buffers, tx_max_pieces entries per tx slot).
    bool indirect_desc = false;
    bool ctrl_vq = false;       ///< VIRTIO_NET_F_CTRL_VQ: lay out a control virtqueue
    uint16_t ctrl_size = 64;    ///< its ring size (>= 4: a command takes 3 descriptors)
    uint32_t ctrl_timeout_us = 1'000'000;  ///< how long a command waits for its ack
};

using VirtioNetFds = notify::QueuePairFds;

struct VirtioNetStats {
    Counter rx_pkts, rx_bytes, tx_pkts, tx_bytes;
    Counter tx_drop_ring_full;     ///< xmit found no free descriptor
    Counter rx_drop_bad_len;       ///< used len below the header size
    Counter rx_length_errors;      ///< mergeable: num_buffers 0, too many, or buffers missing
    Counter rx_merged_pkts;        ///< mergeable: packets that spanned several buffers
    Counter rx_drop_multi_buf;     ///< such a packet reached poll_rx (single-buffer API)
    Counter napi_polls;
    Counter napi_budget_exhausted;
    Counter rx_kicks, tx_kicks;    ///< doorbells written
    Counter rx_interrupts;         ///< wakeups by the rx call fd
    Counter wait_timeouts;         ///< bounded sleeps that ended without an interrupt
    Counter refill_empty_pool;     ///< try_fill_recv stopped for lack of buffers
    // tx completion (the seed's variants)
    Counter tx_napi_polls;            ///< poll_tx runs
    Counter tx_napi_budget_exhausted; ///< poll_tx stopped at its budget
    Counter tx_interrupts;            ///< tx call fd found signalled by tx_interrupt()
    Counter tx_completions;           ///< all tx completions reaped ...
    Counter tx_completions_at_xmit;   ///< ... by free_old_xmit / start_xmit
    Counter tx_completions_napi;      ///< ... by poll_tx
    Counter tx_completions_at_rx;     ///< ... by poll_rx (clean_tx_at_rx)
    Counter tx_queue_stops;           ///< check_sq_full_and_disable stopped the queue
    Counter tx_queue_wakes;           ///< ... and a reap restarted it
    Counter tx_busy;                  ///< xmit(Flow&) refused: queue stopped
    Counter tx_no_credit;             ///< xmit(Flow&) refused: flow over sndbuf
    Counter busy_poll_hits;           ///< busy_poll_rx (usecs > 0) found packets
    Counter busy_poll_misses;         ///< ... spun its time out empty
    Counter tx_direct;                ///< tx_flush ran the device's tx instead of kicking
};

/// The direct path's hook into the device: `run(ctx)` processes the tx ring
/// in the caller's thread and returns true, or false if it cannot now (the
/// frontend then kicks). A function pointer, so this layer does not depend
/// on the backend.
struct DirectTx {
    bool (*run)(void* ctx) noexcept = nullptr;  ///< null: the direct path is off
    void* ctx = nullptr;
    uint32_t max_batch = 4;  ///< largest batch (packets since the last flush) sent directly
};

class QueuePair {
public:
    /// Lays out the rings and `n_bufs` buffers inside [base, base+bytes) of
    /// guest memory, which must lie in one region of `table` (the guest's own
    /// view). The fds must outlive the device.
    static Result<std::unique_ptr<QueuePair>, FrontendError> create(
        const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
        const VirtioNetConfig& cfg, const VirtioNetFds& fds) noexcept;

    /// Guest memory one queue pair needs (rings, padding and buffers).
    static uint64_t area_bytes(const VirtioNetConfig& cfg) noexcept;

    /// Where the rings are: what the driver programs into the device.
    const ring::SplitRingAddrs& rx_addrs() const noexcept { return rx_addrs_; }
    const ring::SplitRingAddrs& tx_addrs() const noexcept { return tx_addrs_; }

    /// Posts free buffers until the rx ring is full; kicks if the device wants.
    uint32_t try_fill_recv() noexcept;

    /// NAPI rx poll: reaps up to `budget` packets, calling
    /// `deliver(buf_id, frame_with_hdr, len)` for each; deliver returns true
    /// if it kept the buffer (it must later xmit or free_buf it).
    /// With mergeable_rx a packet in several buffers cannot be delivered
    /// this way: it is dropped (rx_drop_multi_buf); use poll_rx_packets.
    template <typename Deliver>
    uint32_t poll_rx(uint32_t budget, Deliver&& deliver) noexcept;
    /// poll_rx for packets of one or more buffers (mergeable_rx):
    /// `deliver(std::span<const RxPiece>)` gets the pieces in order and
    /// returns true if it kept all of them (each later xmit or free_buf),
    /// false to give them all back.
    template <typename Deliver>
    uint32_t poll_rx_packets(uint32_t budget, Deliver&& deliver) noexcept;

    /// net.core.busy_poll: spins on the rx ring for up to `usecs`, delivering
    /// up to `budget` packets as poll_rx does. Returns at the first non-empty
    /// reap (a hit) or 0 when the time is up (a miss). Leaves rx interrupts
    /// off: the caller re-arms with napi_complete() before sleeping.
    template <typename Deliver>
    uint32_t busy_poll_rx(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept;
    /// busy_poll_rx with the configured busy_poll_usecs.
    template <typename Deliver>
    uint32_t busy_poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
        return busy_poll_rx(budget, deliver, cfg_.busy_poll_usecs);
    }
    /// busy_poll_rx delivering as poll_rx_packets does.
    template <typename Deliver>
    uint32_t busy_poll_rx_packets(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept {
        return busy_poll(budget, deliver, usecs);
    }

    /// Queues buffer `buf_id` (hdr + frame, `len` bytes) for transmit, with
    /// no flow and no queue-stop check (the forwarding path).
    /// False (and the buffer freed, the drop counted) if the ring is full.
    bool xmit(uint32_t buf_id, uint32_t len) noexcept;
    /// start_xmit for a Flow: in FreeOnXmit mode first reaps completions;
    /// refuses (buffer kept by the caller) while the queue is stopped or the
    /// flow lacks credit (call flow.can_send first: stalls are counted there);
    /// charges the flow, releasing at once if it orphans; then stops the
    /// queue if the ring is full (check_sq_full_and_disable). The flow must
    /// outlive its buffers in flight.
    XmitStatus xmit(Flow& flow, uint32_t buf_id, uint32_t len) noexcept;
    /// xmit for one packet spread over `pieces` (1..tx_max_pieces slots,
    /// hdr first), as one descriptor chain (indirect with indirect_desc).
    /// The completion frees every slot. False: all slots freed, drop counted.
    bool xmit_sg(std::span<const TxPiece> pieces) noexcept;
    /// xmit(Flow&, ...) for such a packet: credit is charged and released for
    /// its total length; on NoCredit / Stopped the caller keeps every slot.
    XmitStatus xmit_sg(Flow& flow, std::span<const TxPiece> pieces) noexcept;
    /// Publishes queued transmits; kicks if the device wants, or, with the
    /// direct path on and at most max_batch packets queued since the last
    /// flush, has the device process them now (counted in tx_direct). In
    /// Napi mode re-arms tx interrupts with the delayed enable (3/4 of what
    /// is in flight), reaping first if that many are already used.
    void tx_flush() noexcept;
    /// Turns the direct path on (`d.run` set) or off (`DirectTx{}`).
    void set_direct_tx(DirectTx d) noexcept { direct_tx_ = d; }
    /// Reaps all tx completions into the pool, returning credit (free-on-xmit).
    uint32_t free_old_xmit() noexcept;
    /// virtnet_poll_tx: reaps up to `budget` tx completions; under budget,
    /// re-arms tx interrupts (Napi mode) and rechecks, reaping what raced in.
    /// Returns the count; `budget` means call again.
    uint32_t poll_tx(uint32_t budget) noexcept;
    /// The tx interrupt: if the tx call fd was signalled, consumes it, counts
    /// it and (Napi mode) runs poll_tx until under budget. In FreeOnXmit mode
    /// it only turns tx interrupts off again (skb_xmit_done): the next xmit
    /// reaps. Returns completions reaped.
    uint32_t tx_interrupt(uint32_t budget = kNapiBudget) noexcept;
    /// Sleeps until the tx call fd is signalled or `timeout_us` passes; does
    /// not consume (tx_interrupt does). True if signalled.
    bool wait_tx(int64_t timeout_us) const noexcept { return fds_.tx_call->wait(timeout_us); }
    /// The tx queue is stopped (netif_tx_queue_stopped).
    bool tx_stopped() const noexcept { return tx_stopped_; }
    TxMode tx_mode() const noexcept { return cfg_.tx_mode; }

    /// napi_complete: re-arm rx interrupts. False if packets are already
    /// pending (poll again instead of sleeping).
    bool napi_complete() noexcept { return rx_->enable_cb(); }
    /// Sleeps on the rx interrupt for at most `timeout_us`.
    void wait_rx(int64_t timeout_us) noexcept;
    /// Turns interrupts off on both rings (poll mode).
    void disable_interrupts() noexcept {
        rx_->disable_cb();
        tx_->disable_cb();
    }

    std::byte* buf_host(uint32_t id) const noexcept {
        return bufs_host_ + std::size_t{id} * cfg_.buf_bytes;
    }
    void free_buf(uint32_t id) noexcept {
        // Our own bug if this fails (a double free); never a peer's value.
        if (PVNET_ASSERT(id < cfg_.n_bufs && pool_top_ < cfg_.n_bufs)) pool_[pool_top_++] = id;
    }
    /// Takes a free buffer for the guest's own transmit; false if none.
    bool alloc_buf(uint32_t& id) noexcept {
        if (pool_top_ == 0) return false;
        id = pool_[--pool_top_];
        return true;
    }
    uint32_t buf_bytes() const noexcept { return cfg_.buf_bytes; }
    uint32_t free_bufs() const noexcept { return pool_top_; }
    uint32_t total_bufs() const noexcept { return cfg_.n_bufs; }

    const ring::SplitDriverQueue& rx_queue() const noexcept { return *rx_; }
    const ring::SplitDriverQueue& tx_queue() const noexcept { return *tx_; }
    const VirtioNetStats& stats() const noexcept { return stats_; }
    /// Kicks sent are stats().rx_kicks / tx_kicks; these were not needed.
    uint64_t rx_kicks_suppressed() const noexcept { return rx_->stats().kicks_suppressed.get(); }
    uint64_t tx_kicks_suppressed() const noexcept { return tx_->stats().kicks_suppressed.get(); }

private:
    static constexpr uint32_t kNoBuf = UINT32_MAX;
    /// Who owns a buffer on the tx ring: the flow to credit on completion
    /// (null if none or orphaned) and the bytes charged, on a packet's first
    /// slot; `next` links an xmit_sg packet's slots. Indexed by buffer id.
    struct TxRecord {
        Flow* flow = nullptr;
        uint32_t len = 0;
        uint32_t next = kNoBuf;
    };

    QueuePair() = default;
    /// Reaps up to `max` tx completions, counted under `where`; returns
    /// credit and buffers; restarts a stopped queue above the threshold.
    uint32_t reap_tx(uint32_t max, Counter& where) noexcept;
    /// virtnet_poll_cleantx: poll_rx's reap of the pair's tx ring (Napi only).
    void poll_cleantx() noexcept;
    /// Napi re-arm with the delayed enable; reaps while it finds work pending.
    void tx_rearm_delayed(Counter& where) noexcept;
    void check_sq_full_and_disable() noexcept;
    /// The rx reap shared by the poll functions; `sink` takes a packet's pieces.
    template <typename Sink>
    uint32_t receive(uint32_t budget, Sink& sink) noexcept;
    /// A packet sink for the single-buffer `deliver(buf_id, host, len)`.
    template <typename Deliver>
    auto single_buffer(Deliver& deliver) noexcept {
        return [this, &deliver](std::span<const RxPiece> p) noexcept {
            if (p.size() != 1) {
                stats_.rx_drop_multi_buf.add();
                return false;
            }
            return static_cast<bool>(deliver(p[0].buf_id, p[0].host, p[0].len));
        };
    }
    /// The busy-poll loop shared by busy_poll_rx and busy_poll_rx_packets.
    template <typename Sink>
    uint32_t busy_poll(uint32_t budget, Sink& sink, uint32_t usecs) noexcept;
    /// receive_mergeable: rx_pieces_[0] is a packet's first buffer; reads its
    /// num_buffers and reaps the rest. The piece count, or 0 if dropped
    /// (counted, buffers freed). Adds the bytes to `len`.
    std::size_t collect_mergeable(uint64_t& len) noexcept;
    /// xmit_sg's checks and chain: fills tx_sg_bufs_, returns the packet's
    /// length (0: the caller's bug, asserted).
    uint32_t sg_bufs(std::span<const TxPiece> pieces) noexcept;
    /// Adds one slot (add_one) or tx_sg_bufs_ for `pieces` (add_sg, linking
    /// their records) as a chain; on a full ring frees the slots, counts the drop.
    bool add_one(uint32_t buf_id, uint32_t len) noexcept;
    bool add_sg(std::span<const TxPiece> pieces) noexcept;
    /// start_xmit's flow path around `add`: reap (FreeOnXmit), stopped and
    /// credit checks, charge, orphan or record the credit on the first slot.
    template <typename Add>
    XmitStatus start_xmit(Flow& flow, uint32_t first_id, uint32_t len, Add&& add) noexcept;

    VirtioNetConfig cfg_;
    VirtioNetFds fds_;
    ring::SplitRingAddrs rx_addrs_, tx_addrs_;
    std::unique_ptr<ring::SplitDriverQueue> rx_, tx_;
    mem::GuestAddr bufs_gpa_;
    std::byte* bufs_host_ = nullptr;
    std::vector<uint32_t> pool_;  ///< free buffer ids (a stack), sized once
    uint32_t pool_top_ = 0;
    std::vector<TxRecord> tx_recs_;  ///< per buffer id, sized once
    std::vector<RxPiece> rx_pieces_;   ///< one packet's buffers: rx_size (mergeable) or 1
    std::vector<ring::Buf> tx_sg_bufs_;  ///< xmit_sg's chain, tx_max_pieces, sized once
    bool clean_tx_at_rx_ = false;     ///< cfg.clean_tx_at_rx in Napi mode
    bool tx_stopped_ = false;
    uint16_t tx_max_descs_ = 1;   ///< descriptors the largest tx chain takes
    uint16_t tx_wake_descs_ = 1;
    uint32_t tx_batch_ = 0;  ///< packets queued since the last tx_flush
    DirectTx direct_tx_;
    VirtioNetStats stats_;
};

struct VirtioNetCtrlStats {
    Counter cmds;         ///< control commands sent
    Counter cmds_failed;  ///< ... that did not come back acked OK
    Counter kicks;        ///< control queue doorbells written
};

class VirtioNet {
public:
    /// Lays out cfg.queue_pairs pairs one after another in [base, base+bytes),
    /// then (cfg.ctrl_vq) the control ring and its command buffer. `fds` has
    /// one entry per pair; `ctrl_fds` (both set with ctrl_vq) are the control
    /// queue's doorbells.
    static Result<std::unique_ptr<VirtioNet>, FrontendError> create(
        const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
        const VirtioNetConfig& cfg, std::span<const VirtioNetFds> fds,
        const notify::QueueFds& ctrl_fds = {}) noexcept;

    /// Guest memory the whole device needs.
    static uint64_t area_bytes(const VirtioNetConfig& cfg) noexcept {
        return uint64_t{cfg.queue_pairs} * QueuePair::area_bytes(cfg) + ctrl_area_bytes(cfg);
    }

    uint16_t queue_pairs() const noexcept { return static_cast<uint16_t>(pairs_.size()); }
    QueuePair& queue_pair(uint16_t i) noexcept { return *pairs_[i]; }
    const QueuePair& queue_pair(uint16_t i) const noexcept { return *pairs_[i]; }

    /// The control virtqueue, if cfg.ctrl_vq (null otherwise).
    const ring::SplitDriverQueue* ctrl_queue() const noexcept { return ctrl_.get(); }
    /// Where the control ring is, for the device (meaningful with ctrl_vq).
    const ring::SplitRingAddrs& ctrl_addrs() const noexcept { return ctrl_addrs_; }
    const VirtioNetCtrlStats& ctrl_stats() const noexcept { return ctrl_stats_; }

    /// ethtool -C: sends VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, then _TX_SET,
    /// each waiting up to cfg.ctrl_timeout_us for the device's ack. Stops at
    /// the first failure (the rx limits may then be applied, the tx not).
    Status<FrontendError> set_coalesce(notify::CoalesceParams rx,
                                       notify::CoalesceParams tx) noexcept;

private:
    /// Control ring plus one page for the command (hdr, data, ack).
    static uint64_t ctrl_area_bytes(const VirtioNetConfig& cfg) noexcept;
    /// One command, counted (virtnet_send_command).
    Status<FrontendError> send_command(uint8_t cls, uint8_t cmd,
                                       std::span<const std::byte> data) noexcept;
    /// send_command's exchange: post, kick, wait for the used entry, read the ack.
    Status<FrontendError> exchange_command(uint8_t cls, uint8_t cmd,
                                           std::span<const std::byte> data) noexcept;

    std::vector<std::unique_ptr<QueuePair>> pairs_;
    uint32_t ctrl_timeout_us_ = 0;
    notify::QueueFds ctrl_fds_;
    ring::SplitRingAddrs ctrl_addrs_;
    std::unique_ptr<ring::SplitDriverQueue> ctrl_;
    mem::GuestAddr ctrl_cmd_gpa_;
    std::byte* ctrl_cmd_host_ = nullptr;  ///< the command page, shared with the device
    VirtioNetCtrlStats ctrl_stats_;
};

template <typename Sink>
uint32_t QueuePair::receive(uint32_t budget, Sink& sink) noexcept {
    uint32_t done = 0;
    uint64_t bytes = 0;
    ring::UsedBuf u;
    RxPiece* const pieces = rx_pieces_.data();
    while (done < budget && rx_->get_used(u)) {
        const auto id = static_cast<uint32_t>(u.token);
        ++done;
        // Rule (virtio_net receive_buf): shorter than the header is a defect.
        if (u.len <= 12) {
            stats_.rx_drop_bad_len.add();
            free_buf(id);
            continue;
        }
        pieces[0] = RxPiece{id, buf_host(id), u.len};
        std::size_t n = 1;
        uint64_t len = u.len;
        if (cfg_.mergeable_rx) {
            n = collect_mergeable(len);
            if (n == 0) continue;
        }
        bytes += len;
        if (!sink(std::span<const RxPiece>(pieces, n))) {
            for (std::size_t k = 0; k < n; ++k) free_buf(pieces[k].buf_id);
        }
    }
    stats_.rx_pkts.add(done);
    stats_.rx_bytes.add(bytes);
    return done;
}

template <typename Deliver>
uint32_t QueuePair::poll_rx_packets(uint32_t budget, Deliver&& deliver) noexcept {
    stats_.napi_polls.add();
    rx_->disable_cb();
    if (clean_tx_at_rx_) poll_cleantx();
    const uint32_t done = receive(budget, deliver);
    if (done == budget) stats_.napi_budget_exhausted.add();
    return done;
}

template <typename Deliver>
uint32_t QueuePair::poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
    auto single = single_buffer(deliver);
    return poll_rx_packets(budget, single);
}

template <typename Deliver>
uint32_t QueuePair::busy_poll_rx(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept {
    auto single = single_buffer(deliver);
    return busy_poll(budget, single, usecs);
}

template <typename Sink>
uint32_t QueuePair::busy_poll(uint32_t budget, Sink& sink, uint32_t usecs) noexcept {
    // Without a spin budget this is a plain NAPI poll: nothing to count as
    // a busy-poll hit or miss.
    if (usecs == 0) return poll_rx_packets(budget, sink);
    rx_->disable_cb();
    if (clean_tx_at_rx_) poll_cleantx();
    // One clock read per empty look: a vDSO call, cheap beside the spin.
    const uint64_t deadline = monotonic_ns() + uint64_t{usecs} * 1000u;
    for (;;) {
        const uint32_t done = receive(budget, sink);
        if (done != 0) {
            stats_.busy_poll_hits.add();
            return done;
        }
        if (rx_->broken() || monotonic_ns() >= deadline) break;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    stats_.busy_poll_misses.add();
    return 0;
}

}  // namespace pvnet::frontend
