// The control virtqueue's device side: the command parser and the per-chain
// steps of CtrlQueue::handle (VIRTIO 1.2 5.1.6.5 "Control Virtqueue",
// 5.1.6.5.9 "Notifications Coalescing"; QEMU virtio_net_handle_ctrl_iov).
#include "pvnet/backend/ctrl_queue.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <new>

#include "pvnet/util/iov.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {
namespace {

/// The longest command pvnet parses: header + the coalescing struct. Longer
/// chains are measured, never copied past this.
constexpr std::size_t kMaxCmdBytes =
    sizeof(virtio::virtio_net_ctrl_hdr) + sizeof(virtio::virtio_net_ctrl_coal_tx);
static_assert(sizeof(virtio::virtio_net_ctrl_coal_rx) == sizeof(virtio::virtio_net_ctrl_coal_tx));


}  // namespace

std::string_view to_string(CtrlError e) noexcept {
    switch (e) {
        case CtrlError::NoAck: return "control chain has no writable ack byte";
        case CtrlError::ShortHeader: return "control command shorter than its header";
        case CtrlError::UnknownClass: return "control class not served";
        case CtrlError::UnknownCmd: return "control command unknown in its class";
        case CtrlError::NotNegotiated: return "control class's feature not negotiated";
        case CtrlError::BadDataSize: return "control command data of the wrong size";
        case CtrlError::Count: break;
    }
    return "unknown";
}

Result<CtrlCommand, CtrlError> parse_ctrl_command(std::span<const iovec> readable,
                                                  bool notf_coal) noexcept {
    // Read once: the peer may rewrite its buffers meanwhile; only `raw` is used.
    std::array<std::byte, kMaxCmdBytes> raw{};
    const std::size_t total = iov_bytes(readable);
    (void)copy_from_iov(readable, 0, std::span(raw).first(std::min(total, raw.size())));
    virtio::virtio_net_ctrl_hdr hdr{};
    if (total < sizeof hdr) return unexpected(CtrlError::ShortHeader);
    std::memcpy(&hdr, raw.data(), sizeof hdr);
    // Rule (5.1.6.5.9): the class exists only with VIRTIO_NET_F_NOTF_COAL.
    if (hdr.class_ != virtio::VIRTIO_NET_CTRL_NOTF_COAL) {
        return unexpected(CtrlError::UnknownClass);
    }
    if (!notf_coal) return unexpected(CtrlError::NotNegotiated);
    CtrlCommand c;
    if (hdr.cmd == virtio::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET) {
        c.op = CtrlCommand::Op::NotfCoalTxSet;
    } else if (hdr.cmd == virtio::VIRTIO_NET_CTRL_NOTF_COAL_RX_SET) {
        c.op = CtrlCommand::Op::NotfCoalRxSet;
    } else {
        return unexpected(CtrlError::UnknownCmd);
    }
    // Rule: exactly the command's struct follows the header (QEMU's
    // iov_to_buf size check); rx and tx structs are both kMaxCmdBytes - 2.
    if (total != kMaxCmdBytes) return unexpected(CtrlError::BadDataSize);
    const std::byte* data = raw.data() + sizeof hdr;
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
    const bool notf_coal = virtio::has_feature(cfg.ring.features, virtio::VIRTIO_NET_F_NOTF_COAL);
    std::unique_ptr<CtrlQueue> c(new (std::nothrow) CtrlQueue(notf_coal, fds, std::move(*q)));
    if (!c) return unexpected(ring::RingError::Count);
    return c;
}

Result<CtrlCommand, CtrlError> CtrlQueue::check_chain() noexcept {
    // Rule (5.1.6.5): the ack is the device-writable part; without a byte
    // there nothing can be answered. pop() rejects zero-length descriptors.
    chain_has_ack_ = chain_.in_bytes != 0;
    auto cmd = chain_has_ack_ ? parse_ctrl_command(chain_.readable(), notf_coal_)
                              : Result<CtrlCommand, CtrlError>(unexpected(CtrlError::NoAck));
    if (!cmd) {
        stats_.cmds_err.add(cmd.error());
        return cmd;
    }
    const NotfCoalClamps c = clamp_notf_coal(cmd.value().coal);
    if (c.max_packets) stats_.coal_max_packets_clamped.add();
    if (c.max_usecs) stats_.coal_max_usecs_clamped.add();
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
