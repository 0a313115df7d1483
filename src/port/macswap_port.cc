// MacswapPort (see macswap_port.h).
#include "pvnet/port/macswap_port.h"

#include <cstring>
#include <new>

#include "pvnet/util/iov.h"

namespace pvnet::port {

Result<std::unique_ptr<MacswapPort>, PortError> MacswapPort::create(uint32_t max_frame_bytes,
                                                                    uint32_t slots,
                                                                    ReplyQueue::Publish publish) noexcept {
    if (max_frame_bytes < kEthHdrBytes) return unexpected(PortError::BadFrameSize);
    auto q = ReplyQueue::create(slots, kHdrBytes + max_frame_bytes, publish);
    if (!q) return unexpected(q.error());
    std::unique_ptr<MacswapPort> p(new (std::nothrow) MacswapPort(std::move(*q), max_frame_bytes));
    if (!p) return unexpected(PortError::SystemError);
    return p;
}

SendResult MacswapPort::send(std::span<const iovec> src, uint32_t len) noexcept {
    if (len < kHdrBytes + kEthHdrBytes || iov_bytes(src) < len) {
        tx_drop_short.add();
        tx_pkts.add();
        return SendResult::Dropped;
    }
    const uint32_t frame_len = len - kHdrBytes;
    if (frame_len > max_frame_) {
        tx_drop_oversize.add();
        tx_pkts.add();
        return SendResult::Dropped;
    }
    std::byte* slot = q_->reserve();
    if (slot == nullptr) return SendResult::Retry;
    // The guest's header is not handed back: no offload was offered.
    std::memset(slot, 0, kHdrBytes);
    std::byte* frame = slot + kHdrBytes;
    (void)copy_from_iov(src, kHdrBytes, std::span<std::byte>(frame, frame_len));
    std::byte mac[6];
    std::memcpy(mac, frame, 6);
    std::memcpy(frame, frame + 6, 6);
    std::memcpy(frame + 6, mac, 6);
    q_->commit(len);
    tx_pkts.add();
    return SendResult::Sent;
}

}  // namespace pvnet::port
