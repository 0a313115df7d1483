// CtrlQueue: the device side of the virtio-net control virtqueue (VIRTIO 1.2
// 5.1.6.5 "Control Virtqueue"; QEMU's virtio_net_handle_ctrl). Each chain
// is a command: a device-readable virtio_net_ctrl_hdr and command-specific
// data, then a device-writable ack byte. pvnet serves the multiqueue class
// ("Automatic receive steering in multiqueue mode", "Receive-side scaling
// (RSS)": VQ_PAIRS_SET with VIRTIO_NET_F_MQ, RSS_CONFIG with
// VIRTIO_NET_F_RSS, HASH_CONFIG with VIRTIO_NET_F_HASH_REPORT and without
// RSS) and the notification coalescing class (5.1.6.5.9,
// VIRTIO_NET_F_NOTF_COAL); anything else is answered VIRTIO_NET_ERR.
//
// Hostile input by severity (STYLE.md §5): a bad command is answered ERR and
// counted; a chain with no byte to ack into is returned used with length 0
// and counted; a ring rule broken marks the ring broken (the device queue
// does it) and the queue is served no more.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "pvnet/mem/memory_table.h"
#include "pvnet/net/rss.h"
#include "pvnet/notify/coalescer.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::backend {

/// What the driver got wrong in one command (each answered ERR, or for
/// NoAck returned used with length 0).
enum class CtrlError : uint8_t {
    NoAck,          ///< no device-writable byte for the ack
    ShortHeader,    ///< readable part below the 2-byte virtio_net_ctrl_hdr
    UnknownClass,   ///< a class pvnet does not serve
    UnknownCmd,     ///< a command its class does not have
    NotNegotiated,  ///< the command's feature (NOTF_COAL, MQ, RSS, HASH_REPORT) is off,
                    ///< or HASH_CONFIG with RSS (whose parameters are RSS_CONFIG's)
    BadDataSize,    ///< command-specific data not exactly the command's struct
    OutOfRange,     ///< VQ_PAIRS_SET: virtqueue_pairs 0 or above max_virtqueue_pairs
    BadRss,         ///< RSS_CONFIG rejected by net::parse_rss_config (it says why)
    BadHashConfig,  ///< HASH_CONFIG rejected by net::parse_hash_config (it says why)
    Count
};

std::string_view to_string(CtrlError e) noexcept;

/// What the negotiated features let the guest command.
struct CtrlFeatures {
    bool notf_coal = false;  ///< VIRTIO_NET_F_NOTF_COAL
    bool mq = false;         ///< VIRTIO_NET_F_MQ
    bool rss = false;        ///< VIRTIO_NET_F_RSS
    uint16_t max_pairs = 1;  ///< max_virtqueue_pairs
    bool hash_report = false;  ///< VIRTIO_NET_F_HASH_REPORT

    /// From a negotiated feature word and the device's pairs.
    static CtrlFeatures of(uint64_t features, uint16_t max_pairs) noexcept;
};

/// A validated command, in host byte order.
struct CtrlCommand {
    enum class Op : uint8_t {
        NotfCoalTxSet,  ///< VIRTIO_NET_CTRL_NOTF_COAL_TX_SET
        NotfCoalRxSet,  ///< VIRTIO_NET_CTRL_NOTF_COAL_RX_SET
        MqVqPairsSet,   ///< VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET
        MqRssConfig,    ///< VIRTIO_NET_CTRL_MQ_RSS_CONFIG
        MqHashConfig,   ///< VIRTIO_NET_CTRL_MQ_HASH_CONFIG
    };
    Op op = Op::NotfCoalTxSet;
    notify::CoalesceParams coal;  ///< NotfCoal*: {*_max_packets, *_usecs}
    uint16_t pairs = 0;           ///< MqVqPairsSet: virtqueue_pairs, 1..max_pairs
    net::RssConfig rss;           ///< MqRssConfig: validated against max_pairs
    net::HashConfig hash;         ///< MqHashConfig: validated
};

/// Parses the readable part of a control chain (any split across iovecs,
/// VIRTIO_F_ANY_LAYOUT): each byte is copied once into a local and only the
/// copy is checked and used. A command is known only with its feature in
/// `f` (else NotNegotiated). On BadRss or BadHashConfig, `rss_why` (if
/// given) gets parse_rss_config's or parse_hash_config's reason.
Result<CtrlCommand, CtrlError> parse_ctrl_command(std::span<const iovec> readable,
                                                  const CtrlFeatures& f,
                                                  net::RssError* rss_why = nullptr) noexcept;

/// The most used entries a guest may have the device publish between two
/// signal decisions (max_packets of VIRTIO_NET_CTRL_NOTF_COAL_*_SET, a
/// 32-bit field). 2^15: the largest queue size (no single burst is bigger),
/// and far inside the 2^16 window need_event can judge, so a coalesced
/// decision is never taken over a wrapped used.idx.
inline constexpr uint32_t kNotfCoalMaxPackets = 32768;
/// The longest a guest may have the device hold an interrupt back (max_usecs,
/// 32-bit, up to 71 minutes): one second.
inline constexpr uint32_t kNotfCoalMaxUsecs = 1'000'000;

/// Which of a command's coalescing limits clamp_notf_coal lowered.
struct NotfCoalClamps {
    bool max_packets = false;
    bool max_usecs = false;
};

/// Lowers a parsed NOTF_COAL request to kNotfCoalMaxPackets /
/// kNotfCoalMaxUsecs; says which it lowered. CtrlQueue applies it to every
/// command after parse_ctrl_command (which reports the guest's values as sent).
NotfCoalClamps clamp_notf_coal(notify::CoalesceParams& p) noexcept;

struct CtrlQueueConfig {
    /// The control ring. ring.features is the device's negotiated feature
    /// word: the ring takes its ring bits from it, the queue NOTF_COAL, MQ
    /// and RSS (hoisted at create).
    ring::DeviceQueueConfig ring;
    uint16_t max_pairs = 1;  ///< max_virtqueue_pairs: VQ_PAIRS_SET's and RSS's bound
};

struct CtrlQueueStats {
    Counter cmds_ok;                   ///< answered VIRTIO_NET_OK
    CounterArray<CtrlError> cmds_err;  ///< answered ERR (or used len 0), by reason
    Counter coal_max_packets_clamped;  ///< max_packets above kNotfCoalMaxPackets, lowered
    Counter coal_max_usecs_clamped;    ///< max_usecs above kNotfCoalMaxUsecs, lowered
    Counter mq_pairs_set;              ///< VQ_PAIRS_SET commands applied
    Counter rss_configs;               ///< RSS_CONFIG commands applied
    CounterArray<net::RssError> rss_rejected;  ///< RSS_CONFIG answered ERR (BadRss), by reason
    Counter hash_configs;              ///< HASH_CONFIG commands applied
    CounterArray<net::RssError> hash_config_rejected;  ///< ... ERR (BadHashConfig), by reason
    Counter runs;                      ///< handle() invocations
    Counter calls;                     ///< interrupts sent
    Counter calls_suppressed;          ///< the driver's EVENT_IDX/flags said no
};

/// Commands served per handle() run before it yields to the datapath.
inline constexpr uint32_t kCtrlWeight = 64;

class CtrlQueue {
public:
    /// Maps the control ring through `table`; `fds.call` (may be null) is
    /// signalled after used entries are published. Both must outlive the queue.
    static Result<std::unique_ptr<CtrlQueue>, ring::RingError> create(
        const mem::MemoryTable& table, const CtrlQueueConfig& cfg,
        const notify::QueueFds& fds) noexcept;

    /// Serves up to kCtrlWeight commands: each valid one has its limits
    /// clamped (clamp_notf_coal), is counted, is passed to
    /// `apply(const CtrlCommand&)` and acked OK; the others ERR (a rejected
    /// command changes nothing, unlike QEMU, which turns RSS off for any
    /// MQ command, even a refused one). Returns true if commands are left (run
    /// again), false when the ring is empty (notifications re-armed) or broken.
    template <typename Apply>
    bool handle(Apply&& apply) noexcept;

    /// Available commands not yet served (one acquire load; 0 when broken).
    uint16_t pending() noexcept { return q_->pending(); }

    const ring::SplitDeviceQueue& queue() const noexcept { return *q_; }
    const CtrlQueueStats& stats() const noexcept { return stats_; }

private:
    CtrlQueue(const CtrlFeatures& f, const notify::QueueFds& fds,
              std::unique_ptr<ring::SplitDeviceQueue> q) noexcept
        : features_(f), fds_(fds), q_(std::move(q)) {}
    /// The popped chain's command, or the error it is answered with (counted).
    Result<CtrlCommand, CtrlError> check_chain() noexcept;
    /// Writes the ack (if the chain has room for it) and stages the used entry.
    void complete(bool ok) noexcept;
    /// Publishes `n` used entries and signals if the driver wants it; true
    /// if the run should go on (more available).
    bool finish(uint32_t n, ring::PopStatus st) noexcept;

    CtrlFeatures features_;
    notify::QueueFds fds_;
    std::unique_ptr<ring::SplitDeviceQueue> q_;
    ring::DescChain chain_;
    bool chain_has_ack_ = false;  ///< the popped chain has a writable byte
    CtrlQueueStats stats_;
};

template <typename Apply>
bool CtrlQueue::handle(Apply&& apply) noexcept {
    if (q_->broken()) return false;
    stats_.runs.add();
    q_->disable_notify();
    uint32_t n = 0;
    ring::PopStatus st = ring::PopStatus::Ok;
    while (n < kCtrlWeight && (st = q_->pop(chain_)) == ring::PopStatus::Ok) {
        const auto cmd = check_chain();
        if (cmd) apply(cmd.value());
        complete(cmd.has_value());
        ++n;
    }
    return finish(n, st);
}

}  // namespace pvnet::backend
