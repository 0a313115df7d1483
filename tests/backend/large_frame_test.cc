// 64 KiB frames across the rings, end to end: VirtioNet (the guest) and
// VhostNet (handlers called directly) over the in-process pairing
// (pair::GuestPair), with FakePort as the world. Rx: mergeable buffers (the
// guest takes GSO, so a 64 KiB frame may come), one frame in
// ceil(len / buf_bytes) buffers with num_buffers saying so, byte-identical;
// without GSO, a port's max_frame_bytes() sets the room gathered.
// Tx: xmit_sg over 33 slots as a chained and as an indirect chain, arriving
// byte-identical, every slot back in the pool and the Flow's credit back on
// completion; the queue-stop threshold for each form. By counters and bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/virtio/virtio_config.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using frontend::Flow;
using frontend::QueuePair;
using frontend::RxPiece;
using frontend::TxPiece;
using frontend::XmitStatus;
using harness::FakePort;

constexpr uint32_t kBig = 65550;  // 12-byte header + a 64 KiB GSO frame
constexpr uint32_t kBuf = 2048;
constexpr uint16_t kPieces = (kBig + kBuf - 1) / kBuf;  // 33
/// The guest accepts TSO4 frames on receive: 64 KiB frames may arrive.
constexpr uint64_t kGuestTso4 = virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_TSO4);

/// The guest driver and a device on `Port`, joined by the in-process pairing.
template <typename Port>
struct PairOf {
    pair::GuestPair tb;
    Port port;
    std::unique_ptr<VhostNet<Port>> dev;

    /// `offloads`: feature bits beyond the driver's own (GUEST_TSO4, ...).
    explicit PairOf(const frontend::VirtioNetConfig& fc, uint64_t offloads = 0) {
        if (auto err = tb.setup(fc)) throw std::runtime_error(*err);
        auto d = VhostNet<Port>::create(tb.device_setup(offloads), VhostNetOptions{}, port);
        if (!d) throw std::runtime_error("VhostNet::create");
        dev = std::move(*d);
    }
    QueuePair& qp() { return tb.qp(); }
};
using Pair = PairOf<FakePort>;

frontend::VirtioNetConfig config() {
    frontend::VirtioNetConfig fc;
    fc.rx_size = fc.tx_size = 128;
    fc.buf_bytes = kBuf;
    return fc;
}

class Peek : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(LargeFrame, Peek, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                             return p.param ? "PortPeeks" : "LengthUnknown";
                         });

TEST_P(Peek, RxFrameCrossesInNBuffersByteIdentical) {
    frontend::VirtioNetConfig fc = config();
    fc.mergeable_rx = true;
    Pair p(fc, kGuestTso4);
    p.port.peek = GetParam();
    p.port.rx_left = 3;
    p.port.rx_lens = {kBig, 64, kBig};
    p.qp().try_fill_recv();
    p.dev->handle_rx();
    EXPECT_EQ(p.dev->stats().rx_pkts.get(), 3u);
    EXPECT_EQ(p.dev->stats().rx_merged_pkts.get(), 2u);

    std::vector<std::size_t> pieces;
    std::vector<std::optional<uint64_t>> seqs;
    std::vector<uint16_t> nums;
    auto deliver = [&](std::span<const RxPiece> ps) {
        std::vector<std::byte> b;
        for (const RxPiece& x : ps) b.insert(b.end(), x.host, x.host + x.len);
        uint16_t le = 0;
        std::memcpy(&le, b.data() + offsetof(virtio::virtio_net_hdr, num_buffers), sizeof le);
        nums.push_back(virtio::le_to_host(le));
        std::memset(b.data() + offsetof(virtio::virtio_net_hdr, num_buffers), 0, sizeof le);
        pieces.push_back(ps.size());
        seqs.push_back(harness::check_packet(b.data(), static_cast<uint32_t>(b.size())));
        return false;
    };
    EXPECT_EQ(p.qp().poll_rx_packets(frontend::kNapiBudget, deliver), 3u);
    ASSERT_EQ(pieces.size(), 3u);
    EXPECT_EQ(pieces[0], kPieces);
    EXPECT_EQ(nums[0], kPieces);
    EXPECT_EQ(pieces[1], 1u);
    EXPECT_EQ(nums[1], 1u);
    EXPECT_EQ(pieces[2], kPieces);
    for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(seqs[i], std::optional<uint64_t>(i)) << i;
    EXPECT_EQ(p.qp().stats().rx_bytes.get(), 2u * kBig + 64u);
    EXPECT_EQ(p.qp().stats().rx_merged_pkts.get(), 2u);
    EXPECT_EQ(p.qp().stats().rx_length_errors.get(), 0u);
    EXPECT_EQ(p.dev->stats().rx_short_recv.get(), 0u) << "128 buffers hold any frame";
    EXPECT_FALSE(p.tb.any_broken(*p.dev));
}

class TxForm : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(LargeFrame, TxForm, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                             return p.param ? "Indirect" : "Chained";
                         });

/// Takes kPieces slots and writes packet `seq` of kBig bytes over them.
std::vector<TxPiece> build(QueuePair& qp, uint64_t seq) {
    std::vector<std::byte> pkt(kBig);
    harness::write_packet(pkt.data(), seq, kBig);
    std::vector<TxPiece> out;
    for (uint32_t off = 0; off < kBig; off += kBuf) {
        TxPiece t;
        if (!qp.alloc_buf(t.buf_id)) throw std::runtime_error("pool empty");
        t.len = std::min(kBuf, kBig - off);
        std::memcpy(qp.buf_host(t.buf_id), pkt.data() + off, t.len);
        out.push_back(t);
    }
    return out;
}

TEST_P(TxForm, BigFrameArrivesByteIdenticalAndAllSlotsAndCreditComeBack) {
    frontend::VirtioNetConfig fc = config();
    fc.tx_max_pieces = kPieces;
    fc.indirect_desc = GetParam();
    Pair p(fc);
    QueuePair& qp = p.qp();
    const uint32_t pool0 = qp.free_bufs();
    Flow flow(1u << 20);
    for (uint64_t seq = 0; seq < 2; ++seq) {
        const auto pieces = build(qp, seq);
        ASSERT_EQ(qp.xmit_sg(flow, pieces), XmitStatus::Ok);
    }
    EXPECT_EQ(flow.in_flight_bytes(), 2u * kBig);
    // One descriptor per packet when indirect, one per slot when chained.
    EXPECT_EQ(qp.tx_queue().num_free(), GetParam() ? 128u - 2u : 128u - 2u * kPieces);
    qp.tx_flush();
    p.dev->handle_tx();
    ASSERT_EQ(p.port.sent_lens.size(), 2u);
    EXPECT_EQ(p.port.sent_lens[0], kBig);
    EXPECT_EQ(p.port.send_bad, 0u) << "byte-identical";
    EXPECT_EQ(p.port.sent_seqs, (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(p.dev->stats().tx_pkts.get(), 2u);
    EXPECT_EQ(p.dev->stats().tx_bytes.get(), 2u * kBig);
    EXPECT_EQ(p.dev->stats().tx_drop_port.get(), 0u);

    EXPECT_EQ(qp.free_old_xmit(), 2u);
    EXPECT_EQ(qp.free_bufs(), pool0) << "every slot back in the pool";
    EXPECT_EQ(flow.in_flight_bytes(), 0u) << "credit for the whole packets";
    EXPECT_EQ(flow.stats().completed_pkts.get(), 2u);
    EXPECT_EQ(qp.tx_queue().num_free(), 128u);
    EXPECT_FALSE(p.tb.any_broken(*p.dev));
}

TEST_P(TxForm, QueueStopsWhileTheLargestChainMightNotFit) {
    frontend::VirtioNetConfig fc = config();
    fc.tx_size = 64;
    fc.tx_max_pieces = kPieces;
    fc.indirect_desc = GetParam();
    Pair p(fc);
    QueuePair& qp = p.qp();
    Flow flow(1u << 20);
    ASSERT_EQ(qp.xmit_sg(flow, build(qp, 0)), XmitStatus::Ok);
    // Chained: 31 free < 33, stopped; indirect: 63 free, each packet takes 1.
    EXPECT_EQ(qp.tx_stopped(), !GetParam());
    const auto next = build(qp, 1);
    const uint32_t pool = qp.free_bufs();
    const XmitStatus st = qp.xmit_sg(flow, next);
    EXPECT_EQ(st, GetParam() ? XmitStatus::Ok : XmitStatus::Stopped);
    if (st == XmitStatus::Stopped) {
        EXPECT_EQ(qp.free_bufs(), pool) << "a refused packet's slots stay with the sender";
        for (const TxPiece& t : next) qp.free_buf(t.buf_id);
    }
    EXPECT_EQ(flow.in_flight_bytes(), (GetParam() ? 2u : 1u) * kBig);
}

TEST(LargeFrame, SinglePieceXmitSgIsAPlainXmit) {
    Pair p(config());
    QueuePair& qp = p.qp();
    TxPiece t;
    ASSERT_TRUE(qp.alloc_buf(t.buf_id));
    t.len = 100;
    harness::write_packet(qp.buf_host(t.buf_id), 7, t.len);
    ASSERT_TRUE(qp.xmit_sg(std::span<const TxPiece>(&t, 1)));
    qp.tx_flush();
    p.dev->handle_tx();
    EXPECT_EQ(p.port.sent_seqs, (std::vector<uint64_t>{7}));
    EXPECT_EQ(qp.free_old_xmit(), 1u);
}


/// FakePort on a link whose MTU is 9000: its largest frame is 9018 bytes.
struct JumboPort : FakePort {
    static constexpr uint32_t kMaxFrame = 9000 + 14 + 4;
    uint32_t max_frame_bytes() const noexcept { return kMaxFrame; }
};
static_assert(port::HasMaxFrame<JumboPort> && !port::HasMaxFrame<FakePort>);

TEST(LargeFrame, WithoutGsoRxRoomIsThePortsLargestFrame) {
    // The port cannot peek and the guest takes no GSO: the device gathers
    // hdr + max_frame_bytes(), 9030 bytes (5 buffers of 2 KiB), for each
    // frame, and a frame of that size lands whole.
    frontend::VirtioNetConfig fc = config();
    fc.mergeable_rx = true;
    constexpr uint32_t kJumbo = kHdrBytes + JumboPort::kMaxFrame;
    constexpr uint16_t kJumboPieces = (kJumbo + kBuf - 1) / kBuf;  // 5
    PairOf<JumboPort> p(fc);
    p.port.rx_left = 2;
    p.port.rx_lens = {64, kJumbo};
    p.qp().try_fill_recv();
    p.dev->handle_rx();
    EXPECT_EQ(p.dev->stats().rx_pkts.get(), 2u);
    EXPECT_EQ(p.dev->stats().rx_short_recv.get(), 0u);
    EXPECT_EQ(p.dev->rx_queue().stats().pops.get(), kJumboPieces + 1u)
        << "room for one largest frame each time: the chains the first left are held for the "
           "second, which pops one more; the rest given back at the run's end";
    EXPECT_EQ(p.dev->rx_queue().last_avail_idx().value(), 1u + kJumboPieces);
    std::vector<std::size_t> pieces;
    std::vector<std::optional<uint64_t>> seqs;
    auto deliver = [&](std::span<const RxPiece> ps) {
        std::vector<std::byte> b;
        for (const RxPiece& x : ps) b.insert(b.end(), x.host, x.host + x.len);
        std::memset(b.data() + offsetof(virtio::virtio_net_hdr, num_buffers), 0, 2);
        pieces.push_back(ps.size());
        seqs.push_back(harness::check_packet(b.data(), static_cast<uint32_t>(b.size())));
        return false;
    };
    EXPECT_EQ(p.qp().poll_rx_packets(frontend::kNapiBudget, deliver), 2u);
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_EQ(pieces[0], 1u);
    EXPECT_EQ(pieces[1], kJumboPieces);
    EXPECT_EQ(seqs[0], std::optional<uint64_t>(0));
    EXPECT_EQ(seqs[1], std::optional<uint64_t>(1)) << "byte-identical";

    // The same guest and port without max_frame_bytes(): 1530 bytes, one buffer.
    Pair q(fc);
    q.port.rx_left = 1;
    q.port.rx_len = 64;
    q.qp().try_fill_recv();
    q.dev->handle_rx();
    EXPECT_EQ(q.dev->stats().rx_pkts.get(), 1u);
    EXPECT_EQ(q.dev->rx_queue().stats().pops.get(), 1u);
    EXPECT_FALSE(p.tb.any_broken(*p.dev));
    EXPECT_FALSE(q.tb.any_broken(*q.dev));
}

}  // namespace
}  // namespace pvnet::backend
