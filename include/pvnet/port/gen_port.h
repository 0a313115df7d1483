// GenPort: a generator and a sink of fixed-size Ethernet/IPv4/UDP frames for
// experiments (the PVP benchmark's traffic, in the manner of Linux pktgen and
// DPDK testpmd's txonly/rxonly engines).
//
// Every frame of a run has the same size and headers; what varies is an 8-byte
// sequence number (big-endian, right after the UDP header) and a payload
// pattern derived from it, so the sink checks order, loss and the integrity of
// every byte. Frames go straight into guest buffers, handed out by the ring
// layer as iovec spans that may be split into several pieces (host pieces the
// ring layer has translated and bounds-checked; a split frame goes through a
// stack copy, a frame in the first piece is written or read in place).
//
// Frame layout (frame_bytes = the Ethernet frame in the buffer, no FCS):
//   0  Ethernet: dst 02:00:00:00:00:02, src 02:00:00:00:00:01, type IPv4
//  14  IPv4: 192.0.2.1 -> 198.51.100.1, DF, TTL 64, proto UDP, id 0
//  34  UDP: src port kUdpSrcPortBase + flow_id, dst port kUdpDstPort, csum 0
//  42  seq (big-endian u64)
//  50  pattern: little-endian u64 words w[k] = base(seq) + k * step, the last
//      one cut to the frame's end
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::port {

enum class PortError : uint8_t {
    BadFrameSize,  ///< frame_bytes outside kMinFrameBytes..kMaxFrameBytes
    BadFlowId,     ///< kUdpSrcPortBase + flow_id does not fit a UDP port
    BadArenaSize,  ///< PeerPort queue bytes not a power of two in range
    SystemError,   ///< an eventfd or allocation failed at setup
    Count
};

std::string_view to_string(PortError e) noexcept;

/// The smallest frame testpmd/pktgen send, and the largest untagged one.
inline constexpr uint32_t kMinFrameBytes = 64;
inline constexpr uint32_t kMaxFrameBytes = 1518;

inline constexpr uint32_t kEthHdrBytes = 14;
inline constexpr uint32_t kIpv4HdrBytes = 20;
inline constexpr uint32_t kUdpHdrBytes = 8;
inline constexpr uint32_t kHdrBytes = kEthHdrBytes + kIpv4HdrBytes + kUdpHdrBytes;
inline constexpr uint32_t kSeqOffset = kHdrBytes;
inline constexpr uint32_t kPatternOffset = kSeqOffset + 8;

/// Documentation prefixes of RFC 5737: TEST-NET-1 to TEST-NET-2.
inline constexpr std::array<uint8_t, 4> kSrcIp{192, 0, 2, 1};
inline constexpr std::array<uint8_t, 4> kDstIp{198, 51, 100, 1};
/// Locally administered unicast MACs.
inline constexpr std::array<uint8_t, 6> kSrcMac{0x02, 0, 0, 0, 0, 0x01};
inline constexpr std::array<uint8_t, 6> kDstMac{0x02, 0, 0, 0, 0, 0x02};
inline constexpr uint16_t kUdpSrcPortBase = 1024;
inline constexpr uint16_t kUdpDstPort = 9;  ///< discard

/// The flow and sequence number of a frame in this layout (at least
/// kSeqOffset + 8 bytes; the caller checks the length).
inline uint16_t frame_flow_id(const std::byte* frame) noexcept {
    return static_cast<uint16_t>(
        ((std::to_integer<unsigned>(frame[34]) << 8) | std::to_integer<unsigned>(frame[35])) -
        kUdpSrcPortBase);
}
inline uint64_t frame_seq(const std::byte* frame) noexcept {
    uint64_t v = 0;
    for (uint32_t i = 0; i < 8; ++i) v = v << 8 | std::to_integer<uint64_t>(frame[kSeqOffset + i]);
    return v;
}

/// Frames the sink tells apart from each other: look-back of its duplicate
/// detection, in sequence numbers.
inline constexpr uint64_t kSeqWindow = 4096;

/// A validated frame size and flow, with the header template every frame of
/// the run starts with (IPv4 checksum included). Only create() makes one.
class FrameFormat {
public:
    /// frame_bytes: kMinFrameBytes..kMaxFrameBytes. flow_id varies the UDP
    /// source port (kUdpSrcPortBase + flow_id) for multi-flow runs.
    static Result<FrameFormat, PortError> create(uint32_t frame_bytes,
                                                 uint16_t flow_id = 0) noexcept;

    uint32_t frame_bytes() const noexcept { return frame_bytes_; }
    uint16_t flow_id() const noexcept { return flow_id_; }
    std::span<const std::byte, kHdrBytes> header() const noexcept { return hdr_; }

private:
    friend class FrameGen;
    friend class FrameSink;
    FrameFormat() = default;

    std::array<std::byte, kHdrBytes> hdr_{};
    uint32_t frame_bytes_ = 0;
    uint16_t flow_id_ = 0;
    uint32_t pattern_words_ = 0;  ///< whole pattern words (>= 1)
    uint32_t pattern_tail_ = 0;   ///< bytes of the cut last word (0..7)
};

/// Generator counters, as seen by any thread.
struct GenStats {
    uint64_t gen_pkts = 0;
    uint64_t gen_bytes = 0;
    uint64_t gen_drop_no_room = 0;  ///< destination smaller than a frame
};

/// Writes frames. One owner thread; stats() from any thread.
class FrameGen {
public:
    explicit FrameGen(const FrameFormat& fmt) noexcept : fmt_(fmt) {}
    FrameGen(const FrameGen&) = delete;
    FrameGen& operator=(const FrameGen&) = delete;

    /// Writes the frame numbered `seq` across `dst` in order. Returns the
    /// bytes written (frame_bytes), or 0 with nothing written and
    /// gen_drop_no_room counted when `dst` holds fewer bytes.
    uint32_t write_frame(uint64_t seq, std::span<const iovec> dst) noexcept;
    /// Contiguous variant: `dst` has `room_bytes` writable bytes.
    uint32_t write_frame(uint64_t seq, std::byte* dst, uint32_t room_bytes) noexcept;

    uint32_t frame_bytes() const noexcept { return fmt_.frame_bytes_; }
    const FrameFormat& format() const noexcept { return fmt_; }
    GenStats stats() const noexcept;

private:
    const FrameFormat fmt_;
    Counter pkts_;
    Counter bytes_;
    Counter drop_no_room_;
};

/// What the sink made of one frame. The first four are valid frames.
enum class SinkResult : uint8_t {
    InOrder,        ///< seq == the expected one
    AfterGap,       ///< seq above the expected one: the seqs skipped count as lost
    Reordered,      ///< seq below the expected one, not seen before (or too old to tell)
    Duplicate,      ///< seq seen before, within kSeqWindow
    BadLen,         ///< length != frame_bytes
    BadEthType,     ///< EtherType not IPv4
    BadIpHeader,    ///< version, IHL, total length, fragment or protocol wrong
    BadIpChecksum,  ///< IPv4 header checksum wrong
    BadUdpLen,      ///< UDP length wrong
    BadPayload,     ///< seq and pattern disagree somewhere
    Count
};

std::string_view to_string(SinkResult r) noexcept;

/// True for a frame that passed validation (InOrder..Duplicate).
constexpr bool is_valid(SinkResult r) noexcept { return r <= SinkResult::Duplicate; }

/// Sink counters, as seen by any thread. Once finish() has run, every frame
/// generated in [first_seq, end_seq) is accounted for:
///   sent = sink_pkts + sink_lost - sink_reordered.
struct SinkStats {
    uint64_t sink_pkts = 0;          ///< valid frames with a new seq
    uint64_t sink_bytes = 0;         ///< their bytes
    uint64_t sink_lost = 0;          ///< seqs skipped when a later one arrived
    uint64_t sink_reordered = 0;     ///< late arrivals (each also counted lost before)
    uint64_t sink_duplicates = 0;    ///< valid frames whose seq was seen before
    uint64_t sink_drop_corrupt = 0;  ///< bad header or payload
    uint64_t sink_drop_bad_len = 0;  ///< wrong length
};

/// Checks frames of one format and sequence. One owner thread; stats() and
/// count() from any thread.
class FrameSink {
public:
    explicit FrameSink(const FrameFormat& fmt, uint64_t first_seq = 0) noexcept
        : fmt_(fmt), expected_seq_(first_seq) {}
    FrameSink(const FrameSink&) = delete;
    FrameSink& operator=(const FrameSink&) = delete;

    /// Checks the `len_bytes`-byte frame laid across `src` (fewer bytes in
    /// `src` than `len_bytes` is BadLen), then accounts its seq.
    SinkResult check_frame(std::span<const iovec> src, uint32_t len_bytes) noexcept;
    /// Contiguous variant.
    SinkResult check_frame(const std::byte* src, uint32_t len_bytes) noexcept;

    /// Ends a run whose generator stopped before `end_seq`: the seqs from the
    /// expected one up to it never arrived and count as lost.
    void finish(uint64_t end_seq) noexcept;

    /// The seq the sink expects next (owner thread).
    uint64_t expected_seq() const noexcept { return expected_seq_; }
    uint32_t frame_bytes() const noexcept { return fmt_.frame_bytes_; }
    SinkStats stats() const noexcept;
    uint64_t count(SinkResult r) const noexcept { return results_.get(r); }

private:
    SinkResult check_contiguous(const std::byte* src) noexcept;
    SinkResult account_seq(uint64_t seq) noexcept;
    void skip_to(uint64_t seq) noexcept;
    SinkResult count_result(SinkResult r) noexcept {
        results_.add(r);
        return r;
    }

    static constexpr std::size_t kWindowWords = kSeqWindow / 64;
    static_assert(kSeqWindow % 64 == 0 && (kWindowWords & (kWindowWords - 1)) == 0);

    const FrameFormat fmt_;
    uint64_t expected_seq_;
    /// Bit (seq % kSeqWindow) is set iff seq, in [expected - window, expected), arrived.
    std::array<uint64_t, kWindowWords> seen_{};
    CounterArray<SinkResult> results_;
    Counter bytes_;
    Counter lost_;
};

}  // namespace pvnet::port
