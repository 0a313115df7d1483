// flow_hash_symmetric (flow_hash.h).
#include "pvnet/net/flow_hash.h"

#include <algorithm>
#include <cstring>

#include "pvnet/net/rss.h"

namespace pvnet::net {

uint32_t flow_hash_symmetric(std::span<const uint8_t> frame) noexcept {
    HashInput in = extract_hash_input(frame, kRssSupportedHashTypes);
    if (in.len == 0) return 0;
    // The input is source address, destination address, then (if any)
    // source port, destination port. Order the endpoints: the lower address
    // first, the lower port on equal addresses (__flow_hash_consistentify).
    const uint32_t addr = in.hash_report == virtio::VIRTIO_NET_HASH_REPORT_IPv6 ||
                                  in.hash_report == virtio::VIRTIO_NET_HASH_REPORT_TCPv6 ||
                                  in.hash_report == virtio::VIRTIO_NET_HASH_REPORT_UDPv6
                              ? 16
                              : 4;
    uint8_t* const b = in.bytes.data();
    const bool ports = in.len == 2 * addr + 4;
    const int by_addr = std::memcmp(b, b + addr, addr);
    if (by_addr > 0 ||
        (by_addr == 0 && ports && std::memcmp(b + 2 * addr, b + 2 * addr + 2, 2) > 0)) {
        std::swap_ranges(b, b + addr, b + addr);
        if (ports) std::swap_ranges(b + 2 * addr, b + 2 * addr + 2, b + 2 * addr + 2);
    }
    // FNV-1a over the ordered input and the L4 type; a flow never hashes to
    // 0, which means "no flow".
    uint32_t h = 2166136261u;
    auto mix = [&h](uint8_t byte) { h = (h ^ byte) * 16777619u; };
    for (uint8_t i = 0; i < in.len; ++i) mix(b[i]);
    mix(static_cast<uint8_t>(in.hash_report));
    return h == 0 ? 1 : h;
}

}  // namespace pvnet::net
