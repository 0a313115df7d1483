// Header sizes of the protocols the net layer parses (Linux's struct sizes),
// one definition for vnet_hdr.cc's checks and rss.cc's hash input.
#pragma once

#include <cstdint>

namespace pvnet::net {

/// sizeof(struct iphdr) without options, sizeof(struct ipv6hdr),
/// sizeof(struct tcphdr) without options, sizeof(struct udphdr).
inline constexpr uint32_t kIpv4HdrBytes = 20;
inline constexpr uint32_t kIpv6HdrBytes = 40;
inline constexpr uint32_t kTcpHdrBytes = 20;
inline constexpr uint32_t kUdpHdrBytes = 8;

}  // namespace pvnet::net
