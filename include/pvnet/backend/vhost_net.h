// VhostNet: the backend of one virtio-net queue pair, served by one worker
// thread as the kernel's vhost does (Linux drivers/vhost/net.c). A kick
// queues handle_tx, a readable port (or an rx kick after a refill) queues
// handle_rx; each handler runs until its ring is empty or it has moved the
// packet weight or the byte weight, then requeues itself behind the other
// work so that neither direction starves the other (seed 001: "vhost_net:
// use packet weight for rx handler, too").
//
// The port is a template parameter so the per-packet path has no virtual
// call. A Port provides:
//   bool     rx_pending() noexcept;                       // a packet waits
//   uint32_t recv(std::span<const iovec> dst) noexcept;   // hdr+frame, 0 = dropped
//   bool     send(std::span<const iovec> src, uint32_t len) noexcept;
// and optionally `int rx_fd() const` to sleep on in event mode, and
// `uint32_t peek_len()`: hdr+frame bytes of the next packet, 0 if unknown
// (vhost's peek_head_len), so mergeable rx gathers only the buffers it needs.
// Threads: recv(), rx_pending() and peek_len() are called by the worker;
// send() by the worker or, with the direct path, by the thread calling
// process_tx_now(), never two sends at once (tx_mu_ serializes them) but a
// send() may run while the worker is in recv(). While handle_rx stops for
// lack of guest buffers, rx_fd() is not watched (vhost_net_disable_vq), so
// a readable port does not spin the worker; the refill kick resumes it.
//
// The direct path (seed 002: "write directly when the ring would need a
// kick and the batch is small"): the driver's thread, about to kick an idle
// worker for a small batch, calls process_tx_now() and runs the tx loop
// itself. tx_mu_ guards what handle_tx touches beyond the worker's own
// state: the tx ring, its Coalescer and signal path, the tx stats and the
// port's send side. The worker takes it per run, the caller only try-locks.
//
// Mergeable rx buffers (VIRTIO_NET_F_MRG_RXBUF, VIRTIO 1.2 5.1.6.4): a
// packet fills several single-buffer chains, the first one's header says
// how many (num_buffers), as vhost's get_rx_bufs does.
//
// Interrupts: after each burst's used entries are published, the queue's
// Coalescer decides whether to signal now (max frames / max usecs, seed
// 000's "vhost: interrupt coalescing support"); when it says so the
// driver's suppression (EVENT_IDX, NO_INTERRUPT) still decides. Its timer
// fds sleep in the worker's epoll. Busy polling (vhost's busyloop_timeout):
// before sleeping, the worker spins on the rings for up to busyloop_usecs.
//
// Control virtqueue (optional, VIRTIO_NET_F_CTRL_VQ): its kick sleeps in the
// same epoll and handle_ctrl serves it in the worker; NOTF_COAL commands
// change the coalescers there, through the path set_coalesce() takes.
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

#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/coalescer.h"
#include "pvnet/notify/epoll.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::backend {

/// Linux VHOST_NET_PKT_WEIGHT and VHOST_NET_WEIGHT.
inline constexpr uint32_t kPktWeight = 256;
inline constexpr uint32_t kByteWeight = 0x80000;
/// Packets whose used entries are published (and one signal decision
/// taken) per burst.
inline constexpr uint32_t kMaxBurst = 32;
/// Mergeable rx gathers this much room when the port cannot peek: the
/// header and the largest GSO frame (802.1Q Ethernet, IPv6 header, 64 KiB
/// payload), so no frame is ever truncated.
inline constexpr uint32_t kMaxRxPacketBytes = 12 + 18 + 40 + 65535;

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

struct VhostNetConfig {
    ring::DeviceQueueConfig rx;
    ring::DeviceQueueConfig tx;
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
    /// The control virtqueue, when VIRTIO_NET_F_CTRL_VQ was negotiated.
    std::optional<CtrlQueueConfig> ctrl;
    /// VIRTIO_NET_F_MRG_RXBUF: a packet may fill several rx buffers.
    bool mergeable_rx = false;
};

using VhostNetFds = notify::QueuePairFds;

struct VhostNetStats {
    Counter tx_pkts, tx_bytes, rx_pkts, rx_bytes;
    Counter tx_runs, rx_runs;                      ///< handler invocations
    Counter tx_weight_requeue, rx_weight_requeue;  ///< runs ended by a weight
    Counter tx_max_run_pkts, rx_max_run_pkts;      ///< most packets in one run
    Counter tx_kicks, rx_kicks;                    ///< wakeups by a kick
    Counter tx_calls, rx_calls;                    ///< interrupts sent
    Counter tx_signals_coalesced, rx_signals_coalesced;  ///< absorbed by coalescing
    Counter tx_signals_suppressed_event_idx,             ///< coalescer said signal, the
        rx_signals_suppressed_event_idx;                 ///< driver's EVENT_IDX/flags no
    Counter tx_coalesce_timer_fires, rx_coalesce_timer_fires;  ///< timer signalled pending
    Counter coalesce_updates;  ///< set_coalesce() messages and NOTF_COAL commands applied
    Counter busy_poll_hits;    ///< a spin found work (no sleep, no kick needed)
    Counter busy_poll_misses;  ///< a spin ran out of budget, then slept
    Counter rx_ring_empty;                         ///< rx stopped: no guest buffers
    Counter rx_ring_short;     ///< rx stopped: guest buffers too few for a packet (mergeable)
    Counter rx_merged_pkts;    ///< packets spread over several buffers (mergeable)
    Counter tx_drop_bad_chain;                     ///< writable part or no header
    Counter rx_drop_bad_chain;                     ///< readable part in an rx chain
    Counter rx_drop_no_room;                       ///< frame larger than the buffer
    Counter rx_port_unwatched; ///< port fd unwatched: rx stopped for lack of guest buffers
    Counter wakeups;                               ///< worker sleeps that ended
    Counter direct_runs;       ///< process_tx_now() ran the tx loop in the caller's thread
    Counter direct_pkts;       ///< ... packets it moved
    Counter direct_busy;       ///< ... found tx_mu_ held (one writer: process_tx_now's caller)
};

template <typename Port>
class VhostNet {
public:
    /// Maps both rings (and cfg.ctrl's, if any) through `table` (the
    /// backend's own view of guest memory). `table`, the fds and `port` must
    /// outlive the device; `ctrl_fds` are the control queue's doorbells.
    static Result<std::unique_ptr<VhostNet>, ring::RingError> create(
        const mem::MemoryTable& table, const VhostNetConfig& cfg, const VhostNetFds& fds,
        Port& port, const notify::QueueFds& ctrl_fds = {}) noexcept;

    ~VhostNet() { stop(); }

    /// Starts the worker thread (pinned to `cpu` if >= 0).
    void start(int cpu = -1);
    /// Stops and joins the worker.
    void stop() noexcept;

    /// The worker thread (for CPU-time accounting).
    std::thread::native_handle_type native_handle() noexcept { return thread_.native_handle(); }

    /// The handlers, callable directly when no worker runs (tests).
    /// handle_tx takes tx_mu_ (blocking) for its whole run.
    void handle_tx() noexcept;
    /// The direct path: runs handle_tx's loop now, in the caller's thread,
    /// if tx_mu_ is free (try-lock only). False if it is held (counted in
    /// direct_busy): the caller kicks as usual. Past the tx weight, the rest
    /// goes to the worker through the tx kick eventfd. Callable while the
    /// worker runs, from one thread at a time (the driver's queue owner).
    bool process_tx_now() noexcept;
    void handle_rx() noexcept;
    /// A coalescing timer fd was readable: signal what is pending. The
    /// worker calls these; callable directly when no worker runs (tests).
    void handle_tx_timer() noexcept {
        const std::lock_guard<std::mutex> lock(tx_mu_);
        handle_timer(tx_sig_);
    }
    void handle_rx_timer() noexcept { handle_timer(rx_sig_); }
    /// Serves the control queue (no-op without one); requeues itself after
    /// kCtrlWeight commands.
    void handle_ctrl() noexcept;

    /// New coalescing limits (VIRTIO_NET_CTRL_NOTF_COAL_RX_SET / _TX_SET),
    /// callable from any thread: handed to the worker as a message, applied
    /// at the top of its loop (stats().coalesce_updates counts it). Entries
    /// pending under the old limits are signalled then.
    void set_coalesce(notify::CoalesceParams rx, notify::CoalesceParams tx) noexcept;

    const VhostNetStats& stats() const noexcept { return stats_; }
    const ring::SplitDeviceQueue& rx_queue() const noexcept { return *rx_; }
    const ring::SplitDeviceQueue& tx_queue() const noexcept { return *tx_; }
    /// The control queue (its stats, ring); null when not configured.
    const CtrlQueue* ctrl_queue() const noexcept { return ctrl_.get(); }
    /// The coalescers (rx's owned by the worker, tx's guarded by tx_mu_;
    /// read their stats only).
    const notify::Coalescer& rx_coalescer() const noexcept { return *rx_co_; }
    const notify::Coalescer& tx_coalescer() const noexcept { return *tx_co_; }
    /// Work the handlers queued for themselves (kTxWork | kRxWork | kCtrlWork).
    uint32_t pending_work() const noexcept { return pending_; }

    static constexpr uint32_t kTxWork = 1;
    static constexpr uint32_t kRxWork = 2;
    static constexpr uint32_t kPortWork = 4;  ///< epoll tag of the port's fd
    static constexpr uint32_t kTxTimer = 8;   ///< epoll tag of tx's coalescing timer
    static constexpr uint32_t kRxTimer = 16;  ///< epoll tag of rx's coalescing timer
    static constexpr uint32_t kCtrlWork = 32; ///< the control queue (kick tag and work)

private:
    /// One queue's interrupt path: ring, coalescer, doorbell, counters.
    struct QueueSignal {
        ring::SplitDeviceQueue& q;
        notify::Coalescer& co;
        const notify::EventFd* call;
        Counter& calls;
        Counter& coalesced;
        Counter& suppressed;
        Counter& timer_fires;
    };
    /// set_coalesce()'s mailbox: the fields, then a release bump of epoch.
    struct CoalesceMsg {
        std::atomic<uint32_t> rx_frames{0}, rx_usecs{0}, tx_frames{0}, tx_usecs{0};
        std::atomic<uint64_t> epoch{0};
    };

    VhostNet(const VhostNetConfig& cfg, const VhostNetFds& fds, Port& port,
             std::unique_ptr<ring::SplitDeviceQueue> rx, std::unique_ptr<ring::SplitDeviceQueue> tx,
             std::unique_ptr<notify::Coalescer> rx_co, std::unique_ptr<notify::Coalescer> tx_co,
             std::unique_ptr<CtrlQueue> ctrl, const notify::QueueFds& ctrl_fds,
             notify::EventFd wake, notify::Epoll epoll);
    /// Mergeable rx: the chains (head, bytes) and pieces one packet fills.
    struct RxBufs {
        std::array<ring::UsedElem, ring::kMaxIov> heads;
        std::array<iovec, ring::kMaxIov> iov;
    };
    /// get_rx_bufs: pops single-buffer chains until they hold `need` bytes.
    /// Ok: gathered (nheads chains, niov pieces), or a bad chain met and all
    /// nheads returned used with 0 (niov 0); Empty: too few, the nheads
    /// popped given back; Broken.
    ring::PopStatus get_rx_bufs(uint32_t need, uint16_t& nheads, std::size_t& niov) noexcept;
    /// One mergeable packet: gather, recv, num_buffers, used entries.
    /// Ok: `bytes` written (0: dropped) in `used` entries staged; Empty:
    /// `given_back` chains were too few for it.
    ring::PopStatus recv_mergeable(uint32_t& bytes, uint32_t& used,
                                   uint16_t& given_back) noexcept;
    /// Guest buffers worth a handle_rx run: pending, and more than the
    /// last run found too few for a packet.
    bool rx_ready() noexcept {
        const uint16_t n = rx_->pending();
        return n > rx_short_pending_;
    }
    /// handle_tx's loop, under tx_mu_; returns the packets moved. `direct`
    /// (process_tx_now): past the weight, kick the worker instead of
    /// queueing work on its pending_.
    uint32_t tx_run(bool direct) noexcept;
    /// Event mode: watch the port's fd (`on`) or not (rx out of guest buffers).
    void watch_port(bool on) noexcept;
    void worker() noexcept;
    void wait_for_work(int timeout_ms) noexcept;
    bool busy_poll() noexcept;
    /// Applies set_coalesce()'s latest message.
    void take_coalesce_msg() noexcept;
    /// The one place limits change (mailbox and control queue): each given
    /// queue's coalescer takes its new limits, flushing what was pending.
    void apply_coalesce(std::optional<notify::CoalesceParams> rx,
                        std::optional<notify::CoalesceParams> tx) noexcept;
    /// `n` used entries were just published on s.q.
    void signal(QueueSignal& s, uint32_t n) noexcept;
    /// The coalescer said signal: the driver's suppression decides.
    void raise(QueueSignal& s) noexcept;
    void handle_timer(QueueSignal& s) noexcept;
    static void account_run(uint32_t pkts, uint64_t bytes, Counter& pkts_ctr, Counter& bytes_ctr,
                            Counter& max_run) noexcept {
        pkts_ctr.add(pkts);
        bytes_ctr.add(bytes);
        if (pkts > max_run.get()) max_run.add(pkts - max_run.get());
    }

    VhostNetConfig cfg_;
    VhostNetFds fds_;
    Port& port_;
    std::unique_ptr<ring::SplitDeviceQueue> rx_;
    std::unique_ptr<ring::SplitDeviceQueue> tx_;
    std::unique_ptr<notify::Coalescer> rx_co_;
    std::unique_ptr<notify::Coalescer> tx_co_;
    std::unique_ptr<CtrlQueue> ctrl_;         ///< null without VIRTIO_NET_F_CTRL_VQ
    notify::QueueFds ctrl_fds_;
    std::unique_ptr<ring::DescChain> chain_;     ///< rx: reused for every packet
    std::unique_ptr<ring::DescChain> tx_chain_;  ///< tx: the same, guarded by tx_mu_
    std::unique_ptr<RxBufs> rx_bufs_;         ///< mergeable rx only
    uint16_t rx_short_pending_ = 0;           ///< chains pending when rx came up short
    bool port_watched_ = true;                ///< the port's fd is in epoll_ with EPOLLIN
    uint32_t pending_ = 0;                    ///< worker-owned work list
    std::atomic<bool> stop_{false};
    notify::EventFd wake_;                    ///< stop() pokes the sleeping worker
    notify::Epoll epoll_;                     ///< kicks, port fd, wake_
    std::thread thread_;
    VhostNetStats stats_;
    QueueSignal rx_sig_;
    QueueSignal tx_sig_;
    CoalesceMsg coalesce_msg_;
    uint64_t coalesce_epoch_ = 0;  ///< worker: last epoch applied
    std::mutex coalesce_mu_;       ///< orders concurrent setters (control plane only)
    /// The tx side shared by the worker and process_tx_now(): tx_, tx_co_,
    /// tx_sig_, tx_chain_, the tx stats and port_.send(). Taken per run,
    /// never per packet.
    std::mutex tx_mu_;
};

}  // namespace pvnet::backend

#include "pvnet/backend/detail/handle_rx.h"
#include "pvnet/backend/detail/handle_tx.h"
#include "pvnet/backend/detail/worker.h"
