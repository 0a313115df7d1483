// TapPort against the real kernel (needs root: CAP_NET_ADMIN for taps and
// namespaces; CI runs as root, anything else FAILS with a message). Each
// test makes its own namespace, named with the pid, and the ScopedNetns
// deletes it with its taps on every exit path; every wait is a bounded poll.
#include "pvnet/port/tap_port.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "pvnet/virtio/virtio_config.h"
#include "tap_test_util.h"

namespace pvnet::port {
namespace {

using namespace tap_test;

TEST(TunOffloadFlags, MapsGuestReceiveFeatures) {
    using namespace virtio;
    const auto bit = [](unsigned b) { return uint64_t{1} << b; };
    EXPECT_EQ(tun_offload_flags(0), 0u);
    // TSO without CSUM is rejected by tun: the mapping gives nothing.
    EXPECT_EQ(tun_offload_flags(bit(VIRTIO_NET_F_GUEST_TSO4)), 0u);
    EXPECT_EQ(tun_offload_flags(bit(VIRTIO_NET_F_GUEST_CSUM)), kTunFCsum);
    EXPECT_EQ(tun_offload_flags(bit(VIRTIO_NET_F_GUEST_CSUM) | bit(VIRTIO_NET_F_GUEST_TSO4) |
                                bit(VIRTIO_NET_F_GUEST_TSO6) | bit(VIRTIO_NET_F_GUEST_ECN)),
              kTunFCsum | kTunFTso4 | kTunFTso6 | kTunFTsoEcn);
    // Host-side (tx) offloads are what we write, not what TUNSETOFFLOAD is about.
    EXPECT_EQ(tun_offload_flags(bit(VIRTIO_NET_F_CSUM) | bit(VIRTIO_NET_F_HOST_TSO4)), 0u);
}

TEST_F(TapRootTest, KernelAnswersArpWrittenThroughTap) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    Frame req = arp_request();
    ASSERT_TRUE(send_split(**tap, req));
    EXPECT_EQ((*tap)->tx_pkts.get(), 1u);
    EXPECT_EQ((*tap)->tx_bytes.get(), req.size());

    auto reply = await_arp_reply(**tap);
    ASSERT_TRUE(reply.has_value()) << "no ARP reply within 2 s";
    const auto* e = reinterpret_cast<const uint8_t*>(reply->data() + kHdr);
    EXPECT_EQ(std::memcmp(e, kSrcMac.data(), 6), 0);      // to us
    EXPECT_EQ(std::memcmp(e + 6, kDstMac.data(), 6), 0);  // from the tap's MAC
    EXPECT_EQ(std::memcmp(e + 28, kDstIp.data(), 4), 0);  // 198.51.100.1 is-at
    // tun writes the 10-byte header; num_buffers (bytes 10..11) is ours: 1.
    EXPECT_EQ(std::to_integer<int>((*reply)[10]), 1);
    EXPECT_EQ(std::to_integer<int>((*reply)[11]), 0);
    EXPECT_GE((*tap)->rx_pkts.get(), 1u);
}

// Issue 23, item 5: what the tap queued for a guest whose session ended
// (here the kernel's ARP reply, never read) is dropped and counted, so the
// next guest on this device does not receive it.
TEST_F(TapRootTest, SessionEndDropsWhatTheTapQueuedCounted) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    Frame req = arp_request();
    ASSERT_TRUE(send_split(**tap, req));
    pollfd p{(*tap)->rx_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 2000), 1) << "no ARP reply within 2 s";
    (*tap)->session_end();
    EXPECT_GE((*tap)->rx_drop_no_session.get(), 1u);
    EXPECT_EQ((*tap)->rx_drops(), (*tap)->rx_drop_no_session.get());
    EXPECT_FALSE((*tap)->rx_pending());
    EXPECT_EQ((*tap)->rx_pkts.get(), 0u);
    // The next session reads what comes for it.
    (*tap)->session_start();
    ASSERT_TRUE(send_split(**tap, req));
    EXPECT_TRUE(await_arp_reply(**tap).has_value());
}

TEST_F(TapRootTest, UdpFrameReachesSocketInNamespace) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    UdpSink sink(ns_->name());
    ASSERT_GE(sink.fd, 0);
    Frame f = udp_frame(42);
    ASSERT_TRUE(send_split(**tap, f));
    EXPECT_EQ(sink.next_seq(), std::optional<uint64_t>(42)) << "datagram not delivered in 2 s";
}

/// send_batch with io_uring (tx_batch 4: ten frames take three enters) and
/// without (tx_batch 0: one writev each) gives the same deliveries and counts.
class TapBatchTest : public TapRootTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(TapBatchTest, SendBatchWritesAllAndCountsRejections) {
    TapConfig c = config("pvt0");
    c.tx_batch = GetParam();
    auto tap = TapPort::open(c);
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    // io_uring is enabled on the CI kernel: the batched path is what runs.
    EXPECT_EQ((*tap)->tx_batch_uring(), GetParam() != 0);
    address("pvt0");
    UdpSink sink(ns_->name());
    ASSERT_GE(sink.fd, 0);

    std::vector<Frame> frames;
    for (uint64_t seq = 0; seq < 10; ++seq) frames.push_back(udp_frame(seq));
    reinterpret_cast<virtio::virtio_net_hdr*>(frames[3].data())->hdr_len.set(1000);  // EINVAL
    std::vector<std::array<iovec, 2>> iovs;
    std::vector<TxFrame> batch;
    iovs.reserve(frames.size());
    for (Frame& f : frames) {
        iovs.push_back({iovec{f.data(), 5}, iovec{f.data() + 5, f.size() - 5}});
        batch.push_back({iovs.back(), static_cast<uint32_t>(f.size())});
    }
    batch[6].len -= 1;  // disagrees with its iovecs: never submitted
    const SendBatchResult r = (*tap)->send_batch(batch);
    EXPECT_EQ(r.taken, 10u);
    EXPECT_EQ(r.sent, 8u);
    EXPECT_FALSE(r.retry);
    EXPECT_EQ((*tap)->tx_pkts.get(), 8u);
    EXPECT_EQ((*tap)->tx_drops(), 2u);
    EXPECT_EQ((*tap)->tx_retry.get(), 0u);
    EXPECT_EQ((*tap)->tx_drop_errno.get(TapErrno::Inval), 1u);
    EXPECT_EQ((*tap)->tx_drop_bad_len.get(), 1u);
    EXPECT_EQ((*tap)->tx_last_errno(), EINVAL);
    EXPECT_EQ((*tap)->tx_batch_ring_failed.get(), 0u);
    uint64_t sent_bytes = 0;
    for (const uint64_t seq : {0u, 1u, 2u, 4u, 5u, 7u, 8u, 9u}) sent_bytes += frames[seq].size();
    EXPECT_EQ(r.sent_bytes, sent_bytes);
    EXPECT_EQ((*tap)->tx_bytes.get(), sent_bytes);
    for (const uint64_t seq : {0u, 1u, 2u, 4u, 5u, 7u, 8u, 9u}) {
        EXPECT_EQ(sink.next_seq(), std::optional<uint64_t>(seq));
    }
    // A batch of one (a writev, not the ring) is counted the same way.
    const SendBatchResult one = (*tap)->send_batch(std::span(batch).first(1));
    EXPECT_EQ(one.taken, 1u);
    EXPECT_EQ(one.sent, 1u);
    EXPECT_EQ(one.sent_bytes, frames[0].size());
    EXPECT_EQ((*tap)->tx_pkts.get(), 9u);
    EXPECT_EQ(sink.next_seq(), std::optional<uint64_t>(0));
}

// port::HasRecvEmpty: the backend reads without polling first, so a read
// that finds nothing must say so and count no drop; any other read clears it.
TEST_F(TapRootTest, ReadOfAnEmptyTapSaysEmptyAndDropsNothing) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    Frame buf(2048);
    const std::array<iovec, 1> iov{iovec{buf.data(), buf.size()}};
    EXPECT_EQ((*tap)->recv(iov), 0u);
    EXPECT_TRUE((*tap)->recv_was_empty());
    EXPECT_EQ((*tap)->rx_empty.get(), 1u);
    EXPECT_EQ((*tap)->rx_drops(), 0u);
    address("pvt0");
    Frame req = arp_request();
    ASSERT_TRUE(send_split(**tap, req));
    ASSERT_TRUE(await_arp_reply(**tap).has_value()) << "no ARP reply within 2 s";
    EXPECT_FALSE((*tap)->recv_was_empty()) << "the read that delivered";
    // Whatever else the kernel queued (IPv6 router solicitations), then empty.
    for (int i = 0; i < 100 && (*tap)->recv(iov) != 0; ++i) {
        EXPECT_FALSE((*tap)->recv_was_empty());
    }
    EXPECT_TRUE((*tap)->recv_was_empty());
    // Less room than the header on an empty tap: empty too, not a drop.
    const std::array<iovec, 1> tiny{iovec{buf.data(), 4}};
    EXPECT_EQ((*tap)->recv(tiny), 0u);
    EXPECT_TRUE((*tap)->recv_was_empty());
    EXPECT_EQ((*tap)->rx_drops(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Tap, TapBatchTest, ::testing::Values(0u, 4u));

TEST_F(TapRootTest, BadVnetHeaderIsCountedDropWithEinval) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    auto hdr_of = [](Frame& f) { return reinterpret_cast<virtio::virtio_net_hdr*>(f.data()); };

    Frame long_hdr = udp_frame(1);  // hdr_len beyond the frame
    hdr_of(long_hdr)->hdr_len.set(1000);
    Frame far_csum = udp_frame(2);  // csum_start beyond the frame
    hdr_of(far_csum)->flags = virtio::VIRTIO_NET_HDR_F_NEEDS_CSUM;
    hdr_of(far_csum)->csum_start.set(500);
    hdr_of(far_csum)->csum_offset.set(6);
    Frame bad_type = udp_frame(3);  // no such gso_type
    hdr_of(bad_type)->gso_type = 2;
    hdr_of(bad_type)->gso_size.set(100);
    for (Frame* f : {&long_hdr, &far_csum, &bad_type}) EXPECT_FALSE(send_split(**tap, *f));
    EXPECT_EQ((*tap)->tx_drop_errno.get(TapErrno::Inval), 3u);
    EXPECT_EQ((*tap)->tx_drop_errno.total(), 3u);
    EXPECT_EQ((*tap)->tx_last_errno(), EINVAL);
    EXPECT_EQ((*tap)->tx_pkts.get(), 0u);

    // A length that disagrees with the iovecs never reaches the kernel.
    Frame ok = arp_request();
    const iovec whole{ok.data(), ok.size()};
    EXPECT_EQ((*tap)->send({&whole, 1}, static_cast<uint32_t>(ok.size() + 1)), SendResult::Dropped);
    EXPECT_EQ((*tap)->tx_drop_bad_len.get(), 1u);

    // The port goes on working.
    ASSERT_TRUE(send_split(**tap, ok));
    EXPECT_TRUE(await_arp_reply(**tap).has_value());
}

TEST_F(TapRootTest, ReadsCheckTheGuestBufferRoom) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    // Nothing sent yet: drain whatever the link-up produced, then an empty read.
    Frame buf(2048);
    const iovec big{buf.data(), buf.size()};
    while ((*tap)->rx_pending()) (void)(*tap)->recv({&big, 1});
    EXPECT_FALSE((*tap)->rx_pending());
    EXPECT_EQ((*tap)->recv({&big, 1}), 0u);
    EXPECT_GE((*tap)->rx_empty.get(), 1u);

    // A buffer that cannot hold the header, with nothing waiting: nothing lost.
    const uint64_t empty = (*tap)->rx_empty.get();
    const iovec tiny{buf.data(), kHdr - 1};
    EXPECT_EQ((*tap)->recv({&tiny, 1}), 0u);
    EXPECT_EQ((*tap)->rx_drop_truncated.get(), 0u);
    EXPECT_EQ((*tap)->rx_empty.get(), empty + 1);

    // The kernel's ARP reply (42 bytes) into 12 + 41 bytes: truncated, counted,
    // dropped; into exactly 12 + 42 bytes: delivered (tun cuts silently, so
    // only the extra overflow byte tells the two apart).
    const uint64_t drained = (*tap)->rx_pkts.get();
    for (const std::size_t room : {kHdr + 41, kHdr + 42}) {
        Frame req = arp_request();
        ASSERT_TRUE(send_split(**tap, req));
        pollfd p{(*tap)->rx_fd(), POLLIN, 0};
        ASSERT_EQ(::poll(&p, 1, 2000), 1);
        const iovec exact{buf.data(), room};
        EXPECT_EQ((*tap)->recv({&exact, 1}), room == kHdr + 42 ? room : 0u);
    }
    EXPECT_EQ((*tap)->rx_drop_truncated.get(), 1u);
    EXPECT_EQ((*tap)->rx_pkts.get(), drained + 1);
}

TEST_F(TapRootTest, AttachesToExistingTap) {
    ASSERT_EQ(ns_->ip({"tuntap", "add", "dev", "pvt1", "mode", "tap", "vnet_hdr"}), 0);
    auto tap = TapPort::open(config("pvt1"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt1");
    Frame req = arp_request();
    ASSERT_TRUE(send_split(**tap, req));
    EXPECT_TRUE(await_arp_reply(**tap).has_value());

    // A single-queue tap has one reader: a second open is a clear error.
    auto second = TapPort::open(config("pvt1"));
    ASSERT_FALSE(second.has_value());
    EXPECT_STREQ(second.error().op, "TUNSETIFF");
    EXPECT_EQ(second.error().err, EBUSY);
}

TEST_F(TapRootTest, MultiQueueTapTakesOnePortPerQueue) {
    TapConfig c = config("pvt0");
    c.multi_queue = true;
    auto q0 = TapPort::open(c);
    auto q1 = TapPort::open(c);
    ASSERT_TRUE(q0.has_value()) << to_string(q0.error());
    ASSERT_TRUE(q1.has_value()) << to_string(q1.error());
    EXPECT_NE((*q0)->rx_fd(), (*q1)->rx_fd());
}

TEST_F(TapRootTest, ErrorsNameTheStep) {
    TapConfig c = config("pvt0");
    c.netns = "pvnet-no-such-ns";
    auto r = TapPort::open(c);
    ASSERT_FALSE(r.has_value());
    EXPECT_STREQ(r.error().op, "open netns");
    EXPECT_EQ(r.error().err, ENOENT);
    c = config("a-name-longer-than-15");
    r = TapPort::open(c);
    ASSERT_FALSE(r.has_value());
    EXPECT_STREQ(r.error().op, "tap name");
    c = config("pvt0");
    c.tx_batch = TapPort::kMaxTxBatch + 1;
    r = TapPort::open(c);
    ASSERT_FALSE(r.has_value());
    EXPECT_STREQ(r.error().op, "tx_batch");
    c = config("pvt0");
    c.sndbuf_bytes = -1;
    r = TapPort::open(c);
    ASSERT_FALSE(r.has_value());
    EXPECT_STREQ(r.error().op, "sndbuf");
}

TEST_F(TapRootTest, OffloadsFromGuestFeaturesReachTheDevice) {
    using namespace virtio;
    TapConfig c = config("pvt0");
    c.offloads = tun_offload_flags((uint64_t{1} << VIRTIO_NET_F_GUEST_CSUM) |
                                   (uint64_t{1} << VIRTIO_NET_F_GUEST_TSO4));
    auto tso = TapPort::open(c);
    ASSERT_TRUE(tso.has_value()) << to_string(tso.error());
    std::string k = ethtool_k(ns_->name(), "pvt0");
    EXPECT_NE(k.find("tx-tcp-segmentation: on"), std::string::npos) << k;
    EXPECT_NE(k.find("tx-tcp6-segmentation: off"), std::string::npos) << k;

    c.name = "pvt1";
    c.offloads = 0;
    auto none = TapPort::open(c);
    ASSERT_TRUE(none.has_value()) << to_string(none.error());
    k = ethtool_k(ns_->name(), "pvt1");
    EXPECT_NE(k.find("tx-tcp-segmentation: off"), std::string::npos) << k;
}

}  // namespace
}  // namespace pvnet::port
