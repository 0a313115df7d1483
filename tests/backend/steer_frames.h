// Frames for the steering tests: Ethernet + IPv4 + UDP, the flow's ports
// given (the addresses fixed), so flows differ in their Toeplitz input.
#pragma once

#include <cstdint>
#include <vector>

namespace pvnet::backend::test {

/// 10.0.0.1 -> 10.0.0.2, UDP src_port -> dst_port, 8 payload bytes.
inline std::vector<uint8_t> udp4_frame(uint16_t src_port, uint16_t dst_port) {
    std::vector<uint8_t> f(14 + 20 + 8 + 8, 0);
    f[12] = 0x08;  // ETH_P_IP
    uint8_t* ip = f.data() + 14;
    ip[0] = 0x45;
    const uint16_t ip_len = 20 + 8 + 8;
    ip[2] = static_cast<uint8_t>(ip_len >> 8);
    ip[3] = static_cast<uint8_t>(ip_len & 0xffu);
    ip[8] = 64;
    ip[9] = 17;  // IPPROTO_UDP
    const uint8_t addrs[] = {10, 0, 0, 1, 10, 0, 0, 2};
    for (int i = 0; i < 8; ++i) ip[12 + i] = addrs[i];
    uint8_t* udp = ip + 20;
    udp[0] = static_cast<uint8_t>(src_port >> 8);
    udp[1] = static_cast<uint8_t>(src_port & 0xffu);
    udp[2] = static_cast<uint8_t>(dst_port >> 8);
    udp[3] = static_cast<uint8_t>(dst_port & 0xffu);
    udp[5] = 16;  // length
    return f;
}

}  // namespace pvnet::backend::test
