// The grant connection's one message each way, over a unix SOCK_SEQPACKET
// socket (the role of Xen's event-channel and ring-reference xenstore keys
// plus the toolstack's setup): the frontend sends a GrantHello with its
// memfds and eventfds, the backend answers a GrantAck once the device runs.
//
// Layout of the frontend's shared memfd (mapped whole by the backend, like
// the shared ring pages netback maps once): the grant table at offset 0,
// then the rx ring and the tx ring, each desc / avail / used consecutively.
// The data memfd holds the pages the frontend grants; the backend reaches
// them only through grants.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pvnet/util/result.h"

namespace pvnet::grant {

inline constexpr uint32_t kHelloMagic = 0x70764e47;  // "pvNG"
inline constexpr uint16_t kWireVersion = 1;

/// The fds a hello carries, in this order.
enum HelloFd : std::size_t { kSharedFd, kDataFd, kRxKick, kRxCall, kTxKick, kTxCall, kHelloFds };

struct GrantHello {
    uint32_t magic = kHelloMagic;
    uint16_t version = kWireVersion;
    uint16_t domid = 0;
    uint32_t pid = 0;            ///< the frontend's; process_vm copies: must be the socket's peer
    uint16_t ring_size = 0;      ///< both rings; a power of two
    uint16_t frame_bytes = 0;    ///< the stream's Ethernet frame size (GenPort format)
    uint32_t grant_entries = 0;  ///< table at offset 0 of the shared memfd
    uint32_t reserved = 0;
    uint64_t shared_bytes = 0;
    uint64_t data_bytes = 0;
    uint64_t remote_base = 0;    ///< where the data memfd is mapped in the frontend (checked)
    uint64_t rx_ring_off = 0;
    uint64_t tx_ring_off = 0;
};

struct GrantAck {
    uint32_t magic = kHelloMagic;
    int32_t ok = 0;                  ///< 1: the device runs
    std::array<char, 16> mode{};     ///< the negotiated mode's name
    std::array<char, 104> error{};   ///< why not, NUL-terminated
};

inline constexpr uint16_t kMaxRingSize = 1024;
inline constexpr uint64_t kMaxDataBytes = uint64_t{1} << 30;
inline constexpr uint32_t kMaxGrantEntries = 1u << 16;

/// Bytes of one split ring of `size` entries as the hello lays it out
/// (desc, avail with used_event, then used with avail_event at 4-byte alignment).
uint64_t ring_bytes(uint16_t size) noexcept;
/// Offsets of the ring parts from the ring's start.
inline uint64_t ring_avail_off(uint16_t size) noexcept { return 16u * uint64_t{size}; }
uint64_t ring_used_off(uint16_t size) noexcept;

/// Validates a received hello (the peer is hostile): its size, magic,
/// version, domid, ring size, frame size, table and rings inside the shared
/// memfd, data size, and the fd count. The error names the bad field.
Result<GrantHello, std::string> parse_hello(std::span<const std::byte> msg, std::size_t nfds);

/// One message and its fds (SCM_RIGHTS). Error: errno text.
Status<std::string> send_msg(int sock, std::span<const std::byte> msg, std::span<const int> fds);
/// One message of at most `max` bytes, and the fds it carried (owned by the
/// caller; closed here on error). Waits at most `timeout_ms`.
Result<std::vector<std::byte>, std::string> recv_msg(int sock, std::size_t max,
                                                     std::vector<int>& fds, int timeout_ms);

}  // namespace pvnet::grant
