// GenPort frame generator and sink: header fields checked independently of
// the template code, round trips over contiguous and split buffers, and the
// sink's accounting of corruption, loss, reordering and duplicates against a
// reference model.
#include "pvnet/port/gen_port.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

namespace pvnet::port {
namespace {

constexpr uint32_t kSizes[] = {64, 65, 128, 512, 1500, 1518};

FrameFormat must_format(uint32_t frame_bytes, uint16_t flow_id = 0) {
    auto r = FrameFormat::create(frame_bytes, flow_id);
    EXPECT_TRUE(r.has_value()) << frame_bytes;
    if (!r) std::abort();
    return r.value();
}

uint8_t u8(const std::vector<std::byte>& f, std::size_t i) {
    return std::to_integer<uint8_t>(f[i]);
}
uint16_t be16(const std::vector<std::byte>& f, std::size_t i) {
    return static_cast<uint16_t>((u8(f, i) << 8) | u8(f, i + 1));
}
uint64_t be64(const std::vector<std::byte>& f, std::size_t i) {
    uint64_t v = 0;
    for (std::size_t k = 0; k < 8; ++k) v = (v << 8) | u8(f, i + k);
    return v;
}

// RFC 1071, straight from the definition: ones'-complement sum of the
// big-endian 16-bit words with the checksum field taken as zero.
uint16_t reference_ipv4_checksum(const std::vector<std::byte>& f) {
    uint32_t sum = 0;
    for (std::size_t i = 14; i < 34; i += 2) {
        if (i == 24) continue;
        sum += be16(f, i);
    }
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

std::vector<std::byte> gen_one(FrameGen& gen, uint64_t seq) {
    std::vector<std::byte> f(gen.frame_bytes());
    EXPECT_EQ(gen.write_frame(seq, f.data(), static_cast<uint32_t>(f.size())), gen.frame_bytes());
    return f;
}

// Cuts `buf` into pieces of 1..17 bytes, with an empty (null) piece now and then.
std::vector<iovec> random_split(std::vector<std::byte>& buf, std::mt19937& rng) {
    std::uniform_int_distribution<std::size_t> piece(1, 17);
    std::vector<iovec> iov;
    std::size_t off = 0;
    while (off < buf.size()) {
        if (rng() % 8 == 0) iov.push_back(iovec{nullptr, 0});
        const std::size_t n = std::min(piece(rng), buf.size() - off);
        iov.push_back(iovec{buf.data() + off, n});
        off += n;
    }
    return iov;
}

TEST(FrameFormat, RejectsSizesOutside64To1518) {
    for (uint32_t bad : {0u, 1u, 60u, 63u, 1519u, 1522u, 9000u, UINT32_MAX}) {
        auto r = FrameFormat::create(bad);
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error(), PortError::BadFrameSize);
    }
    for (uint32_t good : {64u, 65u, 1514u, 1518u}) {
        auto r = FrameFormat::create(good);
        ASSERT_TRUE(r.has_value()) << good;
        EXPECT_EQ(r->frame_bytes(), good);
    }
    EXPECT_FALSE(to_string(PortError::BadFrameSize).empty());
}

TEST(FrameFormat, RejectsFlowIdBeyondLastUdpPort) {
    EXPECT_TRUE(FrameFormat::create(64, 65535 - kUdpSrcPortBase).has_value());
    auto r = FrameFormat::create(64, 65536 - kUdpSrcPortBase);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), PortError::BadFlowId);
}

TEST(FrameGen, WritesValidEthernetIpv4UdpFrames) {
    for (uint32_t size : kSizes) {
        for (uint16_t flow : {uint16_t{0}, uint16_t{7}}) {
            SCOPED_TRACE(testing::Message() << "size " << size << " flow " << flow);
            FrameGen gen(must_format(size, flow));
            const uint64_t seq = 0x0102030405060708;
            const auto f = gen_one(gen, seq);
            // Ethernet II.
            const uint8_t dst_mac[] = {0x02, 0, 0, 0, 0, 0x02};
            const uint8_t src_mac[] = {0x02, 0, 0, 0, 0, 0x01};
            for (std::size_t i = 0; i < 6; ++i) {
                EXPECT_EQ(u8(f, i), dst_mac[i]);
                EXPECT_EQ(u8(f, 6 + i), src_mac[i]);
            }
            EXPECT_EQ(be16(f, 12), 0x0800);
            // IPv4.
            EXPECT_EQ(u8(f, 14), 0x45);
            EXPECT_EQ(u8(f, 15), 0);
            EXPECT_EQ(be16(f, 16), size - 14);
            EXPECT_EQ(be16(f, 18), 0);       // id
            EXPECT_EQ(be16(f, 20), 0x4000);  // DF, offset 0
            EXPECT_EQ(u8(f, 22), 64);
            EXPECT_EQ(u8(f, 23), 17);
            EXPECT_EQ(be16(f, 24), reference_ipv4_checksum(f));
            const uint8_t src_ip[] = {192, 0, 2, 1};
            const uint8_t dst_ip[] = {198, 51, 100, 1};
            for (std::size_t i = 0; i < 4; ++i) {
                EXPECT_EQ(u8(f, 26 + i), src_ip[i]);
                EXPECT_EQ(u8(f, 30 + i), dst_ip[i]);
            }
            // UDP.
            EXPECT_EQ(be16(f, 34), 1024 + flow);
            EXPECT_EQ(be16(f, 36), 9);
            EXPECT_EQ(be16(f, 38), size - 34);
            EXPECT_EQ(be16(f, 40), 0);
            // Sequence number, big-endian.
            EXPECT_EQ(be64(f, 42), seq);
        }
    }
}

TEST(FrameGen, PayloadIsAFunctionOfSeq) {
    FrameGen gen(must_format(128));
    const auto a = gen_one(gen, 1);
    EXPECT_EQ(gen_one(gen, 1), a);
    const auto b = gen_one(gen, 2);
    // Every 8-byte pattern word differs between two seqs.
    for (std::size_t i = kPatternOffset; i + 8 <= a.size(); i += 8) {
        EXPECT_FALSE(std::equal(a.begin() + static_cast<std::ptrdiff_t>(i),
                                a.begin() + static_cast<std::ptrdiff_t>(i + 8),
                                b.begin() + static_cast<std::ptrdiff_t>(i)))
            << i;
    }
}

TEST(FrameGen, WritesExactlyTheFrameAndNothingAround) {
    for (uint32_t size : kSizes) {
        FrameGen gen(must_format(size));
        std::vector<std::byte> buf(size + 64, std::byte{0xee});
        EXPECT_EQ(gen.write_frame(9, buf.data() + 32, size + 32), size);
        for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(u8(buf, i), 0xee) << i;
        for (std::size_t i = 32 + size; i < buf.size(); ++i) EXPECT_EQ(u8(buf, i), 0xee) << i;
        FrameSink sink(gen.format(), 9);
        EXPECT_EQ(sink.check_frame(buf.data() + 32, size), SinkResult::InOrder);
    }
}

TEST(FrameGen, TooSmallDestinationReturnsZeroAndCountsNoRoom) {
    FrameGen gen(must_format(128));
    std::vector<std::byte> buf(128, std::byte{0xee});
    EXPECT_EQ(gen.write_frame(0, buf.data(), 127), 0u);
    // Split pieces one byte short in total.
    iovec iov[] = {{buf.data(), 100}, {buf.data() + 100, 27}};
    EXPECT_EQ(gen.write_frame(0, std::span<const iovec>(iov)), 0u);
    EXPECT_EQ(gen.write_frame(0, std::span<const iovec>()), 0u);
    for (std::size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(u8(buf, i), 0xee) << i;

    const GenStats s = gen.stats();
    EXPECT_EQ(s.gen_drop_no_room, 3u);
    EXPECT_EQ(s.gen_pkts, 0u);
    EXPECT_EQ(s.gen_bytes, 0u);
}

TEST(GenPortRoundTrip, ContiguousFramesArriveInOrderAndIntact) {
    for (uint32_t size : kSizes) {
        SCOPED_TRACE(size);
        const FrameFormat fmt = must_format(size);
        FrameGen gen(fmt);
        FrameSink sink(fmt);
        std::vector<std::byte> buf(kMaxFrameBytes);
        constexpr uint64_t kFrames = 1000;
        for (uint64_t seq = 0; seq < kFrames; ++seq) {
            const uint32_t n = gen.write_frame(seq, buf.data(), kMaxFrameBytes);
            ASSERT_EQ(n, size);
            ASSERT_EQ(sink.check_frame(buf.data(), n), SinkResult::InOrder) << seq;
        }
        EXPECT_EQ(gen.stats().gen_pkts, kFrames);
        EXPECT_EQ(gen.stats().gen_bytes, kFrames * size);
        const SinkStats s = sink.stats();
        EXPECT_EQ(s.sink_pkts, kFrames);
        EXPECT_EQ(s.sink_bytes, kFrames * size);
        EXPECT_EQ(s.sink_lost + s.sink_reordered + s.sink_duplicates + s.sink_drop_corrupt +
                      s.sink_drop_bad_len,
                  0u);
        EXPECT_EQ(sink.expected_seq(), kFrames);
    }
}

TEST(GenPortRoundTrip, SplitBuffersAtRandomPointsMatchContiguous) {
    std::mt19937 rng(12345);
    for (uint32_t size : kSizes) {
        SCOPED_TRACE(size);
        const FrameFormat fmt = must_format(size);
        FrameGen gen(fmt);
        FrameGen ref_gen(fmt);
        FrameSink sink(fmt);
        FrameSink contiguous_sink(fmt);
        for (uint64_t seq = 0; seq < 200; ++seq) {
            std::vector<std::byte> buf(size + rng() % 3, std::byte{0xee});
            const std::vector<iovec> out = random_split(buf, rng);
            ASSERT_EQ(gen.write_frame(seq, std::span<const iovec>(out)), size);
            // Same bytes as the contiguous path, nothing past the frame.
            const auto ref = gen_one(ref_gen, seq);
            ASSERT_TRUE(std::equal(ref.begin(), ref.end(), buf.begin())) << seq;
            for (std::size_t i = size; i < buf.size(); ++i) ASSERT_EQ(u8(buf, i), 0xee);
            // Checked through a different split, and in one piece.
            const std::vector<iovec> in = random_split(buf, rng);
            ASSERT_EQ(sink.check_frame(std::span<const iovec>(in), size), SinkResult::InOrder);
            ASSERT_EQ(contiguous_sink.check_frame(buf.data(), size), SinkResult::InOrder);
        }
        EXPECT_EQ(sink.stats().sink_pkts, 200u);
        EXPECT_EQ(gen.stats().gen_pkts, 200u);
    }
}

TEST(GenPortRoundTrip, FrameInFirstPieceOfSeveralUsesOnlyThatPiece) {
    const FrameFormat fmt = must_format(64);
    FrameGen gen(fmt);
    FrameSink sink(fmt);
    std::vector<std::byte> a(100), b(100, std::byte{0xee});
    iovec iov[] = {{a.data(), a.size()}, {b.data(), b.size()}};
    ASSERT_EQ(gen.write_frame(0, std::span<const iovec>(iov)), 64u);
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(u8(b, i), 0xee);
    EXPECT_EQ(sink.check_frame(std::span<const iovec>(iov), 64), SinkResult::InOrder);
}

TEST(FrameSink, EveryFlippedPayloadBitIsCorrupt) {
    for (uint32_t size : kSizes) {
        SCOPED_TRACE(size);
        const FrameFormat fmt = must_format(size);
        FrameGen gen(fmt);
        FrameSink sink(fmt, 5);
        const auto good = gen_one(gen, 5);
        uint64_t flips = 0;
        // Seq field and pattern, every byte, the bit rotating with the offset.
        for (std::size_t i = kSeqOffset; i < size; ++i, ++flips) {
            auto bad = good;
            bad[i] ^= std::byte{static_cast<uint8_t>(1u << (i % 8))};
            ASSERT_EQ(sink.check_frame(bad.data(), size), SinkResult::BadPayload) << i;
        }
        EXPECT_EQ(sink.count(SinkResult::BadPayload), flips);
        EXPECT_EQ(sink.stats().sink_drop_corrupt, flips);
        EXPECT_EQ(sink.stats().sink_pkts, 0u);
        EXPECT_EQ(sink.expected_seq(), 5u);  // a corrupt frame moves nothing
        EXPECT_EQ(sink.check_frame(good.data(), size), SinkResult::InOrder);
    }
}

TEST(FrameSink, EveryFlippedIpv4HeaderBitIsCorrupt) {
    const FrameFormat fmt = must_format(128);
    FrameGen gen(fmt);
    FrameSink sink(fmt);
    const auto good = gen_one(gen, 0);
    for (std::size_t i = kEthHdrBytes; i < kEthHdrBytes + kIpv4HdrBytes; ++i) {
        for (unsigned bit = 0; bit < 8; ++bit) {
            auto bad = good;
            bad[i] ^= std::byte{static_cast<uint8_t>(1u << bit)};
            const SinkResult r = sink.check_frame(bad.data(), 128);
            EXPECT_TRUE(r == SinkResult::BadIpHeader || r == SinkResult::BadIpChecksum)
                << i << ":" << bit << " " << to_string(r);
        }
    }
    EXPECT_EQ(sink.stats().sink_drop_corrupt, 160u);
    EXPECT_GT(sink.count(SinkResult::BadIpChecksum), 0u);
    EXPECT_GT(sink.count(SinkResult::BadIpHeader), 0u);
}

TEST(FrameSink, NamesEachHeaderDefect) {
    const FrameFormat fmt = must_format(256);
    FrameGen gen(fmt);
    FrameSink sink(fmt);
    const auto good = gen_one(gen, 0);
    auto ethertype = good;
    ethertype[12] = std::byte{0x86};  // IPv6
    EXPECT_EQ(sink.check_frame(ethertype.data(), 256), SinkResult::BadEthType);
    auto version = good;
    version[14] = std::byte{0x46};  // IHL 6: options
    EXPECT_EQ(sink.check_frame(version.data(), 256), SinkResult::BadIpHeader);
    auto proto = good;
    proto[23] = std::byte{6};  // TCP
    EXPECT_EQ(sink.check_frame(proto.data(), 256), SinkResult::BadIpHeader);
    auto more_frags = good;
    more_frags[20] = std::byte{0x20};  // MF
    EXPECT_EQ(sink.check_frame(more_frags.data(), 256), SinkResult::BadIpHeader);
    auto udp_len = good;
    udp_len[39] ^= std::byte{1};
    EXPECT_EQ(sink.check_frame(udp_len.data(), 256), SinkResult::BadUdpLen);
    EXPECT_EQ(sink.stats().sink_drop_corrupt, 5u);
    EXPECT_EQ(sink.check_frame(good.data(), 256), SinkResult::InOrder);
}

TEST(FrameSink, WrongLengthIsBadLen) {
    const FrameFormat fmt = must_format(128);
    FrameGen gen(fmt);
    FrameSink sink(fmt);
    auto f = gen_one(gen, 0);
    f.resize(200);
    EXPECT_EQ(sink.check_frame(f.data(), 127), SinkResult::BadLen);
    EXPECT_EQ(sink.check_frame(f.data(), 129), SinkResult::BadLen);
    iovec whole{f.data(), f.size()};
    EXPECT_EQ(sink.check_frame(std::span<const iovec>(&whole, 1), 64), SinkResult::BadLen);
    // The right length claimed for pieces that hold less.
    iovec short_pieces[] = {{f.data(), 60}, {f.data() + 60, 60}};
    EXPECT_EQ(sink.check_frame(std::span<const iovec>(short_pieces), 128), SinkResult::BadLen);
    EXPECT_EQ(sink.check_frame(std::span<const iovec>(), 128), SinkResult::BadLen);
    EXPECT_EQ(sink.stats().sink_drop_bad_len, 5u);
    EXPECT_EQ(sink.stats().sink_drop_corrupt, 0u);
    EXPECT_EQ(sink.expected_seq(), 0u);
}

class SeqAccounting : public testing::Test {
protected:
    SeqAccounting() : fmt_(must_format(64)), gen_(fmt_), sink_(fmt_) {}
    SinkResult deliver(uint64_t seq) {
        const auto f = gen_one(gen_, seq);
        return sink_.check_frame(f.data(), 64);
    }
    FrameFormat fmt_;
    FrameGen gen_;
    FrameSink sink_;
};

TEST_F(SeqAccounting, SkippedSeqsCountLostExactly) {
    EXPECT_EQ(deliver(0), SinkResult::InOrder);
    EXPECT_EQ(deliver(1), SinkResult::InOrder);
    EXPECT_EQ(deliver(5), SinkResult::AfterGap);  // 2, 3, 4
    EXPECT_EQ(deliver(6), SinkResult::InOrder);
    EXPECT_EQ(deliver(100), SinkResult::AfterGap);  // 7..99
    EXPECT_EQ(sink_.stats().sink_lost, 3u + 93u);
    sink_.finish(110);  // 101..109 never came
    SinkStats s = sink_.stats();
    EXPECT_EQ(s.sink_lost, 3u + 93u + 9u);
    EXPECT_EQ(s.sink_pkts, 5u);
    EXPECT_EQ(s.sink_pkts + s.sink_lost - s.sink_reordered, 110u);
    sink_.finish(50);  // behind: nothing more
    EXPECT_EQ(sink_.stats().sink_lost, 105u);
}

TEST_F(SeqAccounting, LateSeqIsReorderedAndBalancesItsLoss) {
    for (uint64_t seq : {0u, 1u, 3u, 2u, 4u, 7u, 5u, 6u}) deliver(seq);
    const SinkStats s = sink_.stats();
    EXPECT_EQ(s.sink_lost, 3u);  // 2, then 5 and 6
    EXPECT_EQ(s.sink_reordered, 3u);
    EXPECT_EQ(s.sink_duplicates, 0u);
    EXPECT_EQ(s.sink_pkts, 8u);
    EXPECT_EQ(s.sink_pkts + s.sink_lost - s.sink_reordered, 8u);
    EXPECT_EQ(sink_.expected_seq(), 8u);
}

TEST_F(SeqAccounting, RepeatedSeqIsDuplicate) {
    EXPECT_EQ(deliver(0), SinkResult::InOrder);
    EXPECT_EQ(deliver(0), SinkResult::Duplicate);
    EXPECT_EQ(deliver(2), SinkResult::AfterGap);
    EXPECT_EQ(deliver(1), SinkResult::Reordered);
    EXPECT_EQ(deliver(1), SinkResult::Duplicate);
    EXPECT_EQ(deliver(2), SinkResult::Duplicate);
    EXPECT_EQ(deliver(0), SinkResult::Duplicate);
    const SinkStats s = sink_.stats();
    EXPECT_EQ(s.sink_duplicates, 4u);
    EXPECT_EQ(s.sink_pkts, 3u);
    EXPECT_EQ(s.sink_bytes, 3u * 64);
}

TEST_F(SeqAccounting, SeqOlderThanWindowCountsReordered) {
    EXPECT_EQ(deliver(0), SinkResult::InOrder);
    EXPECT_EQ(deliver(kSeqWindow + 10), SinkResult::AfterGap);
    EXPECT_EQ(deliver(1), SinkResult::Reordered);  // too old to tell
    EXPECT_EQ(deliver(0), SinkResult::Reordered);  // even a repeat
    EXPECT_EQ(deliver(kSeqWindow + 9), SinkResult::Reordered);
    EXPECT_EQ(deliver(kSeqWindow + 9), SinkResult::Duplicate);
    EXPECT_EQ(deliver(kSeqWindow + 10), SinkResult::Duplicate);
    EXPECT_EQ(deliver(11), SinkResult::Reordered);  // first seq inside the window
    EXPECT_EQ(deliver(11), SinkResult::Duplicate);
}

TEST(FrameSink, StartsAtFirstSeq) {
    const FrameFormat fmt = must_format(64);
    FrameGen gen(fmt);
    FrameSink sink(fmt, 1000);
    auto f = gen_one(gen, 1000);
    EXPECT_EQ(sink.check_frame(f.data(), 64), SinkResult::InOrder);
    f = gen_one(gen, 999);
    EXPECT_EQ(sink.check_frame(f.data(), 64), SinkResult::Reordered);
    EXPECT_EQ(sink.stats().sink_lost, 0u);
}

// Random gaps, late and repeated seqs against a model that remembers every
// seq: the window's bit clearing across words must agree with it.
TEST(FrameSink, SeqAccountingMatchesReferenceModel) {
    const FrameFormat fmt = must_format(64);
    FrameGen gen(fmt);
    FrameSink sink(fmt);
    std::mt19937_64 rng(7);
    std::set<uint64_t> seen;
    uint64_t expected = 0;
    uint64_t lost = 0;
    std::vector<std::byte> f(64);
    for (int i = 0; i < 200000; ++i) {
        uint64_t seq = 0;
        switch (rng() % 8) {
            case 0:
                seq = expected + rng() % 200;
                break;
            case 1:
                seq = expected + rng() % (3 * kSeqWindow);
                break;
            case 2:
            case 3:
                seq = expected - std::min<uint64_t>(expected, rng() % (kSeqWindow + 64));
                break;
            default:
                seq = expected;
                break;
        }
        SinkResult want;
        if (seq >= expected) {
            want = seq == expected ? SinkResult::InOrder : SinkResult::AfterGap;
            lost += seq - expected;
            expected = seq + 1;
            seen.insert(seq);
        } else if (expected - seq > kSeqWindow) {
            want = SinkResult::Reordered;
        } else if (seen.count(seq) != 0) {
            want = SinkResult::Duplicate;
        } else {
            want = SinkResult::Reordered;
            seen.insert(seq);
        }
        ASSERT_EQ(gen.write_frame(seq, f.data(), 64), 64u);
        ASSERT_EQ(sink.check_frame(f.data(), 64), want) << "step " << i << " seq " << seq;
    }
    EXPECT_EQ(sink.stats().sink_lost, lost);
    EXPECT_EQ(sink.expected_seq(), expected);
}

}  // namespace
}  // namespace pvnet::port
