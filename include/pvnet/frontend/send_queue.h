// SendQueue: one tx virtqueue of the guest's virtio-net (Linux
// drivers/net/virtio_net.c struct send_queue): start_xmit / xmit_skb,
// free_old_xmit, check_sq_full_and_disable, virtnet_poll_tx,
// virtnet_poll_cleantx and skb_xmit_done, in one of two tx modes (the
// seed's "virtio-net tx napi" thread):
//   FreeOnXmit — tx interrupts off, completions reaped at the next transmit
//                (free_old_xmit in start_xmit);
//   Napi       — tx interrupts on with the delayed enable (EVENT_IDX),
//                completions reaped in poll_tx (virtnet_poll_tx), and with
//                clean_tx_at_rx also from the receive queue's poll
//                (virtnet_poll_cleantx).
// xmit(Flow&, ...) charges a Flow's send credit and returns it at transmit
// (orphan) or on completion; the tx queue stops while the ring is full
// (check_sq_full_and_disable). Sent buffers come from the pair's
// BufferPool and go back to it when their completion is reaped.
//
// xmit_sg sends one packet spread over several slots as one chain, indirect
// when indirect_desc (VIRTIO_F_INDIRECT_DESC) is on.
//
// The direct path (seed 002): with a DirectTx set, tx_flush, when the ring
// needs a kick and at most max_batch packets were queued since the last
// flush, asks the device to process the ring in this thread instead
// (VhostNet::process_tx_now); if it declines, it kicks as usual.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pvnet/frontend/buffer_pool.h"
#include "pvnet/frontend/config.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/util/counters.h"

namespace pvnet::frontend {

/// One buffer of a packet to send; the first starts with the virtio_net_hdr.
struct TxPiece {
    uint32_t buf_id = 0;
    uint32_t len = 0;
};

/// What xmit(Flow&, ...) did with the buffer.
enum class XmitStatus : uint8_t {
    Ok,        ///< queued; the queue owns the buffer
    NoCredit,  ///< the flow is over its sndbuf; the caller keeps the buffer
    Stopped,   ///< the tx queue is stopped (ring full); the caller keeps the buffer
    Dropped,   ///< the ring refused it (broken); buffer freed, drop counted
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

class SendQueue {
public:
    /// Slots one xmit_sg packet may span: cfg.tx_max_pieces capped to [1, tx_size].
    static uint16_t max_pieces(const VirtioNetConfig& cfg) noexcept;
    /// xmit_sg chains go indirect: indirect_desc and more than one piece.
    static bool uses_indirect(const VirtioNetConfig& cfg) noexcept {
        return cfg.indirect_desc && max_pieces(cfg) > 1;
    }

    /// The queue on the tx ring `vq` at `addrs` (with indirect tables if
    /// uses_indirect(cfg)), sending buffers of `pool`, counting into `stats`;
    /// both outlive it.
    SendQueue(const VirtioNetConfig& cfg, const ring::SplitRingAddrs& addrs,
              std::unique_ptr<ring::SplitDriverQueue> vq, notify::QueueFds fds,
              BufferPool& pool, VirtioNetStats& stats) noexcept;
    SendQueue(const SendQueue&) = delete;
    SendQueue& operator=(const SendQueue&) = delete;

    const ring::SplitRingAddrs& addrs() const noexcept { return addrs_; }

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
    /// virtnet_poll_cleantx: the receive queue's reap of this ring (Napi
    /// only), counted in tx_completions_at_rx.
    void poll_cleantx() noexcept;
    /// The tx interrupt: if the tx call fd was signalled, consumes it, counts
    /// it and (Napi mode) runs poll_tx until under budget. In FreeOnXmit mode
    /// it only turns tx interrupts off again (skb_xmit_done): the next xmit
    /// reaps. Returns completions reaped.
    uint32_t tx_interrupt(uint32_t budget = kNapiBudget) noexcept;
    /// Sleeps until the tx call fd is signalled or `timeout_us` passes; does
    /// not consume (tx_interrupt does). True if signalled.
    bool wait_tx(int64_t timeout_us) const noexcept { return fds_.call->wait(timeout_us); }
    /// The tx queue is stopped (netif_tx_queue_stopped).
    bool tx_stopped() const noexcept { return tx_stopped_; }
    TxMode tx_mode() const noexcept { return tx_mode_; }
    void disable_cb() noexcept { vq_->disable_cb(); }

    const ring::SplitDriverQueue& vq() const noexcept { return *vq_; }

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

    /// Reaps up to `max` tx completions, counted under `where`; returns
    /// credit and buffers; restarts a stopped queue above the threshold.
    uint32_t reap_tx(uint32_t max, Counter& where) noexcept;
    /// Napi re-arm with the delayed enable; reaps while it finds work pending.
    void tx_rearm_delayed(Counter& where) noexcept;
    void check_sq_full_and_disable() noexcept;
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

    ring::SplitRingAddrs addrs_;
    std::unique_ptr<ring::SplitDriverQueue> vq_;
    notify::QueueFds fds_;
    BufferPool& pool_;
    VirtioNetStats& stats_;
    TxMode tx_mode_;
    std::vector<TxRecord> tx_recs_;      ///< per buffer id, sized once
    std::vector<ring::Buf> tx_sg_bufs_;  ///< xmit_sg's chain, max_pieces, sized once
    bool tx_stopped_ = false;
    uint16_t tx_max_descs_ = 1;   ///< descriptors the largest tx chain takes
    uint16_t tx_wake_descs_ = 1;  ///< a stopped queue restarts at this many free
    uint32_t tx_batch_ = 0;       ///< packets queued since the last tx_flush
    DirectTx direct_tx_;
};

}  // namespace pvnet::frontend
