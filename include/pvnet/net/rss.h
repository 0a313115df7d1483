// Receive-side scaling (VIRTIO_NET_F_RSS, VIRTIO 1.2 "Hash calculation for
// incoming packets" and 5.1.6.5.5 "Automatic receive steering in multiqueue
// mode"): the Toeplitz hash, the hash input taken from a
// received Ethernet frame, the guest's VIRTIO_NET_CTRL_MQ_RSS_CONFIG command,
// and the rx queue that config picks for a frame; for VIRTIO_NET_F_HASH_REPORT
// without RSS, the guest's VIRTIO_NET_CTRL_MQ_HASH_CONFIG and the hash alone.
//
// Supported hash types: IPv4, TCPv4, UDPv4, IPv6, TCPv6, UDPv6. The _EX types
// (addresses from IPv6 home-address / routing headers) are not offered. Both
// the frame and the command come from outside pvnet: every read is bounds-
// checked, a frame that cannot be parsed gets no hash (it goes to the
// unclassified queue), a bad command is rejected whole.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "pvnet/util/result.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::net {

/// What the device offers in supported_hash_types.
inline constexpr uint32_t kRssSupportedHashTypes =
    virtio::VIRTIO_NET_RSS_HASH_TYPE_IPv4 | virtio::VIRTIO_NET_RSS_HASH_TYPE_TCPv4 |
    virtio::VIRTIO_NET_RSS_HASH_TYPE_UDPv4 | virtio::VIRTIO_NET_RSS_HASH_TYPE_IPv6 |
    virtio::VIRTIO_NET_RSS_HASH_TYPE_TCPv6 | virtio::VIRTIO_NET_RSS_HASH_TYPE_UDPv6;

/// The Toeplitz hash: for every set bit i of `input` (MSB first), XOR in the
/// 32 key bits starting at bit i. Key bits past the end of `key` count as 0,
/// as in QEMU, which zero-pads a short key to 40 bytes.
uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input) noexcept;

/// The hash input of one frame: source then destination address, then source
/// then destination port, in network byte order (the spec's order, and
/// Microsoft's). `hash_report` is VIRTIO_NET_HASH_REPORT_NONE when the frame
/// gets no hash; `len` is 0 then.
struct HashInput {
    std::array<uint8_t, 36> bytes{};
    uint8_t len = 0;
    uint16_t hash_report = virtio::VIRTIO_NET_HASH_REPORT_NONE;

    std::span<const uint8_t> span() const noexcept { return {bytes.data(), len}; }
};

/// The bytes of a frame the hash input is looked for in. Every header the
/// parser reads lies in them, so the input of a frame depends only on its
/// first kHashHeadBytes and its length: the device hashes a copy of that
/// much of a frame its port wrote into guest memory (VIRTIO_NET_F_HASH_REPORT)
/// and gets what a steering of the whole frame got. An L4 header that IPv6
/// extension headers push past them is not found (the addresses are hashed).
inline constexpr uint32_t kHashHeadBytes = 256;
/// A whole frame as the (head, frame_len) the functions below take.
inline std::span<const uint8_t> hash_head(std::span<const uint8_t> frame) noexcept {
    return frame.first(frame.size() < kHashHeadBytes ? frame.size() : kHashHeadBytes);
}
inline uint32_t hash_frame_len(std::span<const uint8_t> frame) noexcept {
    return frame.size() < UINT32_MAX ? static_cast<uint32_t>(frame.size()) : UINT32_MAX;
}

/// Picks the hash input of an Ethernet `frame` (without the virtio_net_hdr)
/// under the enabled `hash_types`, by the spec's rules: TCP if enabled and
/// the packet has a TCP header, else UDP likewise, else IP if enabled, else
/// none. Parsed: one optional 802.1Q tag; IPv4 with options (a fragment has no
/// L4 header); IPv6 with hop-by-hop, routing and destination-options headers
/// (a fragment header, AH, ESP or an unknown header ends at IP). A frame cut
/// short of its IP header or of the IP length it claims gets no hash.
HashInput extract_hash_input(std::span<const uint8_t> frame, uint32_t hash_types) noexcept;
/// The same from the frame's first bytes `head` (at least
/// min(frame_len, kHashHeadBytes) of them) and its length `frame_len`.
HashInput extract_hash_input(std::span<const uint8_t> head, uint32_t frame_len,
                             uint32_t hash_types) noexcept;

/// Why the device rejects a VIRTIO_NET_CTRL_MQ_RSS_CONFIG or _HASH_CONFIG
/// (acked VIRTIO_NET_ERR); HASH_CONFIG has no table, so only DataTooShort,
/// TrailingBytes, UnsupportedHashType, KeyTooLong and KeyMissing apply.
enum class RssError : uint8_t {
    DataTooShort,              ///< ends inside the fixed fields, the table or the key
    TrailingBytes,             ///< bytes after hash_key_data
    UnsupportedHashType,       ///< a hash_types bit outside supported_hash_types
    TableLengthNotPowerOfTwo,  ///< indirection_table_mask + 1 not a power of two
    TableTooLong,              ///< more than VIRTIO_NET_RSS_MAX_TABLE_LEN entries
    TableQueueOutOfRange,      ///< an indirection_table entry >= the queue pairs
    UnclassifiedOutOfRange,    ///< unclassified_queue >= the queue pairs
    MaxTxVqOutOfRange,         ///< max_tx_vq 0 or above the queue pairs
    KeyTooLong,                ///< hash_key_length > VIRTIO_NET_RSS_MAX_KEY_SIZE
    KeyMissing,                ///< hash types enabled with an empty key
    Count
};

std::string_view to_string(RssError e) noexcept;

/// A validated RSS configuration. Queues are receiveq numbers counted from 0
/// (0 is receiveq1), as the spec and Linux's driver write them.
struct RssConfig {
    uint32_t hash_types = 0;
    std::array<uint8_t, virtio::VIRTIO_NET_RSS_MAX_KEY_SIZE> key{};  ///< zero past key_len
    uint8_t key_len = 0;
    std::array<uint16_t, virtio::VIRTIO_NET_RSS_MAX_TABLE_LEN> table{};
    uint16_t table_len = 1;  ///< a power of two, <= VIRTIO_NET_RSS_MAX_TABLE_LEN
    uint16_t unclassified_queue = 0;
    uint16_t max_tx_vq = 1;
};

/// The longest valid struct virtio_net_rss_config: the fixed fields, a
/// table of VIRTIO_NET_RSS_MAX_TABLE_LEN entries, a key of
/// VIRTIO_NET_RSS_MAX_KEY_SIZE bytes.
inline constexpr std::size_t kRssConfigMaxBytes = 4 + 2 + 2 +
                                                  2 * virtio::VIRTIO_NET_RSS_MAX_TABLE_LEN + 2 + 1 +
                                                  virtio::VIRTIO_NET_RSS_MAX_KEY_SIZE;

/// Parses the command-specific data of VIRTIO_NET_CTRL_MQ_RSS_CONFIG (struct
/// virtio_net_rss_config: le32 hash_types; le16 indirection_table_mask; le16
/// unclassified_queue; le16 indirection_table[mask + 1]; le16 max_tx_vq; u8
/// hash_key_length; u8 hash_key_data[hash_key_length]), exactly that long,
/// against a device with `max_pairs` queue pairs.
Result<RssConfig, RssError> parse_rss_config(std::span<const uint8_t> ctrl_data,
                                             uint16_t max_pairs) noexcept;

/// The driver's side: `cfg` as struct virtio_net_rss_config (table_len
/// entries, key_len key bytes), the bytes parse_rss_config takes back.
std::vector<uint8_t> serialize_rss_config(const RssConfig& cfg);
/// The same into `out`, without allocating; returns the bytes written.
std::size_t serialize_rss_config(const RssConfig& cfg,
                                 std::span<uint8_t, kRssConfigMaxBytes> out) noexcept;

/// A validated VIRTIO_NET_CTRL_MQ_HASH_CONFIG (VIRTIO_NET_F_HASH_REPORT
/// without VIRTIO_NET_F_RSS): what to hash and with which key, no steering.
struct HashConfig {
    uint32_t hash_types = 0;
    std::array<uint8_t, virtio::VIRTIO_NET_RSS_MAX_KEY_SIZE> key{};  ///< zero past key_len
    uint8_t key_len = 0;
};

/// The longest valid struct virtio_net_hash_config (a 40-byte key).
inline constexpr std::size_t kHashConfigMaxBytes =
    virtio::kHashConfigFixedBytes + virtio::VIRTIO_NET_RSS_MAX_KEY_SIZE;

/// Parses the command-specific data of VIRTIO_NET_CTRL_MQ_HASH_CONFIG (struct
/// virtio_net_hash_config: le32 hash_types; le16 reserved[4]; u8
/// hash_key_length; u8 hash_key_data[hash_key_length]), exactly that long.
/// `reserved` is not checked: the spec asks the driver for zeroes, and Linux
/// drivers before 6.5 send max_tx_vq there (the RSS_CONFIG layout they share).
Result<HashConfig, RssError> parse_hash_config(std::span<const uint8_t> ctrl_data) noexcept;
/// The driver's side: `cfg` as struct virtio_net_hash_config into `out`
/// (reserved zero), without allocating; returns the bytes written.
std::size_t serialize_hash_config(const HashConfig& cfg,
                                  std::span<uint8_t, kHashConfigMaxBytes> out) noexcept;

/// Where a received frame goes, and what VIRTIO_NET_F_HASH_REPORT reports.
struct RxSteering {
    uint16_t queue = 0;
    uint32_t hash = 0;
    uint16_t hash_report = virtio::VIRTIO_NET_HASH_REPORT_NONE;
};

/// The spec's destination rule: no hash, unclassified_queue; else
/// table[hash & (table_len - 1)].
RxSteering select_rx_queue(const RssConfig& cfg, std::span<const uint8_t> frame) noexcept;
/// The same from the frame's head and length (extract_hash_input's).
RxSteering select_rx_queue(const RssConfig& cfg, std::span<const uint8_t> head,
                           uint32_t frame_len) noexcept;
/// The hash alone ("Hash calculation for incoming packets" under
/// HASH_CONFIG): queue 0, hash and hash_report (NONE: not calculated).
RxSteering hash_frame(const HashConfig& cfg, std::span<const uint8_t> head,
                      uint32_t frame_len) noexcept;

}  // namespace pvnet::net
