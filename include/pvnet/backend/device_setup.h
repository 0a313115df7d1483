// The description of a configured virtio-net device, as the backend is told
// it from outside (DESIGN.md layer 7): the negotiated feature word, the
// memory model, and per vring its size, addresses, base, doorbells and
// enable bit. vhost-user's messages (SET_FEATURES, SET_MEM_TABLE,
// SET_VRING_NUM/ADDR/BASE/KICK/CALL/ERR/ENABLE), the in-process pairing
// (src/pair) and later grants all produce it; the device only consumes it.
//
// Vring numbering is virtio-net's (VIRTIO 1.2 5.1.2 "Virtqueues"): receiveq
// of pair p is 2p, transmitq 2p + 1, the control queue 2N (N = the device's
// max_virtqueue_pairs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "pvnet/mem/buffer_access.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/split_ring.h"

namespace pvnet::backend {

constexpr uint16_t rx_vring(uint16_t pair) noexcept { return static_cast<uint16_t>(2u * pair); }
constexpr uint16_t tx_vring(uint16_t pair) noexcept {
    return static_cast<uint16_t>(2u * pair + 1u);
}
constexpr uint16_t ctrl_vring(uint16_t max_pairs) noexcept {
    return static_cast<uint16_t>(2u * max_pairs);
}

/// Where a ring stands: the next avail index the device will read. The
/// used index is the ring's own used.idx (read when the ring starts, as
/// vhost_vq_init_access does), so a split ring's base is this one word,
/// which is all GET_VRING_BASE returns and SET_VRING_BASE sets.
struct VringBase {
    uint16_t last_avail_idx = 0;
    bool operator==(const VringBase&) const = default;
};

/// One vring as configured. The fds are borrowed: whoever set them keeps
/// them open while the vring may use them (until stop or a new setup).
struct VringSetup {
    ring::SplitRingAddrs addrs;           ///< size (a power of two) and the three areas
    VringBase base;
    const notify::EventFd* kick = nullptr;  ///< driver → device; null: polled only
    const notify::EventFd* call = nullptr;  ///< device → driver; null: no interrupts
    const notify::EventFd* err = nullptr;   ///< signalled once when the ring breaks
    bool enabled = true;  ///< vhost-user SET_VRING_ENABLE (configure() starts only enabled
                          ///< vrings; a started disabled tx vring discards its frames)
    /// Grants: how descriptors' buffers are reached (the memory table then
    /// holds only the rings). Null: buffers are guest addresses in the table.
    mem::BufferAccess* buffers = nullptr;
    /// vhost-user INFLIGHT_SHMFD: this vring's inflight log (ring/inflight.h),
    /// borrowed like the fds. Empty: none. With a log, start resumes where
    /// the log says (used.idx + the heads in flight), not at `base`, and
    /// returns what a dead predecessor left in flight used with length 0.
    std::span<std::byte> inflight;
};

/// A whole device: what start() of every enabled vring needs.
struct DeviceSetup {
    uint64_t features = 0;                    ///< the negotiated feature word
    const mem::MemoryTable* mem = nullptr;    ///< the backend's view of guest memory
    /// Indexed by vring number: 2 per queue pair, then the control queue
    /// when VIRTIO_NET_F_CTRL_VQ is in `features`.
    std::vector<VringSetup> vrings;
};

/// Why a control-plane call was refused. Ring defects found when a ring is
/// mapped are reported as BadRing; the ring's own reason is kept by the device.
enum class DeviceError : uint8_t {
    System,         ///< eventfd, epoll or timerfd creation failed
    NoMemory,       ///< allocation failed
    BadVring,       ///< vring index beyond the device's queues
    NotConfigured,  ///< the vring (or the memory table) was never set up
    Running,        ///< the call needs the vring (or every vring) stopped
    BadFeatures,    ///< features the device does not offer
    BadRing,        ///< the ring's size or addresses were rejected
    PortRefused,    ///< a port refused the features' offloads (a tap's TUNSETOFFLOAD)
    Count
};

std::string_view to_string(DeviceError e) noexcept;

}  // namespace pvnet::backend
