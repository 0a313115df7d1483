// Guest-side control virtqueue (VIRTIO 1.2 5.1.6.5 "Control Virtqueue",
// multiqueue steering, RSS and its hash calculation, 5.1.6.5.9
// "Notifications Coalescing"), as Linux virtnet_send_command,
// virtnet_set_queues, virtnet_commit_rss_command
// and virtnet_send_notf_coal_cmds: one command in flight at a time, laid out as
// a readable header, readable data and a writable ack byte. Unlike Linux's
// spin, the wait for the ack is bounded: a silent device gives CtrlTimeout.
#include <array>
#include <cstring>

#include "pvnet/frontend/virtio_net.h"
#include "pvnet/net/rss.h"
#include "pvnet/util/clock.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::frontend {
namespace {

// Offsets in the command page: three descriptors, so the device sees the
// layout Linux sends (any split of the readable part is legal, ANY_LAYOUT).
constexpr uint64_t kCmdHdrOff = 0;
constexpr uint64_t kCmdDataOff = 8;
constexpr uint64_t kCmdAckOff = 512;
constexpr std::size_t kCmdMaxData = kCmdAckOff - kCmdDataOff;
// The largest command, RSS_CONFIG, fits; the page is ctrl_area_bytes' 4096.
static_assert(kCmdMaxData >= net::kRssConfigMaxBytes &&
              kCmdMaxData >= net::kHashConfigMaxBytes && kCmdAckOff < 4096);

}  // namespace

Status<FrontendError> VirtioNet::set_coalesce(notify::CoalesceParams rx,
                                              notify::CoalesceParams tx) noexcept {
    virtio::virtio_net_ctrl_coal_rx r{};
    r.rx_max_packets.set(rx.max_frames);
    r.rx_usecs.set(rx.max_usecs);
    if (auto st =
            send_command(virtio::VIRTIO_NET_CTRL_NOTF_COAL,
                         virtio::VIRTIO_NET_CTRL_NOTF_COAL_RX_SET, std::as_bytes(std::span(&r, 1)));
        !st) {
        return st;
    }
    virtio::virtio_net_ctrl_coal_tx t{};
    t.tx_max_packets.set(tx.max_frames);
    t.tx_usecs.set(tx.max_usecs);
    return send_command(virtio::VIRTIO_NET_CTRL_NOTF_COAL, virtio::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET,
                        std::as_bytes(std::span(&t, 1)));
}

Status<FrontendError> VirtioNet::set_queue_pairs(uint16_t n) noexcept {
    virtio::virtio_net_ctrl_mq mq{};
    mq.virtqueue_pairs.set(n);
    return send_command(virtio::VIRTIO_NET_CTRL_MQ, virtio::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET,
                        std::as_bytes(std::span(&mq, 1)));
}

Status<FrontendError> VirtioNet::set_rss(const net::RssConfig& cfg) noexcept {
    std::array<uint8_t, net::kRssConfigMaxBytes> buf{};
    const std::size_t len = net::serialize_rss_config(cfg, buf);
    return send_command(virtio::VIRTIO_NET_CTRL_MQ, virtio::VIRTIO_NET_CTRL_MQ_RSS_CONFIG,
                        std::as_bytes(std::span(buf).first(len)));
}

Status<FrontendError> VirtioNet::set_hash_config(const net::HashConfig& cfg) noexcept {
    std::array<uint8_t, net::kHashConfigMaxBytes> buf{};
    const std::size_t len = net::serialize_hash_config(cfg, buf);
    return send_command(virtio::VIRTIO_NET_CTRL_MQ, virtio::VIRTIO_NET_CTRL_MQ_HASH_CONFIG,
                        std::as_bytes(std::span(buf).first(len)));
}

Status<FrontendError> VirtioNet::send_command(uint8_t cls, uint8_t cmd,
                                              std::span<const std::byte> data) noexcept {
    if (!ctrl_) return unexpected(FrontendError::NoCtrlVq);
    ctrl_stats_.cmds.add();
    auto st = exchange_command(cls, cmd, data);
    if (!st) ctrl_stats_.cmds_failed.add();
    return st;
}

Status<FrontendError> VirtioNet::exchange_command(uint8_t cls, uint8_t cmd,
                                                  std::span<const std::byte> data) noexcept {
    // Our own bug if a command outgrows its slot; never a peer's value.
    if (!PVNET_ASSERT(!data.empty() && data.size() <= kCmdMaxData)) {
        return unexpected(FrontendError::CtrlDeviceErr);
    }
    // A command that timed out comes back late, if ever: reap it; while the
    // device still holds it, the page is its buffer and cannot be rewritten.
    ring::UsedBuf u;
    while (ctrl_->get_used(u)) {
    }
    if (ctrl_->broken()) return unexpected(FrontendError::CtrlBroken);
    if (ctrl_->in_flight() != 0) return unexpected(FrontendError::CtrlBusy);

    const virtio::virtio_net_ctrl_hdr hdr{cls, cmd};
    std::memcpy(ctrl_cmd_host_ + kCmdHdrOff, &hdr, sizeof hdr);
    std::memcpy(ctrl_cmd_host_ + kCmdDataOff, data.data(), data.size());
    // A device that uses the chain without writing the ack reads as ERR.
    ctrl_cmd_host_[kCmdAckOff] = std::byte{virtio::VIRTIO_NET_ERR};
    const ring::Buf out[] = {{ctrl_cmd_gpa_ + kCmdHdrOff, sizeof hdr},
                             {ctrl_cmd_gpa_ + kCmdDataOff, static_cast<uint32_t>(data.size())}};
    const ring::Buf in{ctrl_cmd_gpa_ + kCmdAckOff, 1};
    if (ctrl_->add(out, std::span<const ring::Buf>(&in, 1), 0) != ring::AddStatus::Ok) {
        // The ring is empty and holds >= 4 descriptors: only a broken one refuses.
        return unexpected(FrontendError::CtrlBroken);
    }
    if (ctrl_->kick_prepare()) {
        ctrl_fds_.kick->signal();
        ctrl_stats_.kicks.add();
    }

    const uint64_t deadline = now_ns() + uint64_t{ctrl_timeout_us_} * 1000u;
    while (!ctrl_->get_used(u)) {
        if (ctrl_->broken()) return unexpected(FrontendError::CtrlBroken);
        const uint64_t now = now_ns();
        if (now >= deadline) return unexpected(FrontendError::CtrlTimeout);
        // Re-arm, then sleep unless the device answered meanwhile.
        if (ctrl_->enable_cb() &&
            ctrl_fds_.call->wait(static_cast<int64_t>((deadline - now) / 1000u + 1u))) {
            ctrl_fds_.call->consume();
        }
    }
    // get_used checked len against the one writable byte posted; 0 means no ack.
    uint8_t ack = virtio::VIRTIO_NET_ERR;
    if (u.len == 1) std::memcpy(&ack, ctrl_cmd_host_ + kCmdAckOff, sizeof ack);
    if (ack != virtio::VIRTIO_NET_OK) return unexpected(FrontendError::CtrlDeviceErr);
    return {};
}

}  // namespace pvnet::frontend
