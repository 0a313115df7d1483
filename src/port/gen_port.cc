// GenPort frame generator and sink: a header template built once per frame
// size (RFC 791 IPv4 header with its RFC 1071 checksum, RFC 768 UDP with the
// checksum left 0), then per frame one template copy, the seq and the pattern
// in 8-byte words. The sink checks the same fields and every payload byte,
// then places the seq in a sliding window (as IPsec's anti-replay window,
// RFC 4303 3.4.3) to tell loss, reordering and duplicates apart.
#include "pvnet/port/gen_port.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace pvnet::port {
namespace {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kIpv4VersionIhl = 0x45;  // version 4, 5 words: no options
constexpr uint16_t kIpv4FlagDf = 0x4000;
constexpr uint16_t kIpv4FragMask = 0x3fff;  // MF and fragment offset
constexpr uint8_t kIpv4Ttl = 64;
constexpr uint8_t kIpProtoUdp = 17;

// Pattern word k of frame seq: pattern_base(seq) + k * kPatternStep. Both
// constants are odd, so base is a bijection of seq: a frame whose seq field
// was changed fails the check of its first pattern word.
constexpr uint64_t kPatternMul = 0x9e3779b97f4a7c15;
constexpr uint64_t kPatternSeed = 0x5a5a5a5a5a5a5a5a;
constexpr uint64_t kPatternStep = 0xd1b54a32d192ed03;

constexpr uint64_t pattern_base(uint64_t seq) noexcept {
    return (seq ^ kPatternSeed) * kPatternMul;
}

// The 8 bytes that end a pattern with a `tail`-byte cut word: the last
// 8 - tail bytes of the whole word `prev`, then the first tail bytes of `cut`
// (little-endian). Writing them with one store ending at the frame's end
// avoids a byte loop; the overlap rewrites bytes with the values they have.
constexpr uint64_t tail_word(uint64_t prev, uint64_t cut, uint32_t tail) noexcept {
    return (prev >> (8 * tail)) | (cut << (8 * (8 - tail)));
}

uint64_t to_le64(uint64_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        return v;
    } else {
        return __builtin_bswap64(v);
    }
}
uint64_t to_be64(uint64_t v) noexcept {
    if constexpr (std::endian::native == std::endian::big) {
        return v;
    } else {
        return __builtin_bswap64(v);
    }
}

void store_le64(std::byte* p, uint64_t v) noexcept {
    v = to_le64(v);
    std::memcpy(p, &v, sizeof v);
}
uint64_t load_le64(const std::byte* p) noexcept {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return to_le64(v);
}
uint64_t load_be64(const std::byte* p) noexcept {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return to_be64(v);
}
uint16_t load_be16(const std::byte* p) noexcept {
    return static_cast<uint16_t>((std::to_integer<uint16_t>(p[0]) << 8) |
                                 std::to_integer<uint16_t>(p[1]));
}
void put_be16(std::byte* p, uint16_t v) noexcept {
    p[0] = static_cast<std::byte>(v >> 8);
    p[1] = static_cast<std::byte>(v & 0xff);
}

// RFC 1071: a header whose checksum field is right sums to 0xffff. The
// ones'-complement sum does not depend on byte order or on summing 32-bit
// rather than 16-bit words, once folded.
bool ipv4_checksum_ok(const std::byte* ip) noexcept {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < kIpv4HdrBytes; i += 4) {
        uint32_t w;
        std::memcpy(&w, ip + i, sizeof w);
        sum += w;
    }
    sum = (sum & 0xffffffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

uint16_t ipv4_checksum(const std::byte* ip) noexcept {
    uint32_t sum = 0;
    for (uint32_t i = 0; i < kIpv4HdrBytes; i += 2) sum += load_be16(ip + i);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum & 0xffff);
}

void fill_frame(const std::array<std::byte, kHdrBytes>& hdr, uint32_t words, uint32_t tail,
                uint64_t seq, std::byte* dst) noexcept {
    std::memcpy(dst, hdr.data(), kHdrBytes);
    const uint64_t seq_be = to_be64(seq);
    std::memcpy(dst + kSeqOffset, &seq_be, sizeof seq_be);
    std::byte* p = dst + kPatternOffset;
    uint64_t w = pattern_base(seq);
    for (uint32_t k = 0; k < words; ++k, p += 8, w += kPatternStep) store_le64(p, w);
    // words >= 1 (FrameFormat::create), so the tail store stays in the pattern.
    if (tail != 0) store_le64(p + tail - 8, tail_word(w - kPatternStep, w, tail));
}

// Bytes in `iov` up to `need`: enough to tell whether `need` fit.
std::size_t room_bytes(std::span<const iovec> iov, std::size_t need) noexcept {
    std::size_t room = 0;
    for (const iovec& v : iov) {
        room += v.iov_len;
        if (room >= need) break;
    }
    return room;
}

}  // namespace

std::string_view to_string(PortError e) noexcept {
    switch (e) {
        case PortError::BadFrameSize:
            return "bad frame size";
        case PortError::BadFlowId:
            return "bad flow id";
        case PortError::BadArenaSize:
            return "bad peer queue size";
        case PortError::SystemError:
            return "system error";
        case PortError::Count:
            break;
    }
    return "unknown port error";
}

std::string_view to_string(SinkResult r) noexcept {
    switch (r) {
        case SinkResult::InOrder:
            return "in order";
        case SinkResult::AfterGap:
            return "after gap";
        case SinkResult::Reordered:
            return "reordered";
        case SinkResult::Duplicate:
            return "duplicate";
        case SinkResult::BadLen:
            return "bad length";
        case SinkResult::BadEthType:
            return "bad EtherType";
        case SinkResult::BadIpHeader:
            return "bad IPv4 header";
        case SinkResult::BadIpChecksum:
            return "bad IPv4 checksum";
        case SinkResult::BadUdpLen:
            return "bad UDP length";
        case SinkResult::BadPayload:
            return "bad payload";
        case SinkResult::Count:
            break;
    }
    return "unknown sink result";
}

Result<FrameFormat, PortError> FrameFormat::create(uint32_t frame_bytes,
                                                   uint16_t flow_id) noexcept {
    if (frame_bytes < kMinFrameBytes || frame_bytes > kMaxFrameBytes) {
        return unexpected(PortError::BadFrameSize);
    }
    if (flow_id > UINT16_MAX - kUdpSrcPortBase) return unexpected(PortError::BadFlowId);

    FrameFormat f;
    f.frame_bytes_ = frame_bytes;
    f.flow_id_ = flow_id;
    f.pattern_words_ = (frame_bytes - kPatternOffset) / 8;
    f.pattern_tail_ = (frame_bytes - kPatternOffset) % 8;

    std::byte* eth = f.hdr_.data();
    std::memcpy(eth, kDstMac.data(), kDstMac.size());
    std::memcpy(eth + 6, kSrcMac.data(), kSrcMac.size());
    put_be16(eth + 12, kEtherTypeIpv4);

    std::byte* ip = eth + kEthHdrBytes;
    ip[0] = std::byte{kIpv4VersionIhl};
    put_be16(ip + 2, static_cast<uint16_t>(frame_bytes - kEthHdrBytes));
    put_be16(ip + 6, kIpv4FlagDf);  // id 0: allowed for atomic datagrams (RFC 6864)
    ip[8] = std::byte{kIpv4Ttl};
    ip[9] = std::byte{kIpProtoUdp};
    std::memcpy(ip + 12, kSrcIp.data(), kSrcIp.size());
    std::memcpy(ip + 16, kDstIp.data(), kDstIp.size());
    put_be16(ip + 10, ipv4_checksum(ip));

    std::byte* udp = ip + kIpv4HdrBytes;
    put_be16(udp, static_cast<uint16_t>(kUdpSrcPortBase + flow_id));
    put_be16(udp + 2, kUdpDstPort);
    put_be16(udp + 4, static_cast<uint16_t>(frame_bytes - kEthHdrBytes - kIpv4HdrBytes));
    // UDP checksum 0: "no checksum" over IPv4 (RFC 768).
    return f;
}

uint32_t FrameGen::write_frame(uint64_t seq, std::byte* dst, uint32_t room) noexcept {
    const uint32_t n = fmt_.frame_bytes_;
    if (room < n) {
        drop_no_room_.add();
        return 0;
    }
    fill_frame(fmt_.hdr_, fmt_.pattern_words_, fmt_.pattern_tail_, seq, dst);
    pkts_.add();
    bytes_.add(n);
    return n;
}

uint32_t FrameGen::write_frame(uint64_t seq, std::span<const iovec> dst) noexcept {
    const uint32_t n = fmt_.frame_bytes_;
    if (!dst.empty() && dst[0].iov_len >= n) {
        return write_frame(seq, static_cast<std::byte*>(dst[0].iov_base), n);
    }
    if (room_bytes(dst, n) < n) {
        drop_no_room_.add();
        return 0;
    }
    // Split destination: build the frame on the stack, then scatter it.
    std::array<std::byte, kMaxFrameBytes> frame;
    fill_frame(fmt_.hdr_, fmt_.pattern_words_, fmt_.pattern_tail_, seq, frame.data());
    std::size_t off = 0;
    for (const iovec& v : dst) {
        const std::size_t chunk = std::min<std::size_t>(v.iov_len, n - off);
        if (chunk == 0) continue;  // an empty piece may have a null base
        std::memcpy(v.iov_base, frame.data() + off, chunk);
        off += chunk;
        if (off == n) break;
    }
    pkts_.add();
    bytes_.add(n);
    return n;
}

GenStats FrameGen::stats() const noexcept {
    return GenStats{pkts_.get(), bytes_.get(), drop_no_room_.get()};
}

SinkResult FrameSink::check_frame(const std::byte* src, uint32_t len_bytes) noexcept {
    if (len_bytes != fmt_.frame_bytes_) return count_result(SinkResult::BadLen);
    return check_contiguous(src);
}

SinkResult FrameSink::check_frame(std::span<const iovec> src, uint32_t len_bytes) noexcept {
    const uint32_t n = fmt_.frame_bytes_;
    if (len_bytes != n) return count_result(SinkResult::BadLen);
    if (!src.empty() && src[0].iov_len >= n) {
        return check_contiguous(static_cast<const std::byte*>(src[0].iov_base));
    }
    // Rule: the pieces must hold the length claimed for them.
    if (room_bytes(src, n) < n) return count_result(SinkResult::BadLen);
    // Split source: gather it on the stack, then check it in one piece.
    std::array<std::byte, kMaxFrameBytes> frame;
    std::size_t off = 0;
    for (const iovec& v : src) {
        const std::size_t chunk = std::min<std::size_t>(v.iov_len, n - off);
        if (chunk == 0) continue;  // an empty piece may have a null base
        std::memcpy(frame.data() + off, v.iov_base, chunk);
        off += chunk;
        if (off == n) break;
    }
    return check_contiguous(frame.data());
}

// The frame is peer memory: nothing read from it sizes or addresses an
// access (lengths come from the format) and the seq is read once, so a peer
// rewriting the frame during the check can change only the verdict.
SinkResult FrameSink::check_contiguous(const std::byte* f) noexcept {
    const uint32_t n = fmt_.frame_bytes_;
    // Ethernet: IPv4 only (MACs are not checked: a loop-back may swap them).
    if (load_be16(f + 12) != kEtherTypeIpv4) return count_result(SinkResult::BadEthType);

    // RFC 791: version 4 without options, total length = the frame less
    // Ethernet, not a fragment, carrying UDP; then the header checksum.
    const std::byte* ip = f + kEthHdrBytes;
    if (std::to_integer<uint8_t>(ip[0]) != kIpv4VersionIhl ||
        load_be16(ip + 2) != n - kEthHdrBytes || (load_be16(ip + 6) & kIpv4FragMask) != 0 ||
        std::to_integer<uint8_t>(ip[9]) != kIpProtoUdp) {
        return count_result(SinkResult::BadIpHeader);
    }
    if (!ipv4_checksum_ok(ip)) return count_result(SinkResult::BadIpChecksum);

    // RFC 768: UDP length = UDP header + data = the rest of the frame.
    const std::byte* udp = ip + kIpv4HdrBytes;
    if (load_be16(udp + 4) != n - kEthHdrBytes - kIpv4HdrBytes) {
        return count_result(SinkResult::BadUdpLen);
    }

    // Every pattern byte against the seq: differences are OR-ed, one branch.
    const uint64_t seq = load_be64(f + kSeqOffset);
    const std::byte* p = f + kPatternOffset;
    const uint32_t words = fmt_.pattern_words_;
    const uint32_t tail = fmt_.pattern_tail_;
    uint64_t w = pattern_base(seq);
    uint64_t diff = 0;
    for (uint32_t k = 0; k < words; ++k, p += 8, w += kPatternStep) diff |= load_le64(p) ^ w;
    if (tail != 0) diff |= load_le64(p + tail - 8) ^ tail_word(w - kPatternStep, w, tail);
    if (diff != 0) return count_result(SinkResult::BadPayload);

    return account_seq(seq);
}

SinkResult FrameSink::account_seq(uint64_t seq) noexcept {
    if (seq >= expected_seq_) {
        SinkResult r = SinkResult::InOrder;
        if (seq != expected_seq_) {
            r = SinkResult::AfterGap;
            lost_.add(seq - expected_seq_);
            skip_to(seq);
        }
        seen_[(seq / 64) % kWindowWords] |= uint64_t{1} << (seq % 64);
        expected_seq_ = seq + 1;
        bytes_.add(fmt_.frame_bytes_);
        return count_result(r);
    }
    // Below the expected seq: late if its bit is clear, else a duplicate.
    // Older than the window, it cannot be told apart and counts as late.
    if (expected_seq_ - seq <= kSeqWindow) {
        uint64_t& word = seen_[(seq / 64) % kWindowWords];
        const uint64_t bit = uint64_t{1} << (seq % 64);
        if (word & bit) return count_result(SinkResult::Duplicate);
        word |= bit;
    }
    bytes_.add(fmt_.frame_bytes_);
    return count_result(SinkResult::Reordered);
}

// Moves the expected seq up to `seq`, clearing the bits of the seqs skipped:
// their slots still hold the bits of seqs that fall out of the window.
void FrameSink::skip_to(uint64_t seq) noexcept {
    if (seq - expected_seq_ >= kSeqWindow) {
        seen_.fill(0);
    } else {
        for (uint64_t s = expected_seq_; s != seq;) {
            const uint64_t bit = s % 64;
            const uint64_t n = std::min<uint64_t>(64 - bit, seq - s);
            const uint64_t mask = n == 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1) << bit;
            seen_[(s / 64) % kWindowWords] &= ~mask;
            s += n;
        }
    }
    expected_seq_ = seq;
}

void FrameSink::finish(uint64_t end_seq) noexcept {
    if (end_seq <= expected_seq_) return;
    lost_.add(end_seq - expected_seq_);
    skip_to(end_seq);
}

SinkStats FrameSink::stats() const noexcept {
    SinkStats s;
    s.sink_pkts = results_.get(SinkResult::InOrder) + results_.get(SinkResult::AfterGap) +
                  results_.get(SinkResult::Reordered);
    s.sink_bytes = bytes_.get();
    s.sink_lost = lost_.get();
    s.sink_reordered = results_.get(SinkResult::Reordered);
    s.sink_duplicates = results_.get(SinkResult::Duplicate);
    s.sink_drop_bad_len = results_.get(SinkResult::BadLen);
    s.sink_drop_corrupt =
        results_.get(SinkResult::BadEthType) + results_.get(SinkResult::BadIpHeader) +
        results_.get(SinkResult::BadIpChecksum) + results_.get(SinkResult::BadUdpLen) +
        results_.get(SinkResult::BadPayload);
    return s;
}

}  // namespace pvnet::port
