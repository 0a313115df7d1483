// The control virtqueue's device side: the command parser and the per-chain
// steps of CtrlQueue::handle (VIRTIO 1.2 5.1.6.5 "Control Virtqueue",
// "Automatic receive steering in multiqueue mode" and its "Hash calculation",
// "Receive-side scaling (RSS)", 5.1.6.5.9 "Notifications Coalescing"; QEMU
// virtio_net_handle_ctrl_iov, virtio_net_handle_mq, virtio_net_handle_rss).
#include "pvnet/backend/ctrl_queue.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <new>
#include <span>

#include "pvnet/util/iov.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {
namespace {

using Hdr = virtio::virtio_net_ctrl_hdr;

/// The longest command pvnet parses: header + the largest RSS_CONFIG.
/// Longer chains are measured, never copied past this.
constexpr std::size_t kMaxCmdBytes =
    sizeof(Hdr) + std::max({sizeof(virtio::virtio_net_ctrl_coal_tx),
                            sizeof(virtio::virtio_net_ctrl_mq), net::kRssConfigMaxBytes,
                            net::kHashConfigMaxBytes});
static_assert(sizeof(virtio::virtio_net_ctrl_coal_rx) == sizeof(virtio::virtio_net_ctrl_coal_tx));
constexpr std::size_t kCoalCmdBytes = sizeof(Hdr) + sizeof(virtio::virtio_net_ctrl_coal_tx);
constexpr std::size_t kMqCmdBytes = sizeof(Hdr) + sizeof(virtio::virtio_net_ctrl_mq);

/// `raw` holds the first min(total, raw.size()) bytes of a `total`-byte command.
using Raw = std::array<uint8_t, kMaxCmdBytes>;

Result<CtrlCommand, CtrlError> parse_notf_coal(const Raw& raw, std::size_t total, uint8_t cmd,
                                               const CtrlFeatures& f) noexcept {
    // Rule (5.1.6.5.9): the class exists only with VIRTIO_NET_F_NOTF_COAL.
    if (!f.notf_coal) return unexpected(CtrlError::NotNegotiated);
    CtrlCommand c;
    if (cmd == virtio::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET) {
        c.op = CtrlCommand::Op::NotfCoalTxSet;
    } else if (cmd == virtio::VIRTIO_NET_CTRL_NOTF_COAL_RX_SET) {
        c.op = CtrlCommand::Op::NotfCoalRxSet;
    } else {
        return unexpected(CtrlError::UnknownCmd);
    }
    // Rule: exactly the command's struct follows the header (QEMU's
    // iov_to_buf size check); rx and tx structs are the same size.
    if (total != kCoalCmdBytes) return unexpected(CtrlError::BadDataSize);
    const uint8_t* data = raw.data() + sizeof(Hdr);
    if (c.op == CtrlCommand::Op::NotfCoalTxSet) {
        virtio::virtio_net_ctrl_coal_tx tx{};
        std::memcpy(&tx, data, sizeof tx);
        c.coal = notify::CoalesceParams{tx.tx_max_packets.get(), tx.tx_usecs.get()};
    } else {
        virtio::virtio_net_ctrl_coal_rx rx{};
        std::memcpy(&rx, data, sizeof rx);
        c.coal = notify::CoalesceParams{rx.rx_max_packets.get(), rx.rx_usecs.get()};
    }
    return c;
}

/// net's verdict on a config's data, `cut` short (copied up to raw's size):
/// a cut config that parsed is TrailingBytes; a rejected one is `bad`, its
/// reason in `why` (if given).
template <typename Config>
Result<Config, CtrlError> whole(Result<Config, net::RssError> cfg, bool cut, CtrlError bad,
                                net::RssError* why) noexcept {
    if (cfg && cut) cfg = unexpected(net::RssError::TrailingBytes);
    if (cfg) return cfg.value();
    if (why != nullptr) *why = cfg.error();
    return unexpected(bad);
}

Result<CtrlCommand, CtrlError> parse_mq(const Raw& raw, std::size_t total, uint8_t cmd,
                                        const CtrlFeatures& f, net::RssError* rss_why) noexcept {
    // Rule: the class exists with VIRTIO_NET_F_MQ, _RSS or _HASH_REPORT;
    // each command with its own feature.
    if (!f.mq && !f.rss && !f.hash_report) return unexpected(CtrlError::NotNegotiated);
    CtrlCommand c;
    if (cmd == virtio::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET) {
        if (!f.mq) return unexpected(CtrlError::NotNegotiated);
        if (total != kMqCmdBytes) return unexpected(CtrlError::BadDataSize);
        virtio::virtio_net_ctrl_mq mq{};
        std::memcpy(&mq, raw.data() + sizeof(Hdr), sizeof mq);
        const uint16_t n = mq.virtqueue_pairs.get();
        // Rule ("Automatic receive steering"): VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN..MAX and no
        // more than max_virtqueue_pairs (QEMU's range check).
        if (n < virtio::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN ||
            n > virtio::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MAX || n > f.max_pairs) {
            return unexpected(CtrlError::OutOfRange);
        }
        c.op = CtrlCommand::Op::MqVqPairsSet;
        c.pairs = n;
        return c;
    }
    // The data as copied: longer than any valid config, only its first
    // raw.size() - 2 bytes. Those give every verdict but the length's, and
    // the length's, past them, is always TrailingBytes.
    const std::size_t len = total - sizeof(Hdr);
    const std::span<const uint8_t> data(raw.data() + sizeof(Hdr),
                                        std::min(len, raw.size() - sizeof(Hdr)));
    const bool cut = data.size() != len;
    if (cmd == virtio::VIRTIO_NET_CTRL_MQ_RSS_CONFIG) {
        if (!f.rss) return unexpected(CtrlError::NotNegotiated);
        auto cfg = whole(net::parse_rss_config(data, f.max_pairs), cut, CtrlError::BadRss, rss_why);
        if (!cfg) return unexpected(cfg.error());
        c.op = CtrlCommand::Op::MqRssConfig;
        c.rss = cfg.value();
        return c;
    }
    if (cmd == virtio::VIRTIO_NET_CTRL_MQ_HASH_CONFIG) {
        // Rule ("Hash calculation for incoming packets"): with RSS negotiated
        // the hash parameters are RSS_CONFIG's; HASH_CONFIG is the command of
        // a device with HASH_REPORT alone (Linux sends it only then).
        if (!f.hash_report || f.rss) return unexpected(CtrlError::NotNegotiated);
        auto cfg = whole(net::parse_hash_config(data), cut, CtrlError::BadHashConfig, rss_why);
        if (!cfg) return unexpected(cfg.error());
        c.op = CtrlCommand::Op::MqHashConfig;
        c.hash = cfg.value();
        return c;
    }
    return unexpected(CtrlError::UnknownCmd);
}

}  // namespace

CtrlFeatures CtrlFeatures::of(uint64_t features, uint16_t max_pairs) noexcept {
    CtrlFeatures f;
    f.notf_coal = virtio::has_feature(features, virtio::VIRTIO_NET_F_NOTF_COAL);
    f.mq = virtio::has_feature(features, virtio::VIRTIO_NET_F_MQ);
    f.rss = virtio::has_feature(features, virtio::VIRTIO_NET_F_RSS);
    f.hash_report = virtio::has_feature(features, virtio::VIRTIO_NET_F_HASH_REPORT);
    f.max_pairs = max_pairs;
    return f;
}

std::string_view to_string(CtrlError e) noexcept {
    switch (e) {
        case CtrlError::NoAck: return "control chain has no writable ack byte";
        case CtrlError::ShortHeader: return "control command shorter than its header";
        case CtrlError::UnknownClass: return "control class not served";
        case CtrlError::UnknownCmd: return "control command unknown in its class";
        case CtrlError::NotNegotiated: return "control command's feature not negotiated";
        case CtrlError::BadDataSize: return "control command data of the wrong size";
        case CtrlError::OutOfRange: return "virtqueue_pairs outside 1..max_virtqueue_pairs";
        case CtrlError::BadRss: return "RSS config rejected";
        case CtrlError::BadHashConfig: return "hash config rejected";
        case CtrlError::Count: break;
    }
    return "unknown";
}

Result<CtrlCommand, CtrlError> parse_ctrl_command(std::span<const iovec> readable,
                                                  const CtrlFeatures& f,
                                                  net::RssError* rss_why) noexcept {
    // Read once: the peer may rewrite its buffers meanwhile; only `raw` is used.
    Raw raw{};
    const std::size_t total = iov_bytes(readable);
    (void)copy_from_iov(readable, 0,
                        std::as_writable_bytes(std::span(raw)).first(std::min(total, raw.size())));
    Hdr hdr{};
    if (total < sizeof hdr) return unexpected(CtrlError::ShortHeader);
    std::memcpy(&hdr, raw.data(), sizeof hdr);
    switch (hdr.class_) {
        case virtio::VIRTIO_NET_CTRL_NOTF_COAL: return parse_notf_coal(raw, total, hdr.cmd, f);
        case virtio::VIRTIO_NET_CTRL_MQ: return parse_mq(raw, total, hdr.cmd, f, rss_why);
        default: return unexpected(CtrlError::UnknownClass);
    }
}

NotfCoalClamps clamp_notf_coal(notify::CoalesceParams& p) noexcept {
    // Caps, not rules: the guest asked for more than pvnet will defer; it
    // gets the most pvnet allows (answered OK, counted by the caller).
    NotfCoalClamps c;
    if (p.max_frames > kNotfCoalMaxPackets) {
        p.max_frames = kNotfCoalMaxPackets;
        c.max_packets = true;
    }
    if (p.max_usecs > kNotfCoalMaxUsecs) {
        p.max_usecs = kNotfCoalMaxUsecs;
        c.max_usecs = true;
    }
    return c;
}

Result<std::unique_ptr<CtrlQueue>, ring::RingError> CtrlQueue::create(
    const mem::MemoryTable& table, const CtrlQueueConfig& cfg,
    const notify::QueueFds& fds) noexcept {
    auto q = ring::SplitDeviceQueue::create(table, cfg.ring);
    if (!q) return unexpected(q.error());
    const CtrlFeatures f = CtrlFeatures::of(cfg.ring.features, cfg.max_pairs);
    std::unique_ptr<CtrlQueue> c(new (std::nothrow) CtrlQueue(f, fds, std::move(*q)));
    if (!c) return unexpected(ring::RingError::Count);
    return c;
}

Result<CtrlCommand, CtrlError> CtrlQueue::check_chain() noexcept {
    // Rule (5.1.6.5): the ack is the device-writable part; without a byte
    // there nothing can be answered. pop() rejects zero-length descriptors.
    chain_has_ack_ = chain_.in_bytes != 0;
    net::RssError rss_why = net::RssError::Count;
    auto cmd = chain_has_ack_ ? parse_ctrl_command(chain_.readable(), features_, &rss_why)
                              : Result<CtrlCommand, CtrlError>(unexpected(CtrlError::NoAck));
    if (!cmd) {
        stats_.cmds_err.add(cmd.error());
        if (cmd.error() == CtrlError::BadRss) stats_.rss_rejected.add(rss_why);
        if (cmd.error() == CtrlError::BadHashConfig) stats_.hash_config_rejected.add(rss_why);
        return cmd;
    }
    switch (cmd.value().op) {
        case CtrlCommand::Op::NotfCoalTxSet:
        case CtrlCommand::Op::NotfCoalRxSet: {
            const NotfCoalClamps c = clamp_notf_coal(cmd.value().coal);
            if (c.max_packets) stats_.coal_max_packets_clamped.add();
            if (c.max_usecs) stats_.coal_max_usecs_clamped.add();
            break;
        }
        case CtrlCommand::Op::MqVqPairsSet: stats_.mq_pairs_set.add(); break;
        case CtrlCommand::Op::MqRssConfig: stats_.rss_configs.add(); break;
        case CtrlCommand::Op::MqHashConfig: stats_.hash_configs.add(); break;
    }
    return cmd;
}

void CtrlQueue::complete(bool ok) noexcept {
    if (!chain_has_ack_) {
        (void)q_->add_used(chain_.head, 0);
        return;
    }
    const uint8_t ack = ok ? virtio::VIRTIO_NET_OK : virtio::VIRTIO_NET_ERR;
    // VALIDATED: pop() translated every writable iovec for write access;
    // the first holds at least one byte (in_bytes != 0, no zero lengths).
    std::memcpy(chain_.writable()[0].iov_base, &ack, sizeof ack);
    if (ok) stats_.cmds_ok.add();
    (void)q_->add_used(chain_.head, sizeof ack);
}

bool CtrlQueue::finish(uint32_t n, ring::PopStatus st) noexcept {
    if (n != 0) {
        q_->flush_used();
        if (fds_.call != nullptr && !q_->broken()) {
            if (q_->should_signal()) {
                fds_.call->signal();
                stats_.calls.add();
            } else {
                stats_.calls_suppressed.add();
            }
        }
    }
    if (st == ring::PopStatus::Broken) return false;
    if (st == ring::PopStatus::Ok) return true;  // stopped at the weight
    // Re-arm kicks; a command that slipped in meanwhile means run again.
    return q_->enable_notify();
}

}  // namespace pvnet::backend
