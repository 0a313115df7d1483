// VirtioNet: the guest-side virtio-net driver (Linux drivers/net/virtio_net.c),
// a set of QueuePairs (virtnet_info's send_queue/receive_queue arrays). A
// QueuePair lays out its rings and packet buffers in guest memory and owns
// the pieces, organised as Linux's are:
//   BufferPool   (buffer_pool.h)   — the packet buffers both queues share; a
//                                    received buffer can be sent on as is;
//   ReceiveQueue (receive_queue.h) — struct receive_queue: refill, NAPI rx
//                                    poll, mergeable reassembly, busy poll;
//   SendQueue    (send_queue.h)    — struct send_queue: xmit / xmit_sg, the
//                                    two tx modes, completion reaping, the
//                                    direct path.
// QueuePair's methods are theirs, inline; with clean_tx_at_rx the pair
// points its receive queue at its send queue (virtnet_poll_cleantx).
//
// With ctrl_vq, the device also has a control virtqueue (VIRTIO 1.2
// 5.1.6.5): set_coalesce, set_queue_pairs, set_rss and set_hash_config send
// VIRTIO_NET_CTRL_NOTF_COAL / VIRTIO_NET_CTRL_MQ commands on it one at a time
// and wait, bounded, for the device's ack, as Linux's virtnet_send_command
// does (without its unbounded spin).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "pvnet/frontend/buffer_pool.h"
#include "pvnet/frontend/config.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/frontend/receive_queue.h"
#include "pvnet/frontend/send_queue.h"
#include "pvnet/frontend/xps.h"
#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/net/rss.h"
#include "pvnet/notify/coalescer.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::frontend {

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

    QueuePair(const QueuePair&) = delete;
    QueuePair& operator=(const QueuePair&) = delete;

    /// Where the rings are: what the driver programs into the device.
    const ring::SplitRingAddrs& rx_addrs() const noexcept { return rq_.addrs(); }
    const ring::SplitRingAddrs& tx_addrs() const noexcept { return sq_.addrs(); }

    // The receive queue (ReceiveQueue's documentation).
    uint32_t try_fill_recv() noexcept { return rq_.try_fill_recv(); }
    template <typename Deliver>
    uint32_t poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
        return rq_.poll_rx(budget, std::forward<Deliver>(deliver));
    }
    template <typename Deliver>
    uint32_t poll_rx_packets(uint32_t budget, Deliver&& deliver) noexcept {
        return rq_.poll_rx_packets(budget, std::forward<Deliver>(deliver));
    }
    template <typename Deliver>
    uint32_t busy_poll_rx(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept {
        return rq_.busy_poll_rx(budget, std::forward<Deliver>(deliver), usecs);
    }
    template <typename Deliver>
    uint32_t busy_poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
        return rq_.busy_poll_rx(budget, std::forward<Deliver>(deliver));
    }
    template <typename Deliver>
    uint32_t busy_poll_rx_packets(uint32_t budget, Deliver&& deliver, uint32_t usecs) noexcept {
        return rq_.busy_poll_rx_packets(budget, std::forward<Deliver>(deliver), usecs);
    }
    bool napi_complete() noexcept { return rq_.napi_complete(); }
    void wait_rx(int64_t timeout_us) noexcept { rq_.wait_rx(timeout_us); }

    // The send queue (SendQueue's documentation).
    bool xmit(uint32_t buf_id, uint32_t len) noexcept { return sq_.xmit(buf_id, len); }
    XmitStatus xmit(Flow& flow, uint32_t buf_id, uint32_t len) noexcept {
        return sq_.xmit(flow, buf_id, len);
    }
    bool xmit_sg(std::span<const TxPiece> pieces) noexcept { return sq_.xmit_sg(pieces); }
    XmitStatus xmit_sg(Flow& flow, std::span<const TxPiece> pieces) noexcept {
        return sq_.xmit_sg(flow, pieces);
    }
    void tx_flush() noexcept { sq_.tx_flush(); }
    void set_direct_tx(DirectTx d) noexcept { sq_.set_direct_tx(d); }
    uint32_t free_old_xmit() noexcept { return sq_.free_old_xmit(); }
    uint32_t poll_tx(uint32_t budget) noexcept { return sq_.poll_tx(budget); }
    uint32_t tx_interrupt(uint32_t budget = kNapiBudget) noexcept {
        return sq_.tx_interrupt(budget);
    }
    bool wait_tx(int64_t timeout_us) const noexcept { return sq_.wait_tx(timeout_us); }
    bool tx_stopped() const noexcept { return sq_.tx_stopped(); }
    TxMode tx_mode() const noexcept { return sq_.tx_mode(); }

    /// Turns interrupts off on both rings (poll mode).
    void disable_interrupts() noexcept {
        rq_.disable_cb();
        sq_.disable_cb();
    }

    // The buffers (BufferPool): a buffer taken with alloc_buf is the
    // guest's own to fill and xmit, or to give back with free_buf.
    std::byte* buf_host(uint32_t id) const noexcept { return pool_.host(id); }
    void free_buf(uint32_t id) noexcept { pool_.free(id); }
    bool alloc_buf(uint32_t& id) noexcept { return pool_.alloc(id); }
    uint32_t buf_bytes() const noexcept { return pool_.buf_bytes(); }
    uint32_t free_bufs() const noexcept { return pool_.free_count(); }
    uint32_t total_bufs() const noexcept { return pool_.size(); }

    const ring::SplitDriverQueue& rx_queue() const noexcept { return rq_.vq(); }
    const ring::SplitDriverQueue& tx_queue() const noexcept { return sq_.vq(); }
    /// Both queues' counters.
    const VirtioNetStats& stats() const noexcept { return stats_; }
    /// Kicks sent are stats().rx_kicks / tx_kicks; these were not needed.
    uint64_t rx_kicks_suppressed() const noexcept {
        return rq_.vq().stats().kicks_suppressed.get();
    }
    uint64_t tx_kicks_suppressed() const noexcept {
        return sq_.vq().stats().kicks_suppressed.get();
    }

private:
    QueuePair(const VirtioNetConfig& cfg, const VirtioNetFds& fds, BufferPool pool,
              const ring::SplitRingAddrs& rx_addrs, std::unique_ptr<ring::SplitDriverQueue> rx,
              const ring::SplitRingAddrs& tx_addrs,
              std::unique_ptr<ring::SplitDriverQueue> tx) noexcept;

    // Declaration order is construction order: the queues refer to the
    // counters and the pool, the receive queue to the send queue.
    VirtioNetStats stats_;
    BufferPool pool_;
    SendQueue sq_;
    ReceiveQueue rq_;
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

    /// Transmit steering over the queue pairs (sysfs xps_rxqs / xps_cpus),
    /// set up at create as virtio_net's probe does (virtnet_set_affinity):
    /// each queue's CPU group in xps_cpus, xps_rxqs empty.
    Xps& xps() noexcept { return *xps_; }
    const Xps& xps() const noexcept { return *xps_; }
    /// netdev_pick_tx for a packet of `flow` with flow hash `hash`, sent
    /// from the calling thread's CPU.
    XpsPick pick_tx(const Flow& flow, uint32_t hash) const noexcept;

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
    /// ethtool -L combined n: VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET (the device
    /// fills rx queues 0..n-1 only, and turns RSS off). Needs VIRTIO_NET_F_MQ.
    Status<FrontendError> set_queue_pairs(uint16_t n) noexcept;
    /// ethtool -X: VIRTIO_NET_CTRL_MQ_RSS_CONFIG (the device then uses
    /// cfg.max_tx_vq pairs). Needs VIRTIO_NET_F_RSS.
    Status<FrontendError> set_rss(const net::RssConfig& cfg) noexcept;
    /// ethtool -K rxhash on without RSS: VIRTIO_NET_CTRL_MQ_HASH_CONFIG (the
    /// device reports hashes of `cfg`'s types, steers nothing). Needs
    /// VIRTIO_NET_F_HASH_REPORT without VIRTIO_NET_F_RSS (with RSS, set_rss
    /// sets the hash too), as Linux's virtnet_commit_rss_command chooses.
    Status<FrontendError> set_hash_config(const net::HashConfig& cfg) noexcept;
    /// Every packet's header bytes (VirtioNetConfig::hdr_bytes()).
    uint32_t hdr_bytes() const noexcept { return hdr_bytes_; }

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
    std::unique_ptr<Xps> xps_;
    uint32_t ctrl_timeout_us_ = 0;
    uint32_t hdr_bytes_ = sizeof(virtio::virtio_net_hdr);
    notify::QueueFds ctrl_fds_;
    ring::SplitRingAddrs ctrl_addrs_;
    std::unique_ptr<ring::SplitDriverQueue> ctrl_;
    mem::GuestAddr ctrl_cmd_gpa_;
    std::byte* ctrl_cmd_host_ = nullptr;  ///< the command page, shared with the device
    VirtioNetCtrlStats ctrl_stats_;
};

}  // namespace pvnet::frontend
