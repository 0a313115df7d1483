// virtio-net wire formats: VIRTIO 1.2 "Network Device" (5.1): the per-packet
// header, the device configuration layout and the control virtqueue's
// commands (5.1.6.5 "Control Virtqueue", 5.1.6.5.5 "Automatic receive steering
// in multiqueue mode", 5.1.6.5.9 "Notifications Coalescing").
#pragma once

#include <cstddef>
#include <cstdint>

#include "pvnet/virtio/le.h"

namespace pvnet::virtio {

inline constexpr uint8_t VIRTIO_NET_HDR_F_NEEDS_CSUM = 1;
inline constexpr uint8_t VIRTIO_NET_HDR_F_DATA_VALID = 2;
inline constexpr uint8_t VIRTIO_NET_HDR_F_RSC_INFO = 4;

inline constexpr uint8_t VIRTIO_NET_HDR_GSO_NONE = 0;
inline constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV4 = 1;
inline constexpr uint8_t VIRTIO_NET_HDR_GSO_UDP = 3;
inline constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV6 = 4;
inline constexpr uint8_t VIRTIO_NET_HDR_GSO_UDP_L4 = 5;
inline constexpr uint8_t VIRTIO_NET_HDR_GSO_ECN = 0x80;

/// With VIRTIO_F_VERSION_1 the header always carries num_buffers (5.1.6).
struct virtio_net_hdr {
    uint8_t flags;
    uint8_t gso_type;
    Le16 hdr_len;
    Le16 gso_size;
    Le16 csum_start;
    Le16 csum_offset;
    Le16 num_buffers;
};
static_assert(sizeof(virtio_net_hdr) == 12);
static_assert(offsetof(virtio_net_hdr, hdr_len) == 2 && offsetof(virtio_net_hdr, gso_size) == 4 &&
              offsetof(virtio_net_hdr, csum_start) == 6 &&
              offsetof(virtio_net_hdr, csum_offset) == 8 &&
              offsetof(virtio_net_hdr, num_buffers) == 10);

/// With VIRTIO_NET_F_HASH_REPORT the header grows by the hash and its type
/// (5.1.6 "struct virtio_net_hdr_v1_hash"), in both directions: the device
/// fills the two fields on rx; on tx the driver's are ignored.
struct virtio_net_hdr_v1_hash {
    virtio_net_hdr hdr;
    Le32 hash_value;
    Le16 hash_report;
    Le16 padding_reserved;
};
static_assert(sizeof(virtio_net_hdr_v1_hash) == 20);
static_assert(offsetof(virtio_net_hdr_v1_hash, hash_value) == 12 &&
              offsetof(virtio_net_hdr_v1_hash, hash_report) == 16 &&
              offsetof(virtio_net_hdr_v1_hash, padding_reserved) == 18);
/// The bytes VIRTIO_NET_F_HASH_REPORT adds after struct virtio_net_hdr.
inline constexpr uint32_t kHashHdrExtraBytes =
    sizeof(virtio_net_hdr_v1_hash) - sizeof(virtio_net_hdr);

/// hash_report values ("Hash reporting for incoming packets").
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_NONE = 0;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_IPv4 = 1;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_TCPv4 = 2;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_UDPv4 = 3;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_IPv6 = 4;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_TCPv6 = 5;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_UDPv6 = 6;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_IPv6_EX = 7;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_TCPv6_EX = 8;
inline constexpr uint16_t VIRTIO_NET_HASH_REPORT_UDPv6_EX = 9;

/// Hash type bits of supported_hash_types and of the RSS/hash commands
/// ("Hash calculation for incoming packets", "Supported/enabled hash types").
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_IPv4 = 1u << 0;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_TCPv4 = 1u << 1;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_UDPv4 = 1u << 2;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_IPv6 = 1u << 3;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_TCPv6 = 1u << 4;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_UDPv6 = 1u << 5;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_IP_EX = 1u << 6;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_TCP_EX = 1u << 7;
inline constexpr uint32_t VIRTIO_NET_RSS_HASH_TYPE_UDP_EX = 1u << 8;

inline constexpr uint16_t VIRTIO_NET_S_LINK_UP = 1;

struct virtio_net_config {
    uint8_t mac[6];
    Le16 status;
    Le16 max_virtqueue_pairs;
    Le16 mtu;
    Le32 speed;
    uint8_t duplex;
    uint8_t rss_max_key_size;
    Le16 rss_max_indirection_table_length;
    Le32 supported_hash_types;
};
static_assert(offsetof(virtio_net_config, status) == 6);
static_assert(offsetof(virtio_net_config, max_virtqueue_pairs) == 8);
static_assert(offsetof(virtio_net_config, mtu) == 10);
static_assert(offsetof(virtio_net_config, speed) == 12);
static_assert(offsetof(virtio_net_config, duplex) == 16);
static_assert(offsetof(virtio_net_config, supported_hash_types) == 20);
static_assert(sizeof(virtio_net_config) == 24);

/// Control virtqueue (5.1.6.5): the driver-readable header, then the
/// command-specific data, then one device-writable ack byte.
struct virtio_net_ctrl_hdr {
    uint8_t class_;  ///< the spec's `class` (a C++ keyword)
    uint8_t cmd;
};
static_assert(sizeof(virtio_net_ctrl_hdr) == 2 && offsetof(virtio_net_ctrl_hdr, cmd) == 1);

/// The ack byte.
inline constexpr uint8_t VIRTIO_NET_OK = 0;
inline constexpr uint8_t VIRTIO_NET_ERR = 1;

/// Multiqueue (5.1.6.5.5): VQ_PAIRS_SET with VIRTIO_NET_F_MQ, RSS_CONFIG with
/// VIRTIO_NET_F_RSS, HASH_CONFIG with VIRTIO_NET_F_HASH_REPORT.
inline constexpr uint8_t VIRTIO_NET_CTRL_MQ = 4;
inline constexpr uint8_t VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET = 0;
inline constexpr uint8_t VIRTIO_NET_CTRL_MQ_RSS_CONFIG = 1;
inline constexpr uint8_t VIRTIO_NET_CTRL_MQ_HASH_CONFIG = 2;
inline constexpr uint16_t VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN = 1;
inline constexpr uint16_t VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MAX = 0x8000;
/// VQ_PAIRS_SET's command-specific data.
struct virtio_net_ctrl_mq {
    Le16 virtqueue_pairs;
};
static_assert(sizeof(virtio_net_ctrl_mq) == 2);

/// VIRTIO_NET_CTRL_MQ_HASH_CONFIG's fixed fields ("Hash calculation"):
/// hash_key_data[hash_key_length] follows. reserved matches the layout of
/// virtio_net_rss_config's indirection_table_mask .. max_tx_vq.
struct virtio_net_hash_config {
    Le32 hash_types;
    Le16 reserved[4];
    uint8_t hash_key_length;
};
static_assert(offsetof(virtio_net_hash_config, reserved) == 4 &&
              offsetof(virtio_net_hash_config, hash_key_length) == 12);
/// The fixed fields' wire length (sizeof pads the struct to Le32's alignment).
inline constexpr std::size_t kHashConfigFixedBytes =
    offsetof(virtio_net_hash_config, hash_key_length) + 1;

/// Linux's limits for the key and the indirection table (the spec asks the
/// device for at least these, rss_max_key_size / rss_max_indirection_table_length).
inline constexpr uint8_t VIRTIO_NET_RSS_MAX_KEY_SIZE = 40;
inline constexpr uint16_t VIRTIO_NET_RSS_MAX_TABLE_LEN = 128;

/// Notifications coalescing (5.1.6.5.9), with VIRTIO_NET_F_NOTF_COAL.
inline constexpr uint8_t VIRTIO_NET_CTRL_NOTF_COAL = 6;
inline constexpr uint8_t VIRTIO_NET_CTRL_NOTF_COAL_TX_SET = 0;
inline constexpr uint8_t VIRTIO_NET_CTRL_NOTF_COAL_RX_SET = 1;

struct virtio_net_ctrl_coal_tx {
    Le32 tx_max_packets;
    Le32 tx_usecs;
};
static_assert(sizeof(virtio_net_ctrl_coal_tx) == 8 &&
              offsetof(virtio_net_ctrl_coal_tx, tx_usecs) == 4);

struct virtio_net_ctrl_coal_rx {
    Le32 rx_max_packets;
    Le32 rx_usecs;
};
static_assert(sizeof(virtio_net_ctrl_coal_rx) == 8 &&
              offsetof(virtio_net_ctrl_coal_rx, rx_usecs) == 4);

}  // namespace pvnet::virtio
