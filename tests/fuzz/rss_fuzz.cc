// Fuzz target: net::parse_rss_config, net::parse_hash_config,
// net::extract_hash_input, net::select_rx_queue and net::hash_frame
// (STYLE.md §11).
//
// Input: le16 queue pairs (1 + value % 0x8000), le32 hash types for the
// extractor alone, le16 split, then bytes: the first `split` are the
// RSS_CONFIG (and, read again, HASH_CONFIG) command data, the rest an
// Ethernet frame. Invariants: an accepted config obeys every limit and
// re-encodes (serialize_rss_config / _hash_config) to exactly its input
// (HASH_CONFIG's reserved words aside: the encoder writes zeroes); the hash
// input has the length and type its report names, of an enabled type, and
// is the same from an exact-size copy of the frame's first kHashHeadBytes
// and its length (what the device hashes); the selected queue is one the
// device has, the unclassified one without a hash.
#include <array>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/net/rss.h"

namespace pvnet::fuzz {
namespace {

namespace v = virtio;

void check_config(const net::RssConfig& c, std::span<const uint8_t> data, uint16_t pairs) {
    check((c.hash_types & ~net::kRssSupportedHashTypes) == 0);
    check(c.table_len >= 1 && c.table_len <= v::VIRTIO_NET_RSS_MAX_TABLE_LEN);
    check((c.table_len & (c.table_len - 1)) == 0);
    for (uint16_t i = 0; i < c.table_len; ++i) check(c.table[i] < pairs);
    check(c.unclassified_queue < pairs);
    check(c.max_tx_vq >= 1 && c.max_tx_vq <= pairs);
    check(c.key_len <= v::VIRTIO_NET_RSS_MAX_KEY_SIZE);
    check(c.key_len > 0 || c.hash_types == 0);
    for (std::size_t i = c.key_len; i < c.key.size(); ++i) check(c.key[i] == 0);
    // The driver's encoder gives back exactly the bytes the device accepted.
    const std::vector<uint8_t> e = net::serialize_rss_config(c);
    check(e.size() == data.size() && std::memcmp(e.data(), data.data(), e.size()) == 0);
}

void check_hash_config(const net::HashConfig& c, std::span<const uint8_t> data) {
    check((c.hash_types & ~net::kRssSupportedHashTypes) == 0);
    check(c.key_len <= v::VIRTIO_NET_RSS_MAX_KEY_SIZE);
    check(c.key_len > 0 || c.hash_types == 0);
    for (std::size_t i = c.key_len; i < c.key.size(); ++i) check(c.key[i] == 0);
    std::array<uint8_t, net::kHashConfigMaxBytes> e{};
    const std::size_t n = net::serialize_hash_config(c, e);
    check(n == data.size());
    // reserved[4] (bytes 4..11) are written as zeroes; the rest as sent.
    for (std::size_t i = 0; i < n; ++i) check(e[i] == (i >= 4 && i < 12 ? 0 : data[i]));
}

void check_input(const net::HashInput& in, uint32_t types) {
    struct Kind {
        uint16_t report;
        uint8_t len;
        uint32_t type;
    };
    static constexpr Kind kKinds[] = {
        {v::VIRTIO_NET_HASH_REPORT_IPv4, 8, v::VIRTIO_NET_RSS_HASH_TYPE_IPv4},
        {v::VIRTIO_NET_HASH_REPORT_TCPv4, 12, v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4},
        {v::VIRTIO_NET_HASH_REPORT_UDPv4, 12, v::VIRTIO_NET_RSS_HASH_TYPE_UDPv4},
        {v::VIRTIO_NET_HASH_REPORT_IPv6, 32, v::VIRTIO_NET_RSS_HASH_TYPE_IPv6},
        {v::VIRTIO_NET_HASH_REPORT_TCPv6, 36, v::VIRTIO_NET_RSS_HASH_TYPE_TCPv6},
        {v::VIRTIO_NET_HASH_REPORT_UDPv6, 36, v::VIRTIO_NET_RSS_HASH_TYPE_UDPv6},
    };
    if (in.hash_report == v::VIRTIO_NET_HASH_REPORT_NONE) {
        check(in.len == 0);
        return;
    }
    for (const Kind& k : kKinds) {
        if (k.report != in.hash_report) continue;
        check(in.len == k.len && (types & k.type) != 0);
        return;
    }
    fail();
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pvnet::fuzz;
    namespace net = pvnet::net;
    Reader in(data, size);
    const auto pairs = static_cast<uint16_t>(1 + in.u16() % 0x8000);
    const uint32_t types = in.u32();
    const uint16_t split = in.u16();
    // Exact-size copies: a read past either end is an ASan report.
    std::vector<uint8_t> rest;
    while (!in.empty()) rest.push_back(in.u8());
    const std::size_t cut = std::min<std::size_t>(split, rest.size());
    const std::vector<uint8_t> ctrl(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::vector<uint8_t> frame(rest.begin() + static_cast<std::ptrdiff_t>(cut), rest.end());

    const net::HashInput whole = net::extract_hash_input(frame, types);
    check_input(whole, types);
    const std::span<const uint8_t> head_span = net::hash_head(frame);
    const std::vector<uint8_t> head(head_span.begin(), head_span.end());
    const net::HashInput from_head =
        net::extract_hash_input(head, static_cast<uint32_t>(frame.size()), types);
    check(from_head.hash_report == whole.hash_report && from_head.len == whole.len &&
          std::memcmp(from_head.bytes.data(), whole.bytes.data(), whole.len) == 0);

    if (const auto hc = net::parse_hash_config(ctrl)) {
        check_hash_config(hc.value(), ctrl);
        const net::RxSteering h = net::hash_frame(hc.value(), head, static_cast<uint32_t>(frame.size()));
        check(h.queue == 0 && h.hash_report == net::extract_hash_input(frame, hc.value().hash_types).hash_report);
        check(h.hash_report != pvnet::virtio::VIRTIO_NET_HASH_REPORT_NONE || h.hash == 0);
    } else {
        check(hc.error() < net::RssError::Count);
    }

    const auto cfg = net::parse_rss_config(ctrl, pairs);
    if (!cfg) {
        check(cfg.error() < net::RssError::Count);
        return 0;
    }
    check_config(cfg.value(), ctrl, pairs);
    const net::RxSteering s = net::select_rx_queue(cfg.value(), frame);
    check(s.queue < pairs);
    const net::HashInput hi = net::extract_hash_input(frame, cfg.value().hash_types);
    check_input(hi, cfg.value().hash_types);
    check(s.hash_report == hi.hash_report);
    if (s.hash_report == pvnet::virtio::VIRTIO_NET_HASH_REPORT_NONE) {
        check(s.queue == cfg.value().unclassified_queue && s.hash == 0);
    } else {
        check(s.queue == cfg.value().table[s.hash & (cfg.value().table_len - 1u)]);
    }
    return 0;
}
