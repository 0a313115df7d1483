// GenLoopPort, the PVP backend's port: recv() writes a zeroed virtio_net_hdr
// and the next generated frame into one contiguous or many split pieces
// (the header itself split too); send() checks what comes back; a buffer too
// small for a frame still uses up a sequence number, so the sink counts it
// lost and the generator counts it dropped; every send() is counted by the
// sink's verdict; stop() ends the flood.
#include "pvnet/port/gen_loop_port.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "pvnet/port/gen_port.h"

namespace pvnet::port {
namespace {

constexpr uint32_t kHdr = GenLoopPort::kHdrBytes;
constexpr std::byte kJunk{0xa5};

FrameFormat must_format(uint32_t frame_bytes) {
    auto r = FrameFormat::create(frame_bytes);
    EXPECT_TRUE(r.has_value()) << frame_bytes;
    if (!r) std::abort();
    return r.value();
}

bool hdr_is_zero(const std::byte* p) {
    for (uint32_t i = 0; i < kHdr; ++i) {
        if (p[i] != std::byte{0}) return false;
    }
    return true;
}

/// Cuts `buf` into pieces of the given sizes, cycling through them.
std::vector<iovec> cut(std::vector<std::byte>& buf, const std::vector<std::size_t>& sizes) {
    std::vector<iovec> iov;
    std::size_t off = 0;
    for (std::size_t k = 0; off < buf.size(); ++k) {
        const std::size_t n = std::min(sizes[k % sizes.size()], buf.size() - off);
        iov.push_back(iovec{buf.data() + off, n});
        off += n;
    }
    return iov;
}

TEST(GenLoopPort, HeaderBytesIsVirtioNetHdr) { EXPECT_EQ(kHdr, 12u); }

TEST(GenLoopPort, RecvIntoOneIovecWritesZeroHdrAndValidFrame) {
    for (uint32_t frame : {64u, 65u, 1518u}) {
        const FrameFormat fmt = must_format(frame);
        GenLoopPort port(fmt);
        FrameSink check(fmt);
        std::vector<std::byte> buf(2048, kJunk);
        const iovec v{buf.data(), buf.size()};
        ASSERT_EQ(port.recv({&v, 1}), frame + kHdr) << frame;
        EXPECT_TRUE(hdr_is_zero(buf.data())) << frame;
        EXPECT_EQ(check.check_frame(buf.data() + kHdr, frame), SinkResult::InOrder) << frame;
        EXPECT_EQ(buf[kHdr + frame], kJunk) << "nothing written past the frame";
        EXPECT_EQ(port.generated(), 1u);
        // And the port's own sink accepts it back.
        EXPECT_EQ(port.send({&v, 1}, frame + kHdr), SendResult::Sent);
        EXPECT_EQ(port.sink().stats().sink_pkts, 1u);
    }
}

TEST(GenLoopPort, RecvIntoExactlyFittingIovec) {
    const FrameFormat fmt = must_format(64);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(kHdr + 64, kJunk);
    const iovec v{buf.data(), buf.size()};
    ASSERT_EQ(port.recv({&v, 1}), 64u + kHdr);
    EXPECT_TRUE(hdr_is_zero(buf.data()));
    EXPECT_EQ(port.send({&v, 1}, 64u + kHdr), SendResult::Sent);
}

TEST(GenLoopPort, RecvSplitOverSmallPiecesWithHeaderSplitToo) {
    // Piece patterns chosen so the 12-byte header ends inside a piece (5+5+2
    // of a 5), exactly on a boundary (4+4+4), and after a zero-length piece.
    const std::vector<std::vector<std::size_t>> patterns = {
        {5}, {4}, {3, 4, 9, 1}, {1, 0, 11, 7}, {7, 13}, {11, 2, 17}, {40, 3}};
    for (const auto& sizes : patterns) {
        for (uint32_t frame : {64u, 200u}) {
            const FrameFormat fmt = must_format(frame);
            GenLoopPort port(fmt);
            FrameSink check(fmt);
            for (uint64_t seq = 0; seq < 3; ++seq) {
                std::vector<std::byte> buf(kHdr + frame, kJunk);
                const std::vector<iovec> iov = cut(buf, sizes);
                ASSERT_LE(iov.size(), GenLoopPort::kMaxPieces + 3);
                ASSERT_EQ(port.recv(iov), frame + kHdr) << "piece[0]=" << sizes[0] << " " << frame;
                EXPECT_TRUE(hdr_is_zero(buf.data()));
                EXPECT_EQ(check.check_frame(buf.data() + kHdr, frame), SinkResult::InOrder);
                // send() of the very same pieces validates.
                EXPECT_EQ(port.send(iov, frame + kHdr), SendResult::Sent)
                    << "piece[0]=" << sizes[0];
            }
            EXPECT_EQ(port.sink().stats().sink_pkts, port.generated());
            EXPECT_EQ(port.sink().stats().sink_lost, 0u);
        }
    }
}

TEST(GenLoopPort, RecvSplitWithRoomToSpare) {
    // Pieces hold more than hdr + frame: the frame is written, the rest untouched.
    const FrameFormat fmt = must_format(100);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(kHdr + 100 + 40, kJunk);
    const std::vector<iovec> iov = cut(buf, {6, 30});
    ASSERT_EQ(port.recv(iov), 100u + kHdr);
    EXPECT_TRUE(hdr_is_zero(buf.data()));
    for (std::size_t i = kHdr + 100; i < buf.size(); ++i) ASSERT_EQ(buf[i], kJunk) << i;
    EXPECT_EQ(port.send(iov, 100u + kHdr), SendResult::Sent);
}

TEST(GenLoopPort, TooSmallBufferReturnsZeroButConsumesASeq) {
    const FrameFormat fmt = must_format(64);
    GenLoopPort port(fmt);
    std::vector<std::byte> a(2048), small(kHdr + 63), c(2048);
    const iovec va{a.data(), a.size()};
    const iovec vs{small.data(), small.size()};
    const iovec vc{c.data(), c.size()};
    ASSERT_EQ(port.recv({&va, 1}), 64u + kHdr);  // seq 0
    EXPECT_EQ(port.recv({&vs, 1}), 0u);          // seq 1: no room
    EXPECT_EQ(port.generated(), 2u) << "the undersized buffer used up a seq";
    ASSERT_EQ(port.recv({&vc, 1}), 64u + kHdr);  // seq 2
    EXPECT_EQ(port.generated(), 3u);
    EXPECT_EQ(port.gen().stats().gen_drop_no_room, 1u);

    EXPECT_EQ(port.send({&va, 1}, 64u + kHdr), SendResult::Sent);
    EXPECT_EQ(port.send({&vc, 1}, 64u + kHdr), SendResult::Sent);
    const SinkStats s = port.sink().stats();
    EXPECT_EQ(s.sink_pkts, 2u);
    EXPECT_EQ(s.sink_lost, 1u) << "seq 1 never arrived";
    EXPECT_EQ(port.sink().count(SinkResult::AfterGap), 1u);
    // Accounting closes: sent = delivered + lost - reordered.
    port.sink().finish(port.generated());
    EXPECT_EQ(port.generated(), port.sink().stats().sink_pkts + port.sink().stats().sink_lost -
                                    port.sink().stats().sink_reordered);
}

TEST(GenLoopPort, BufferSmallerThanHeaderReturnsZeroButConsumesASeq) {
    const FrameFormat fmt = must_format(64);
    GenLoopPort port(fmt);
    std::vector<std::byte> tiny(kHdr - 1);
    std::vector<std::byte> split(kHdr + 10);
    const iovec vt{tiny.data(), tiny.size()};
    EXPECT_EQ(port.recv({&vt, 1}), 0u);
    EXPECT_EQ(port.generated(), 1u);
    // Split pieces adding up to less than hdr + frame.
    const std::vector<iovec> iov = cut(split, {5});
    EXPECT_EQ(port.recv(iov), 0u);
    EXPECT_EQ(port.generated(), 2u);

    std::vector<std::byte> ok(2048);
    const iovec vo{ok.data(), ok.size()};
    ASSERT_EQ(port.recv({&vo, 1}), 64u + kHdr);
    EXPECT_EQ(port.send({&vo, 1}, 64u + kHdr), SendResult::Sent);
    EXPECT_EQ(port.sink().stats().sink_lost, 2u);
}

TEST(GenLoopPort, RecvNeedingMorePiecesThanKMaxPiecesReturnsZeroButConsumesASeq) {
    const FrameFormat fmt = must_format(200);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(kHdr + 200);
    const std::vector<iovec> iov = cut(buf, {1});  // 200 one-byte pieces after the header
    ASSERT_GT(iov.size(), GenLoopPort::kMaxPieces);
    EXPECT_EQ(port.recv(iov), 0u);
    EXPECT_EQ(port.generated(), 1u);
}

TEST(GenLoopPort, RecvIntoAChainOfManyPiecesWhenTheFrameNeedsFew) {
    // A guest may post a big rx chain of many pieces (here 100 x 64 bytes);
    // the frame needs only the first two after the header, well within
    // kMaxPieces ("iovecs a frame may span after the header is skipped").
    const FrameFormat fmt = must_format(64);
    GenLoopPort port(fmt);
    FrameSink check(fmt);
    std::vector<std::byte> buf(100 * 64, kJunk);
    const std::vector<iovec> iov = cut(buf, {64});
    ASSERT_EQ(iov.size(), 100u);
    ASSERT_GT(iov.size(), GenLoopPort::kMaxPieces);
    EXPECT_EQ(port.recv(iov), 64u + kHdr) << "frame fits in 2 pieces, yet dropped";
    EXPECT_TRUE(hdr_is_zero(buf.data()));
    EXPECT_EQ(check.check_frame(buf.data() + kHdr, 64), SinkResult::InOrder);
    EXPECT_EQ(port.gen().stats().gen_drop_no_room, 0u);
}

TEST(GenLoopPort, RxPendingUntilStop) {
    GenLoopPort port(must_format(64));
    EXPECT_TRUE(port.rx_pending());
    std::vector<std::byte> buf(2048);
    const iovec v{buf.data(), buf.size()};
    for (int i = 0; i < 10; ++i) ASSERT_NE(port.recv({&v, 1}), 0u);
    EXPECT_TRUE(port.rx_pending()) << "a flood never runs dry";
    port.stop();
    EXPECT_FALSE(port.rx_pending());
    port.stop();
    EXPECT_FALSE(port.rx_pending());
    EXPECT_EQ(port.generated(), 10u);
}

TEST(GenLoopPort, SendOfCorruptedFrameReturnsFalse) {
    const FrameFormat fmt = must_format(128);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(2048);
    const iovec v{buf.data(), buf.size()};
    const uint32_t len = port.recv({&v, 1});
    ASSERT_EQ(len, 128u + kHdr);
    buf[kHdr + kPatternOffset + 3] ^= std::byte{0x01};
    EXPECT_EQ(port.send({&v, 1}, len), SendResult::Dropped);
    EXPECT_EQ(port.sink().stats().sink_drop_corrupt, 1u);
    EXPECT_EQ(port.sink().stats().sink_pkts, 0u);
}

TEST(GenLoopPort, SendOfCorruptedSplitFrameReturnsFalse) {
    const FrameFormat fmt = must_format(128);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(kHdr + 128);
    const std::vector<iovec> iov = cut(buf, {5, 9});
    const uint32_t len = port.recv(iov);
    ASSERT_EQ(len, 128u + kHdr);
    buf[kHdr + kEthHdrBytes + 8] ^= std::byte{0x01};  // IPv4 TTL: checksum no longer matches
    EXPECT_EQ(port.send(iov, len), SendResult::Dropped);
    EXPECT_EQ(port.sink().stats().sink_drop_corrupt, 1u);
}

TEST(GenLoopPort, SendRejectsShortOrEmptyInput) {
    const FrameFormat fmt = must_format(64);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(2048);
    const iovec v{buf.data(), buf.size()};
    const uint32_t len = port.recv({&v, 1});
    ASSERT_EQ(len, 64u + kHdr);
    EXPECT_EQ(port.send({}, len), SendResult::Dropped);
    EXPECT_EQ(port.send({&v, 1}, kHdr - 1), SendResult::Dropped);
    EXPECT_EQ(port.send({&v, 1}, len - 1), SendResult::Dropped) << "wrong length";
    // Split pieces holding fewer bytes than len.
    std::vector<iovec> two{iovec{buf.data(), 20}, iovec{buf.data() + 20, 30}};
    EXPECT_EQ(port.send(two, len), SendResult::Dropped);
    EXPECT_EQ(port.sink().stats().sink_pkts, 0u);
    // Each rejection is counted, the two too short for a header included.
    EXPECT_EQ(port.sink().stats().sink_drop_bad_len, 4u);
    EXPECT_EQ(port.send({&v, 1}, len), SendResult::Sent) << "the frame itself is still good";
}

// Every recv() path, the ones that deliver nothing included, takes one seq
// and the generator counts it: generated = delivered + drops.
TEST(GenLoopPort, EveryRecvIsDeliveredOrCountedAsAGeneratorDrop) {
    const FrameFormat fmt = must_format(200);
    GenLoopPort port(fmt);
    std::vector<std::byte> big(2048), tiny(kHdr - 1), short_by_one(kHdr + 199), ones(kHdr + 200);
    const iovec vb{big.data(), big.size()};
    const iovec vt{tiny.data(), tiny.size()};
    const iovec vs{short_by_one.data(), short_by_one.size()};
    const std::vector<iovec> many = cut(ones, {1});  // more pieces than kMaxPieces
    const std::vector<iovec> hdr_only = cut(tiny, {5});
    const std::vector<std::span<const iovec>> dsts = {{&vb, 1}, {},       {&vt, 1}, hdr_only,
                                                      many,     {&vs, 1}, {&vb, 1}};
    uint64_t delivered = 0;
    for (const auto& d : dsts) delivered += port.recv(d) != 0 ? 1u : 0u;
    EXPECT_EQ(delivered, 2u);
    EXPECT_EQ(port.generated(), dsts.size()) << "each recv() takes a seq";
    const GenStats g = port.gen().stats();
    EXPECT_EQ(g.gen_pkts, delivered);
    EXPECT_EQ(g.gen_pkts + g.gen_drop_no_room, port.generated());
}

TEST(GenLoopPort, MaxFrameIsTheFormatsFrameSize) {
    GenLoopPort port(must_format(1518));
    EXPECT_EQ(port.max_frame_bytes(), 1518u);
    EXPECT_EQ(port.peek_len(), 1518u + kHdr);
}

TEST(GenLoopPort, HeaderIgnoredBySend) {
    // The header is not part of the frame: send() validates only what follows it.
    const FrameFormat fmt = must_format(64);
    GenLoopPort port(fmt);
    std::vector<std::byte> buf(2048);
    const iovec v{buf.data(), buf.size()};
    const uint32_t len = port.recv({&v, 1});
    ASSERT_EQ(len, 64u + kHdr);
    buf[0] = std::byte{1};
    EXPECT_EQ(port.send({&v, 1}, len), SendResult::Sent);
}

}  // namespace
}  // namespace pvnet::port
