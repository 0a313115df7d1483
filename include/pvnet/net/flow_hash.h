// A flow's hash that is the same in both directions: Linux's
// __skb_get_hash_symmetric, which tun's flow table (tun_flow_update /
// tun_automq_select_queue) keys on, so that a reply finds the queue its
// request arrived on. The frame is hostile: it is parsed by
// extract_hash_input (rss.h), bounds-checked throughout.
#pragma once

#include <cstdint>
#include <span>

namespace pvnet::net {

/// The symmetric flow hash of an Ethernet `frame` (no virtio_net_hdr): its
/// addresses (and TCP/UDP ports), ordered so that swapping source and
/// destination gives the same value, and the L4 type. 0 when the frame has
/// no IPv4/IPv6 header to hash (ARP, a short frame): no flow.
uint32_t flow_hash_symmetric(std::span<const uint8_t> frame) noexcept;

}  // namespace pvnet::net
