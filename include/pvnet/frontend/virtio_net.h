// VirtioNet: the guest-side virtio-net driver (Linux drivers/net/virtio_net.c),
// a set of QueuePairs (virtnet_info's send_queue/receive_queue arrays). A
// QueuePair lays its rings and packet buffers out in guest memory, keeps the rx ring filled (try_fill_recv), reaps rx in a
// NAPI poll with a budget and re-arms interrupts race-free, and transmits
// with free-on-xmit completion (free_old_xmit before each burst).
//
// Buffers are one pool of fixed-size slots; a received buffer can be sent
// on as is (the guest's io forwarding) and returns to the pool when the tx
// completion is reaped.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/util/assert.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::frontend {

/// Linux NAPI_POLL_WEIGHT.
inline constexpr uint32_t kNapiBudget = 64;

enum class FrontendError : uint8_t { AreaTooSmall, AreaUnmapped, RingSetup, Count };

struct VirtioNetConfig {
    uint16_t queue_pairs = 1;   ///< VIRTIO_NET_F_MQ's max_virtqueue_pairs
    uint16_t rx_size = 256;
    uint16_t tx_size = 256;
    bool event_idx = true;
    uint32_t buf_bytes = 2048;  ///< one rx buffer: virtio_net_hdr + frame
    uint32_t n_bufs = 0;        ///< 0: enough for both rings twice over
};

struct VirtioNetFds {
    const notify::EventFd* rx_kick = nullptr;
    const notify::EventFd* tx_kick = nullptr;
    const notify::EventFd* rx_call = nullptr;
    const notify::EventFd* tx_call = nullptr;
};

struct VirtioNetStats {
    Counter rx_pkts, rx_bytes, tx_pkts, tx_bytes;
    Counter tx_drop_ring_full;     ///< xmit found no free descriptor
    Counter rx_drop_bad_len;       ///< used len below the header size
    Counter napi_polls;
    Counter napi_budget_exhausted;
    Counter rx_kicks, tx_kicks;    ///< doorbells written
    Counter rx_interrupts;         ///< wakeups by the rx call fd
    Counter wait_timeouts;         ///< bounded sleeps that ended without an interrupt
    Counter refill_empty_pool;     ///< try_fill_recv stopped for lack of buffers
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
    template <typename Deliver>
    uint32_t poll_rx(uint32_t budget, Deliver&& deliver) noexcept;

    /// Queues buffer `buf_id` (hdr + frame, `len` bytes) for transmit.
    /// False (and the buffer freed, the drop counted) if the ring is full.
    bool xmit(uint32_t buf_id, uint32_t len) noexcept;
    /// Publishes queued transmits; kicks if the device wants.
    void tx_flush() noexcept;
    /// Reaps tx completions into the pool (free-on-xmit).
    uint32_t free_old_xmit() noexcept;

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

private:
    QueuePair() = default;

    VirtioNetConfig cfg_;
    VirtioNetFds fds_;
    ring::SplitRingAddrs rx_addrs_, tx_addrs_;
    std::unique_ptr<ring::SplitDriverQueue> rx_, tx_;
    mem::GuestAddr bufs_gpa_;
    std::byte* bufs_host_ = nullptr;
    std::vector<uint32_t> pool_;  ///< free buffer ids (a stack), sized once
    uint32_t pool_top_ = 0;
    VirtioNetStats stats_;
};

class VirtioNet {
public:
    /// Lays out cfg.queue_pairs pairs one after another in [base, base+bytes);
    /// `fds` has one entry per pair.
    static Result<std::unique_ptr<VirtioNet>, FrontendError> create(
        const mem::MemoryTable& table, mem::GuestAddr base, uint64_t bytes,
        const VirtioNetConfig& cfg, std::span<const VirtioNetFds> fds) noexcept;

    /// Guest memory the whole device needs.
    static uint64_t area_bytes(const VirtioNetConfig& cfg) noexcept {
        return uint64_t{cfg.queue_pairs} * QueuePair::area_bytes(cfg);
    }

    uint16_t queue_pairs() const noexcept { return static_cast<uint16_t>(pairs_.size()); }
    QueuePair& queue_pair(uint16_t i) noexcept { return *pairs_[i]; }
    const QueuePair& queue_pair(uint16_t i) const noexcept { return *pairs_[i]; }

private:
    std::vector<std::unique_ptr<QueuePair>> pairs_;
};

template <typename Deliver>
uint32_t QueuePair::poll_rx(uint32_t budget, Deliver&& deliver) noexcept {
    stats_.napi_polls.add();
    rx_->disable_cb();
    uint32_t done = 0;
    uint64_t bytes = 0;
    ring::UsedBuf u;
    while (done < budget && rx_->get_used(u)) {
        const auto id = static_cast<uint32_t>(u.token);
        ++done;
        // Rule (virtio_net receive_buf): shorter than the header is a defect.
        if (u.len <= 12) {
            stats_.rx_drop_bad_len.add();
            free_buf(id);
            continue;
        }
        bytes += u.len;
        if (!deliver(id, buf_host(id), u.len)) free_buf(id);
    }
    if (done == budget) stats_.napi_budget_exhausted.add();
    stats_.rx_pkts.add(done);
    stats_.rx_bytes.add(bytes);
    return done;
}

}  // namespace pvnet::frontend
