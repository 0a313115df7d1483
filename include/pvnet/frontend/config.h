// The frontend's configuration, errors and counters, shared by the queue
// pair's pieces (BufferPool, ReceiveQueue, SendQueue) and VirtioNet.
#pragma once

#include <cstdint>

#include "pvnet/notify/event_fd.h"
#include "pvnet/util/counters.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::frontend {

/// Linux NAPI_POLL_WEIGHT.
inline constexpr uint32_t kNapiBudget = 64;

/// The largest packet, header included: a 64 KiB GSO frame (802.1Q
/// Ethernet, IPv6 header, 65,535 bytes of payload) behind virtio_net_hdr
/// (hash_report's virtio_net_hdr_v1_hash adds 8 bytes).
inline constexpr uint32_t kMaxPacketBytes = 12 + 18 + 40 + 65535;

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
    /// Threads other than the pair's own may send on its tx queue (XPS
    /// across pairs, the caller holding a per-queue tx lock): the buffer
    /// pool, which the pair's receive queue shares, then takes a mutex.
    bool shared_pool = false;
    bool ctrl_vq = false;       ///< VIRTIO_NET_F_CTRL_VQ: lay out a control virtqueue
    uint16_t ctrl_size = 64;    ///< its ring size (>= 4: a command takes 3 descriptors)
    uint32_t ctrl_timeout_us = 1'000'000;  ///< how long a command waits for its ack
    /// VIRTIO_NET_F_HASH_REPORT: every packet's header, rx and tx, is struct
    /// virtio_net_hdr_v1_hash (hdr_bytes()), and a received packet carries
    /// the device's hash (RxPiece). Needs ctrl_vq (set_hash_config).
    bool hash_report = false;

    /// The header in front of every frame, in both directions.
    uint32_t hdr_bytes() const noexcept {
        return hash_report ? sizeof(virtio::virtio_net_hdr_v1_hash)
                           : sizeof(virtio::virtio_net_hdr);
    }
};

using VirtioNetFds = notify::QueuePairFds;

struct VirtioNetStats {
    Counter rx_pkts, rx_bytes, tx_pkts, tx_bytes;
    Counter tx_drop_ring_full;     ///< xmit found no free descriptor
    Counter rx_drop_bad_len;       ///< used len below the header size
    Counter rx_length_errors;      ///< mergeable: num_buffers 0, too many, or buffers missing
    Counter rx_merged_pkts;        ///< mergeable: packets that spanned several buffers
    Counter rx_drop_multi_buf;     ///< such a packet reached poll_rx (single-buffer API)
    Counter rx_hash_report_unknown;  ///< hash_report not a VIRTIO_NET_HASH_REPORT_*: taken as NONE
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

}  // namespace pvnet::frontend
