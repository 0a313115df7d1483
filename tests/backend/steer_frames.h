// Frames for the steering tests: Ethernet + IPv4 + UDP or TCP, IPv6 + UDP
// or TCP, the flow's ports given (the addresses fixed), so flows differ in
// their Toeplitz input; and ARP, which has none.
#pragma once

#include <cstdint>
#include <vector>

namespace pvnet::backend::test {

/// 10.0.0.1 -> 10.0.0.2, IPPROTO `proto` src_port -> dst_port: an L4 header
/// of `l4_hdr` bytes (ports first), then `payload` bytes; the IP length says so.
inline std::vector<uint8_t> ip4_frame(uint8_t proto, uint16_t src_port, uint16_t dst_port,
                                      uint32_t l4_hdr, uint32_t payload) {
    std::vector<uint8_t> f(14 + 20 + l4_hdr + payload, 0);
    f[12] = 0x08;  // ETH_P_IP
    uint8_t* ip = f.data() + 14;
    ip[0] = 0x45;
    const uint32_t ip_len = 20 + l4_hdr + payload;
    ip[2] = static_cast<uint8_t>(ip_len >> 8);
    ip[3] = static_cast<uint8_t>(ip_len & 0xffu);
    ip[8] = 64;
    ip[9] = proto;
    const uint8_t addrs[] = {10, 0, 0, 1, 10, 0, 0, 2};
    for (int i = 0; i < 8; ++i) ip[12 + i] = addrs[i];
    uint8_t* l4 = ip + 20;
    l4[0] = static_cast<uint8_t>(src_port >> 8);
    l4[1] = static_cast<uint8_t>(src_port & 0xffu);
    l4[2] = static_cast<uint8_t>(dst_port >> 8);
    l4[3] = static_cast<uint8_t>(dst_port & 0xffu);
    for (uint32_t i = 0; i < payload; ++i) l4[l4_hdr + i] = static_cast<uint8_t>(i * 13 + 5);
    return f;
}

/// UDP, 8 payload bytes.
inline std::vector<uint8_t> udp4_frame(uint16_t src_port, uint16_t dst_port) {
    std::vector<uint8_t> f = ip4_frame(17, src_port, dst_port, 8, 8);
    f[14 + 20 + 5] = 16;  // UDP length
    return f;
}

/// TCP, `payload` bytes (a GSO-sized frame up to 65495).
inline std::vector<uint8_t> tcp4_frame(uint16_t src_port, uint16_t dst_port,
                                       uint32_t payload = 8) {
    std::vector<uint8_t> f = ip4_frame(6, src_port, dst_port, 20, payload);
    f[14 + 20 + 12] = 0x50;  // data offset: 5 words
    return f;
}

/// 2001:db8::1 -> 2001:db8::2, `proto` (6 or 17) src_port -> dst_port, 8
/// payload bytes.
inline std::vector<uint8_t> ip6_frame(uint8_t proto, uint16_t src_port, uint16_t dst_port) {
    const uint32_t l4 = (proto == 6 ? 20u : 8u) + 8u;
    std::vector<uint8_t> f(14 + 40 + l4, 0);
    f[12] = 0x86;  // ETH_P_IPV6
    f[13] = 0xdd;
    uint8_t* ip = f.data() + 14;
    ip[0] = 0x60;
    ip[4] = static_cast<uint8_t>(l4 >> 8);
    ip[5] = static_cast<uint8_t>(l4 & 0xffu);
    ip[6] = proto;
    ip[7] = 64;
    for (int a = 0; a < 2; ++a) {
        ip[8 + 16 * a] = 0x20;
        ip[9 + 16 * a] = 0x01;
        ip[10 + 16 * a] = 0x0d;
        ip[11 + 16 * a] = 0xb8;
        ip[23 + 16 * a] = static_cast<uint8_t>(a + 1);
    }
    uint8_t* l4h = ip + 40;
    l4h[0] = static_cast<uint8_t>(src_port >> 8);
    l4h[1] = static_cast<uint8_t>(src_port & 0xffu);
    l4h[2] = static_cast<uint8_t>(dst_port >> 8);
    l4h[3] = static_cast<uint8_t>(dst_port & 0xffu);
    return f;
}

/// An ARP request: Ethernet, no IP, nothing to hash.
inline std::vector<uint8_t> arp_frame() {
    std::vector<uint8_t> f(14 + 28, 0);
    f[12] = 0x08;
    f[13] = 0x06;
    return f;
}

}  // namespace pvnet::backend::test
