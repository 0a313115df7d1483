// Feature bits pvnet negotiates: VIRTIO 1.2 "Reserved Feature Bits" and
// "Network Device: Feature bits". Bit numbers, not masks; use feature_mask().
#pragma once

#include <cstdint>
#include <string_view>

namespace pvnet::virtio {

// Device-independent (VIRTIO 1.2 §6).
inline constexpr unsigned VIRTIO_F_NOTIFY_ON_EMPTY = 24;
inline constexpr unsigned VIRTIO_F_ANY_LAYOUT = 27;
inline constexpr unsigned VIRTIO_RING_F_INDIRECT_DESC = 28;
inline constexpr unsigned VIRTIO_RING_F_EVENT_IDX = 29;
inline constexpr unsigned VIRTIO_F_VERSION_1 = 32;
inline constexpr unsigned VIRTIO_F_ACCESS_PLATFORM = 33;
inline constexpr unsigned VIRTIO_F_RING_PACKED = 34;
inline constexpr unsigned VIRTIO_F_IN_ORDER = 35;

// virtio-net (VIRTIO 1.2 §5.1.3).
inline constexpr unsigned VIRTIO_NET_F_CSUM = 0;
inline constexpr unsigned VIRTIO_NET_F_GUEST_CSUM = 1;
inline constexpr unsigned VIRTIO_NET_F_CTRL_GUEST_OFFLOADS = 2;
inline constexpr unsigned VIRTIO_NET_F_MTU = 3;
inline constexpr unsigned VIRTIO_NET_F_MAC = 5;
inline constexpr unsigned VIRTIO_NET_F_GUEST_TSO4 = 7;
inline constexpr unsigned VIRTIO_NET_F_GUEST_TSO6 = 8;
inline constexpr unsigned VIRTIO_NET_F_GUEST_ECN = 9;
inline constexpr unsigned VIRTIO_NET_F_GUEST_UFO = 10;
inline constexpr unsigned VIRTIO_NET_F_HOST_TSO4 = 11;
inline constexpr unsigned VIRTIO_NET_F_HOST_TSO6 = 12;
inline constexpr unsigned VIRTIO_NET_F_HOST_ECN = 13;
inline constexpr unsigned VIRTIO_NET_F_HOST_UFO = 14;
inline constexpr unsigned VIRTIO_NET_F_MRG_RXBUF = 15;
inline constexpr unsigned VIRTIO_NET_F_STATUS = 16;
inline constexpr unsigned VIRTIO_NET_F_CTRL_VQ = 17;
inline constexpr unsigned VIRTIO_NET_F_CTRL_RX = 18;
inline constexpr unsigned VIRTIO_NET_F_MQ = 22;
inline constexpr unsigned VIRTIO_NET_F_NOTF_COAL = 53;
inline constexpr unsigned VIRTIO_NET_F_HASH_REPORT = 57;
inline constexpr unsigned VIRTIO_NET_F_RSS = 60;

// Device status (VIRTIO 1.2 §2.1).
inline constexpr uint8_t VIRTIO_CONFIG_S_ACKNOWLEDGE = 1;
inline constexpr uint8_t VIRTIO_CONFIG_S_DRIVER = 2;
inline constexpr uint8_t VIRTIO_CONFIG_S_DRIVER_OK = 4;
inline constexpr uint8_t VIRTIO_CONFIG_S_FEATURES_OK = 8;
inline constexpr uint8_t VIRTIO_CONFIG_S_NEEDS_RESET = 64;
inline constexpr uint8_t VIRTIO_CONFIG_S_FAILED = 128;

constexpr uint64_t feature_mask(unsigned bit) noexcept { return uint64_t{1} << bit; }
constexpr bool has_feature(uint64_t features, unsigned bit) noexcept {
    return (features & feature_mask(bit)) != 0;
}

/// The spec's name for a feature bit ("VIRTIO_RING_F_EVENT_IDX"), or "" if
/// pvnet does not know it.
std::string_view feature_name(unsigned bit) noexcept;

}  // namespace pvnet::virtio
