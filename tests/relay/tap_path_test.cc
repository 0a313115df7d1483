// The TAP path's header rule (seed 002): the backend passes the guest's
// virtio_net_hdr to tun untouched and tun validates it. A frame tun rejects
// is a counted drop with its errno; the frames around it still go through.
// Root only: the tap lives in a namespace of the test's own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/port/netns.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet {
namespace {

/// A 60-byte broadcast Ethernet frame behind a header of the given GSO kind.
uint32_t write_frame(std::byte* p, uint8_t gso_type, uint16_t gso_size) {
    virtio::virtio_net_hdr h{};
    h.gso_type = gso_type;
    h.gso_size.set(gso_size);
    std::memcpy(p, &h, sizeof h);
    std::byte* f = p + sizeof h;
    std::memset(f, 0xff, 6);                 // broadcast destination
    std::memset(f + 6, 0x02, 6);             // a locally administered source
    f[12] = std::byte{0x88};                 // an experimental EtherType (IEEE 802
    f[13] = std::byte{0xb5};                 // local use): the kernel just drops it
    std::memset(f + 14, 0, 46);
    return static_cast<uint32_t>(sizeof h) + 60;
}

TEST(TapPath, BadVnetHeaderIsACountedDropAndTheNextFrameGoesThrough) {
    ASSERT_EQ(geteuid(), 0u) << "needs root (CAP_NET_ADMIN) for a namespace and a tap";
    auto ns = port::ScopedNetns::create("pvnet-tappath-" + std::to_string(getpid()));
    ASSERT_TRUE(ns.has_value()) << port::to_string(ns.error());
    port::TapConfig tc;
    tc.name = "tp0";
    tc.netns = ns->name();
    tc.link_up = true;
    auto tap = port::TapPort::open(tc);
    ASSERT_TRUE(tap.has_value()) << port::to_string(tap.error());

    pair::GuestPair tb;
    ASSERT_FALSE(tb.setup(64, true).has_value());
    using Dev = backend::VhostNet<port::TapPort>;
    auto dev = Dev::create(tb.device_setup(), backend::VhostNetOptions{}, **tap);
    ASSERT_TRUE(dev.has_value());
    (*dev)->start();

    // good, bad (TCPV4 GSO with gso_size 0: tun's virtio_net_hdr_to_skb says
    // EINVAL), good.
    frontend::QueuePair& qp = tb.qp();
    const struct {
        uint8_t gso_type;
        uint16_t gso_size;
    } frames[] = {{virtio::VIRTIO_NET_HDR_GSO_NONE, 0}, {virtio::VIRTIO_NET_HDR_GSO_TCPV4, 0},
                  {virtio::VIRTIO_NET_HDR_GSO_NONE, 0}};
    for (const auto& f : frames) {
        uint32_t id;
        ASSERT_TRUE(qp.alloc_buf(id));
        ASSERT_TRUE(qp.xmit(id, write_frame(qp.buf_host(id), f.gso_type, f.gso_size)));
    }
    qp.tx_flush();

    // Every chain is used, the bad one included: sent by the tap, or refused
    // for good (Dropped, tx_drop_port).
    const backend::VhostNetStats& s = (*dev)->stats();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (s.tx_pkts.get() + s.tx_drop_port.get() < 3 &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    (*dev)->stop();
    EXPECT_EQ(s.tx_pkts.get(), 2u) << "the two good frames, taken by the tap";
    EXPECT_EQ(s.tx_drop_port.get(), 1u) << "the bad header, refused by tun";
    EXPECT_EQ(s.tx_retry.get(), 0u);
    EXPECT_EQ((*dev)->tx_queue().used_idx().value(), 3u) << "every chain used";
    EXPECT_EQ((*tap)->tx_pkts.get(), 2u);
    EXPECT_EQ((*tap)->tx_drop_errno.get(port::TapErrno::Inval), 1u);
    EXPECT_EQ((*tap)->tx_drop_errno.total(), 1u);
    EXPECT_EQ((*tap)->tx_last_errno(), EINVAL);
    // Frames in = frames out + drops by reason: what the guest queued was
    // consumed (taken by the tap, or dropped with a reason), and the
    // backend's counts agree with the tap's.
    EXPECT_EQ(qp.stats().tx_pkts.get(),
              s.tx_pkts.get() + s.tx_drop_bad_chain.get() + s.tx_drop_port.get());
    EXPECT_EQ(s.tx_pkts.get(), (*tap)->tx_pkts.get());
    EXPECT_EQ(s.tx_drop_port.get(), (*tap)->tx_drops());
    EXPECT_EQ(s.tx_retry.get(), (*tap)->tx_retry.get());
    // A bad header is the kernel's to refuse, not a ring defect.
    EXPECT_FALSE((*dev)->tx_queue().broken());
}

}  // namespace
}  // namespace pvnet
