// GuestPair: pvnet's guest driver (frontend::VirtioNet) on a
// SharedMemoryPair — what every in-process experiment, the relay and the
// end-to-end tests set up — and the backend's description of the device
// it drives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pvnet/backend/device_setup.h"
#include "pvnet/backend/net_device.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/pair/shared_memory_pair.h"

namespace pvnet::pair {

class GuestPair : public SharedMemoryPair {
public:
    /// One queue pair of `queue_size` on both rings.
    std::optional<std::string> setup(uint16_t queue_size, bool event_idx) noexcept;
    /// Builds memory, doorbells and the driver; on failure returns a message.
    std::optional<std::string> setup(const frontend::VirtioNetConfig& fc) noexcept;

    /// The feature word the driver's configuration amounts to: VERSION_1,
    /// EVENT_IDX, INDIRECT_DESC, MRG_RXBUF, CTRL_VQ with NOTF_COAL (and, for
    /// more than one pair, MQ and RSS: the device then starts on pair 0
    /// until set_queue_pairs or set_rss), HASH_REPORT with hash_report, as
    /// the guest set them, plus `offloads` (the relay's CSUM/TSO bits).
    uint64_t features(uint64_t offloads = 0) const noexcept;
    /// The backend's description of the device this driver drives.
    backend::DeviceSetup device_setup(uint64_t offloads = 0) const;

    /// A ring broke on either side: the device needs a reset, or one of
    /// the driver's queues is broken.
    bool any_broken(const backend::NetDevice& dev) const noexcept;

    frontend::VirtioNet& fe() noexcept { return *fe_; }
    const frontend::VirtioNet& fe() const noexcept { return *fe_; }
    /// Queue pair 0, the one most experiments use.
    frontend::QueuePair& qp(uint16_t i = 0) noexcept { return fe_->queue_pair(i); }
    /// Pair p's doorbells as the driver sees them.
    const notify::EventFd& rx_kick(uint16_t p = 0) const noexcept { return kick(backend::rx_vring(p)); }
    const notify::EventFd& tx_kick(uint16_t p = 0) const noexcept { return kick(backend::tx_vring(p)); }
    const notify::EventFd& rx_call(uint16_t p = 0) const noexcept { return call(backend::rx_vring(p)); }
    const notify::EventFd& tx_call(uint16_t p = 0) const noexcept { return call(backend::tx_vring(p)); }

private:
    frontend::VirtioNetConfig fc_;
    std::unique_ptr<frontend::VirtioNet> fe_;
};

}  // namespace pvnet::pair
