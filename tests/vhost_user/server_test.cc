// vhost_user::Server against a test front-end over a real unix socket: the
// QEMU-like setup sequence moves packets both ways through a VhostNet on a
// PeerPort; then the hostile cases, each checked by the answer (REPLY_ACK
// failure or close), the counter, the fd count, and that a fresh session
// still works afterwards.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/port/peer_port.h"
#include "pvnet/vhost_user/backend_session.h"
#include "pvnet/vhost_user/server.h"
#include "pvnet/vhost_user/unix_socket.h"
#include "pvnet/virtio/virtio_config.h"
#include "server_bed.h"
#include "test_frontend.h"

namespace pvnet::vhost_user {
namespace {

using namespace test;
using mem::GuestAddr;

// QEMU emulates the control queue: its features (CTRL_VQ, NOTF_COAL, RSS,
// HASH_REPORT, whose commands would never reach the device) are not offered
// (the device offers RSS and HASH_REPORT itself on two pairs); MQ is, for
// a device of several pairs, and taken by the device without a control
// queue: every pair in use.
TEST(VhostUserSession, FeaturesOfferMqForSeveralPairsNeverTheControlQueuesOwn) {
    using virtio::feature_mask;
    auto pp0 = port::PeerPort::create_pair({}, {});
    auto pp1 = port::PeerPort::create_pair({}, {});
    ASSERT_TRUE(pp0 && pp1);
    port::PeerPort* two[] = {pp0->first.get(), pp1->first.get()};
    auto dev2 = backend::VhostNet<port::PeerPort>::create(backend::VhostNetOptions{},
                                                          std::span<port::PeerPort* const>(two));
    auto dev1 = backend::VhostNet<port::PeerPort>::create(
        backend::VhostNetOptions{}, std::span<port::PeerPort* const>(two).first(1));
    ASSERT_TRUE(dev2 && dev1);
    const uint64_t f2 = session_features(**dev2);
    const uint64_t f1 = session_features(**dev1);
    for (const uint64_t f : {f1, f2}) {
        EXPECT_EQ(f & feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ), 0u);
        EXPECT_EQ(f & feature_mask(virtio::VIRTIO_NET_F_NOTF_COAL), 0u);
        EXPECT_EQ(f & feature_mask(virtio::VIRTIO_NET_F_RSS), 0u);
        EXPECT_EQ(f & feature_mask(virtio::VIRTIO_NET_F_HASH_REPORT), 0u);
    }
    EXPECT_NE((*dev2)->offered_features() & feature_mask(virtio::VIRTIO_NET_F_HASH_REPORT), 0u);
    EXPECT_NE(f2 & feature_mask(virtio::VIRTIO_NET_F_MQ), 0u);
    EXPECT_EQ(f1 & feature_mask(virtio::VIRTIO_NET_F_MQ), 0u);
    EXPECT_EQ((*dev2)->rx_steer().active_pairs(), 2);
}

// VIRTIO_F_IN_ORDER is offered (the device uses chains in the order made
// available, and checks it), accepted and taken by the device's queues.
TEST(VhostUserSession, InOrderIsOfferedAcceptedAndTheRingsRunWithIt) {
    const uint64_t in_order = virtio::feature_mask(virtio::VIRTIO_F_IN_ORDER);
    Bed b("in_order");
    FrontEnd fe(b.cfg.path);
    Guest g;
    const auto offered = fe.get(Request::GetFeatures);
    ASSERT_TRUE(offered);
    EXPECT_NE(*offered & in_order, 0u);
    full_setup(fe, g, kFeatures | in_order);
    EXPECT_NE(b.dev->features() & in_order, 0u);
    for (uint64_t s = 0; s < 8; ++s) packets_flow(b, g, s);
    // The counter, not the queues: those belong to the session's thread, which
    // may be stopping them (TSan saw that race). A PushOutOfOrder breaks a vring.
    EXPECT_EQ(b.dev->device_stats().vrings_broken.get(), 0u);
}

TEST(VhostUserServer, QemuLikeSetupMovesPacketsAndGetVringBaseStops) {
    Bed b("setup");
    {
        FrontEnd fe(b.cfg.path);
        Guest g;
        full_setup(fe, g);
        EXPECT_TRUE(b.server->connected());
        EXPECT_EQ(b.st().rings_started.get(), 2u);
        EXPECT_EQ(b.st().mem_tables.get(), 1u);
        for (uint64_t s = 0; s < 5; ++s) packets_flow(b, g, s);
        // QEMU's second pass for another queue pair: same features and table are no-ops.
        EXPECT_EQ(fe.ack(Request::SetFeatures, kFeatures), 0u);
        const int mfd = g.region.fd();
        EXPECT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
        EXPECT_EQ(b.st().mem_table_same.get(), 1u);
        EXPECT_EQ(b.st().mem_tables.get(), 1u);
        EXPECT_EQ(fe.ack(Request::NetSetMtu, uint64_t{1500}), 0u);
        EXPECT_EQ(b.server->mtu(), 1500);
        EXPECT_NE(fe.ack(Request::NetSetMtu, uint64_t{9001}).value_or(0), 0u);
        ASSERT_TRUE(fe.msg(Request::SetStatus, uint64_t{0xf}, {}, false));
        EXPECT_EQ(fe.get(Request::GetStatus), 0xfu);

        // GET_VRING_BASE: the tx ring stops where the device is (5 chains).
        ASSERT_TRUE(fe.msg(Request::GetVringBase, vs(1, 0), {}, false));
        const auto base = fe.reply(Request::GetVringBase);
        ASSERT_TRUE(base);
        VringState st;
        std::memcpy(static_cast<void*>(&st), &*base, sizeof st);
        EXPECT_EQ(st.index, 1u);
        EXPECT_EQ(st.num, 5u);
        EXPECT_FALSE(b.dev->vring_started(1));
        EXPECT_EQ(b.st().rings_stopped.get(), 1u);
        // A new kick restarts it from its base.
        const int k = g.kick[1].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{1}, std::span(&k, 1)), 0u);
        EXPECT_TRUE(b.dev->vring_started(1));
        packets_flow(b, g, 5);
    }
    // Disconnect: rings stopped, device reset, memory gone.
    ASSERT_TRUE(wait_until([&] { return b.st().disconnects.get() == 1; }));
    EXPECT_FALSE(b.dev->vring_started(0));
    EXPECT_FALSE(b.dev->vring_started(1));
    fresh_setup_works(b);
}

TEST(VhostUserServer, WithoutProtocolFeaturesRingsStartEnabled) {
    Bed b("noproto");
    FrontEnd fe(b.cfg.path);
    Guest g;
    const uint64_t f = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1);
    ASSERT_TRUE(fe.msg(Request::SetFeatures, f, {}, false));
    const int mfd = g.region.fd();
    ASSERT_TRUE(fe.msg(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1), false));
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(fe.msg(Request::SetVringNum, vs(i, kRingSize), {}, false));
        ASSERT_TRUE(fe.msg(Request::SetVringAddr, g.vring_addr(i), {}, false));
        const int k = g.kick[i].fd(), c = g.call[i].fd();
        ASSERT_TRUE(fe.msg(Request::SetVringCall, uint64_t{i}, std::span(&c, 1), false));
        ASSERT_TRUE(fe.msg(Request::SetVringKick, uint64_t{i}, std::span(&k, 1), false));
    }
    EXPECT_TRUE(fe.get(Request::GetFeatures));  // a round trip: everything before it handled
    EXPECT_EQ(b.st().rings_started.get(), 2u);
    packets_flow(b, g, 7);
    // Without REPLY_ACK a refused request closes the connection (NET_SET_MTU
    // without NET_MTU negotiated is not served).
    ASSERT_TRUE(fe.msg(Request::NetSetMtu, uint64_t{1500}, {}, true));
    EXPECT_TRUE(fe.closed_by_peer());
    EXPECT_EQ(b.st().unsupported.get(), 1u);
    EXPECT_EQ(b.st().rejected.get(), 1u);
    EXPECT_EQ(b.server->mtu(), 0);
}

TEST(VhostUserServer, FramingErrorsCloseTheConnection) {
    Bed b("framing");
    const auto closes = [&](uint32_t flags, uint32_t size) {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        const std::vector<std::byte> p(size);
        EXPECT_TRUE(fe.send(Request::SetOwner, flags, p.data(), size));
        EXPECT_TRUE(fe.closed_by_peer());
    };
    closes(0x2, 0);                                     // version 2
    closes(kVersion | kFlagReply, 0);                   // a reply sent as a request
    closes(kVersion | kFlagNeedReply, kMaxPayload + 1);  // oversized
    EXPECT_EQ(b.st().bad_header.get(), 3u);
    EXPECT_EQ(b.st().messages.get(), 3u * 5u);  // only negotiate()'s
    // A header claiming 4 GiB of payload is refused as it arrives, not read on
    // (into a kMaxPayload buffer) until the stall deadline.
    {
        FrontEnd fe(b.cfg.path);
        const MsgHeader h{static_cast<uint32_t>(Request::SetOwner), kVersion, 0xffffffffu};
        ASSERT_TRUE(fe.send_raw(&h, sizeof h));
        EXPECT_TRUE(fe.closed_by_peer());
    }
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    EXPECT_EQ(b.st().bad_header.get(), 4u);
    EXPECT_EQ(b.st().stalled.get(), 0u);
    fresh_setup_works(b);
}

TEST(VhostUserServer, BadPayloadsFdsAndStateAreRefusedWithAnAck) {
    Bed b("refused");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    const int base_fds = count_fds();
    // Wrong payload size.
    EXPECT_NE(fe.ack(Request::SetFeatures, uint32_t{1}).value_or(0), 0u);
    // Extra fds: refused and closed.
    {
        auto e1 = notify::EventFd::create(), e2 = notify::EventFd::create();
        const int fds[] = {e1->fd(), e2->fd()};
        EXPECT_NE(fe.ack(Request::SetVringNum, vs(0, kRingSize), fds).value_or(0), 0u);
    }
    EXPECT_EQ(b.st().bad_fds.get(), 1u);
    // Vring indexes past the data vrings (ctrl = 2 * max_pairs, and 255).
    for (uint32_t i : {2u, 255u, 0x10000u}) {
        EXPECT_NE(fe.ack(Request::SetVringNum, vs(i, kRingSize)).value_or(0), 0u);
    }
    for (uint64_t i : {uint64_t{2}, uint64_t{255}, uint64_t{0x200}}) {
        auto e = notify::EventFd::create();
        const int fd = e->fd();
        EXPECT_NE(fe.ack(Request::SetVringCall, i, std::span(&fd, 1)).value_or(0), 0u);
    }
    // Not a power of two, too big.
    EXPECT_NE(fe.ack(Request::SetVringNum, vs(0, 3)).value_or(0), 0u);
    EXPECT_NE(fe.ack(Request::SetVringNum, vs(0, 65536)).value_or(0), 0u);
    const uint64_t payload_before_state = b.st().bad_payload.get();
    // Addresses and kick before a memory table.
    EXPECT_NE(fe.ack(Request::SetVringAddr, g.vring_addr(0)).value_or(0), 0u);
    {
        const int k = g.kick[0].fd();
        EXPECT_NE(fe.ack(Request::SetVringKick, uint64_t{0}, std::span(&k, 1)).value_or(0), 0u);
    }
    EXPECT_EQ(b.st().bad_state.get(), 2u);
    EXPECT_EQ(b.st().bad_payload.get(), payload_before_state);
    EXPECT_EQ(count_fds(), base_fds);

    // Bad regions: nothing mapped, fds closed.
    const int mfd = g.region.fd();
    const auto bad_table = [&](MemRegion r) {
        OneRegion t;
        t.r = r;
        EXPECT_NE(fe.ack(Request::SetMemTable, t, std::span(&mfd, 1)).value_or(0), 0u);
    };
    const uint64_t sz = g.region.size();
    bad_table({kGpa, 0, kUva, 0});                    // size 0
    bad_table({UINT64_MAX - 10, sz, kUva, 0});        // gpa + size overflows
    bad_table({kGpa, sz, UINT64_MAX - 10, 0});        // uva + size overflows
    bad_table({kGpa, sz, kUva, UINT64_MAX - 10});     // offset + size overflows
    bad_table({kGpa, sz + 4096, kUva, 0});            // fd too short
    bad_table({kGpa, sz, kUva, 4096});                // offset: too short again
    {
        struct {
            uint32_t n = 2, pad = 0;
            MemRegion r[2];
        } two;
        two.r[0] = {kGpa, sz, kUva, 0};
        two.r[1] = {kGpa + 4096, 4096, kUva + sz, 0};  // gpa overlap
        const int fds[] = {mfd, mfd};
        EXPECT_NE(fe.ack(Request::SetMemTable, two, fds).value_or(0), 0u);
        two.r[1] = {kGpa + sz, 4096, kUva + 4096, 0};  // uva overlap
        EXPECT_NE(fe.ack(Request::SetMemTable, two, fds).value_or(0), 0u);
        EXPECT_NE(fe.ack(Request::SetMemTable, two, std::span(&mfd, 1)).value_or(0), 0u);  // 1 fd
    }
    // nregions 0 and 9.
    {
        const uint64_t zero = 0;
        EXPECT_NE(fe.ack(Request::SetMemTable, zero).value_or(0), 0u);
    }
    EXPECT_EQ(b.st().mem_tables.get(), 0u);
    EXPECT_EQ(count_fds(), base_fds);

    // A good table, then a ring address outside it.
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    VringAddr a = g.vring_addr(0);
    a.used_user_addr = kUva + sz;  // one past the region
    EXPECT_NE(fe.ack(Request::SetVringAddr, a).value_or(0), 0u);
    a.used_user_addr = kUva - 1;
    EXPECT_NE(fe.ack(Request::SetVringAddr, a).value_or(0), 0u);
    // Unsupported request, with NEED_REPLY: refused, connection kept.
    EXPECT_NE(fe.ack(Request::SetLogBase, uint64_t{0}).value_or(0), 0u);
    EXPECT_NE(fe.ack(static_cast<Request>(1000), uint64_t{0}).value_or(0), 0u);
    EXPECT_EQ(b.st().unsupported.get(), 2u);
    // Unknown features and protocol features.
    EXPECT_NE(fe.ack(Request::SetFeatures, kFeatures | bit(63)).value_or(0), 0u);
    EXPECT_NE(fe.ack(Request::SetProtocolFeatures, bit(kProtoBackendReq)).value_or(0), 0u);
    // The session still works after every refusal.
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(fe.ack(Request::SetVringNum, vs(i, kRingSize)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(i)), 0u);
        const int k = g.kick[i].fd(), c = g.call[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{i}, std::span(&c, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(i, 1)), 0u);
    }
    packets_flow(b, g, 3);
    // Running: no new size.
    EXPECT_NE(fe.ack(Request::SetVringNum, vs(0, 128)).value_or(0), 0u);
    EXPECT_EQ(b.st().rejected.get(), b.st().bad_payload.get() + b.st().bad_fds.get() +
                                         b.st().bad_state.get() + b.st().unsupported.get());
}

// One rule each: the refusal, the one counter that says why (and no other
// reason's), and nothing changed by the refused request.
struct Reasons {
    uint64_t rejected, payload, fds, state, unsupported, started, stopped;
    explicit Reasons(const SessionStats& s)
        : rejected(s.rejected.get()), payload(s.bad_payload.get()), fds(s.bad_fds.get()),
          state(s.bad_state.get()), unsupported(s.unsupported.get()),
          started(s.rings_started.get()), stopped(s.rings_stopped.get()) {}
};
enum class Why : uint8_t { Payload, Fds, State, Unsupported };
void expect_one_refusal(const SessionStats& s, const Reasons& was, Why why) {
    const Reasons now(s);
    EXPECT_EQ(now.rejected, was.rejected + 1);
    EXPECT_EQ(now.payload, was.payload + (why == Why::Payload ? 1 : 0));
    EXPECT_EQ(now.fds, was.fds + (why == Why::Fds ? 1 : 0));
    EXPECT_EQ(now.state, was.state + (why == Why::State ? 1 : 0));
    EXPECT_EQ(now.unsupported, was.unsupported + (why == Why::Unsupported ? 1 : 0));
    EXPECT_EQ(now.started, was.started);  // no ring started or stopped by it
    EXPECT_EQ(now.stopped, was.stopped);
}

TEST(VhostUserRules, VringEnableTakesOnlyZeroOrOne) {
    Bed b("rule_enable");
    FrontEnd fe(b.cfg.path);
    Guest g;
    full_setup(fe, g);
    for (const uint32_t v : {2u, 0x100u, 0xffffffffu}) {
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::SetVringEnable, vs(1, v)), 1u) << v;
        expect_one_refusal(b.st(), was, Why::Payload);
    }
    EXPECT_TRUE(b.dev->vring_started(1));
    packets_flow(b, g, 1);
}

TEST(VhostUserRules, VringAddrWithTheLogFlagIsUnsupported) {
    Bed b("rule_log");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringNum, vs(0, kRingSize)), 0u);
    const int k = g.kick[0].fd();
    ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{0}, std::span(&k, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(0, 1)), 0u);
    // Addresses would complete the ring; with LOG (logging is never offered) they are refused.
    VringAddr a = g.vring_addr(0);
    a.flags = kVringFLog;
    a.log_guest_addr = kGpa;
    const Reasons was(b.st());
    EXPECT_EQ(fe.ack(Request::SetVringAddr, a), 1u);
    expect_one_refusal(b.st(), was, Why::Unsupported);
    EXPECT_FALSE(b.dev->vring_started(0));
    ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(0)), 0u);
    EXPECT_TRUE(b.dev->vring_started(0));
}

TEST(VhostUserRules, VringBaseAbove16BitsIsRefusedAndTheOldBaseStays) {
    Bed b("rule_base");
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    ASSERT_EQ(fe.ack(Request::SetVringBase, vs(0, 7)), 0u);
    for (const uint32_t v : {0x10000u, 0x10005u, 0xffffffffu}) {
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::SetVringBase, vs(0, v)), 1u) << v;
        expect_one_refusal(b.st(), was, Why::Payload);
    }
    ASSERT_TRUE(fe.msg(Request::GetVringBase, vs(0, 0), {}, false));
    const auto base = fe.reply(Request::GetVringBase);
    ASSERT_TRUE(base);
    EXPECT_EQ(*base >> 32, 7u);
}

TEST(VhostUserRules, StatusNeedsTheStatusFeatureAndFitsAByte) {
    Bed b("rule_status");
    {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        ASSERT_EQ(fe.ack(Request::SetStatus, uint64_t{0xf}), 0u);
        for (const uint64_t v : {uint64_t{0x100}, uint64_t{0x10f}, ~uint64_t{0}}) {
            const Reasons was(b.st());
            EXPECT_EQ(fe.ack(Request::SetStatus, v), 1u) << v;
            expect_one_refusal(b.st(), was, Why::Payload);
        }
        EXPECT_EQ(fe.get(Request::GetStatus), 0xfu);
    }
    // Without VHOST_USER_PROTOCOL_F_STATUS neither is served.
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    FrontEnd fe(b.cfg.path);
    ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, bit(kProtoReplyAck), {}, false));
    Reasons was(b.st());
    EXPECT_EQ(fe.ack(Request::SetStatus, uint64_t{0xf}), 1u);
    expect_one_refusal(b.st(), was, Why::Unsupported);
    was = Reasons(b.st());
    EXPECT_FALSE(fe.get(Request::GetStatus));  // a GET is never acked: refused, closed
    EXPECT_TRUE(fe.closed_by_peer());
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    expect_one_refusal(b.st(), was, Why::Unsupported);
}

TEST(VhostUserRules, NetSetMtuNeedsNetMtuNegotiated) {
    Bed b("rule_mtu");
    FrontEnd fe(b.cfg.path);
    ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, bit(kProtoReplyAck), {}, false));
    const Reasons was(b.st());
    EXPECT_EQ(fe.ack(Request::NetSetMtu, uint64_t{1500}), 1u);
    expect_one_refusal(b.st(), was, Why::Unsupported);
    EXPECT_EQ(b.server->mtu(), 0);
    ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, bit(kProtoReplyAck) | bit(kProtoNetMtu), {},
                       false));
    EXPECT_EQ(fe.ack(Request::NetSetMtu, uint64_t{1500}), 0u);
    EXPECT_EQ(b.server->mtu(), 1500);
}

TEST(VhostUserRules, NetMtuIsOfferedOnlyWithAMaxMtuAndSetWithinIt) {
    {
        Bed b("rule_nomtu", 200, 0);
        FrontEnd fe(b.cfg.path);
        const auto offered = fe.get(Request::GetProtocolFeatures);
        ASSERT_TRUE(offered);
        EXPECT_EQ(*offered & bit(kProtoNetMtu), 0u);
        ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, bit(kProtoReplyAck), {}, false));
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::SetProtocolFeatures, bit(kProtoReplyAck) | bit(kProtoNetMtu)),
                  1u);
        expect_one_refusal(b.st(), was, Why::Unsupported);
        EXPECT_EQ(fe.ack(Request::NetSetMtu, uint64_t{1500}), 1u);  // still not negotiated
        EXPECT_EQ(b.server->mtu(), 0);
    }
    Bed b("rule_mtu_range");
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    for (const uint64_t v : {uint64_t{0}, uint64_t{67}, uint64_t{9001}, uint64_t{0x10000 + 1500}}) {
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::NetSetMtu, v), 1u) << v;
        expect_one_refusal(b.st(), was, Why::Payload);
        EXPECT_EQ(b.server->mtu(), 0);
    }
    EXPECT_EQ(fe.ack(Request::NetSetMtu, uint64_t{68}), 0u);
    EXPECT_EQ(b.server->mtu(), 68);
    EXPECT_EQ(fe.ack(Request::NetSetMtu, uint64_t{9000}), 0u);
    EXPECT_EQ(b.server->mtu(), 9000);
}

TEST(VhostUserRules, VringNumZeroAndARunningRingsNumOrBaseAreRefused) {
    Bed b("rule_num");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    Reasons was(b.st());
    EXPECT_EQ(fe.ack(Request::SetVringNum, vs(0, 0)), 1u);
    expect_one_refusal(b.st(), was, Why::Payload);
    ASSERT_TRUE(fe.msg(Request::GetVringBase, vs(0, 0), {}, false));  // still a fresh ring
    ASSERT_TRUE(fe.reply(Request::GetVringBase));
    fe.close();
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    FrontEnd fe2(b.cfg.path);
    full_setup(fe2, g);
    packets_flow(b, g, 1);
    was = Reasons(b.st());
    EXPECT_EQ(fe2.ack(Request::SetVringBase, vs(1, 100)), 1u);
    expect_one_refusal(b.st(), was, Why::State);
    was = Reasons(b.st());
    EXPECT_EQ(fe2.ack(Request::SetVringNum, vs(1, kRingSize / 2)), 1u);
    expect_one_refusal(b.st(), was, Why::State);
    // Where the tx ring stands is the device's, not the refused base.
    ASSERT_TRUE(fe2.msg(Request::GetVringBase, vs(1, 0), {}, false));
    const auto base = fe2.reply(Request::GetVringBase);
    ASSERT_TRUE(base);
    EXPECT_EQ(*base >> 32, 1u);
}

TEST(VhostUserRules, VringAddrIndexAndARunningRingsAddressesAreRefused) {
    Bed b("rule_addr");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    for (const uint32_t i : {2u, 255u, 0x10000u}) {  // checked before the memory table
        VringAddr a = g.vring_addr(0);
        a.index = i;
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::SetVringAddr, a), 1u) << i;
        expect_one_refusal(b.st(), was, Why::Payload);
    }
    fe.close();
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    FrontEnd fe2(b.cfg.path);
    full_setup(fe2, g);
    VringAddr a = g.vring_addr(1);
    a.used_user_addr += 4096;  // valid, but the ring runs
    const Reasons was(b.st());
    EXPECT_EQ(fe2.ack(Request::SetVringAddr, a), 1u);
    expect_one_refusal(b.st(), was, Why::State);
    packets_flow(b, g, 1);  // still on its old addresses
}

TEST(VhostUserRules, FeaturesNeverOfferedAreUnsupported) {
    Bed b("rule_unoffered");
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    const uint64_t offered = session_features(*b.dev);
    for (const uint64_t extra : {bit(63), virtio::feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ)}) {
        ASSERT_EQ(offered & extra, 0u);
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::SetFeatures, kFeatures | extra), 1u) << extra;
        expect_one_refusal(b.st(), was, Why::Unsupported);
    }
    EXPECT_EQ(fe.ack(Request::SetFeatures, kFeatures), 0u);  // the session goes on
}

TEST(VhostUserRules, MemTableWithFewerFdsThanRegionsIsAnFdRefusal) {
    Bed b("rule_memfds");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    const uint64_t sz = g.region.size();
    struct {
        uint32_t n = 2, pad = 0;
        MemRegion r[2];
    } two;
    two.r[0] = {kGpa, sz / 2, kUva, 0};
    two.r[1] = {kGpa + sz / 2, sz / 2, kUva + sz / 2, sz / 2};
    const int mfd = g.region.fd();
    const int base_fds = count_fds();
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
        const int fds[] = {mfd, mfd, mfd};
        const Reasons was(b.st());
        EXPECT_EQ(fe.ack(Request::SetMemTable, two, std::span(fds, n)), 1u) << n;
        expect_one_refusal(b.st(), was, Why::Fds);
    }
    EXPECT_EQ(b.st().mem_tables.get(), 0u);
    EXPECT_EQ(count_fds(), base_fds);
    const int fds[] = {mfd, mfd};
    EXPECT_EQ(fe.ack(Request::SetMemTable, two, fds), 0u);
    EXPECT_EQ(b.st().mem_tables.get(), 1u);
}

// More fds than a request can carry overflow the server's control buffer
// (MSG_CTRUNC): the kernel closed the rest, so the message is not trusted even
// with NEED_REPLY; the connection closes, the fds that came are closed.
TEST(VhostUserRules, FdsTruncatedInTransitCloseTheConnection) {
    Bed b("rule_ctrunc");
    const int base_fds = count_fds();
    {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        std::vector<notify::EventFd> efds;
        std::vector<int> fds;
        for (std::size_t k = 0; k < kMaxFds + 4; ++k) {
            efds.push_back(std::move(notify::EventFd::create().value()));
            fds.push_back(efds.back().fd());
        }
        ASSERT_TRUE(fe.msg(Request::SetVringCall, uint64_t{0}, fds));
        EXPECT_TRUE(fe.closed_by_peer());
    }
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    EXPECT_EQ(b.st().bad_fds.get(), 1u);
    EXPECT_EQ(b.st().rejected.get(), 0u);  // refused as it was read, before the session
    EXPECT_EQ(b.st().replies.get(), 3u);  // negotiate()'s GETs only: no REPLY_ACK
    EXPECT_EQ(count_fds(), base_fds);
}

TEST(VhostUserRules, OtherFeaturesWhileRingsRunAreABadState) {
    Bed b("rule_features");
    FrontEnd fe(b.cfg.path);
    Guest g;
    full_setup(fe, g);
    const uint64_t other = kFeatures | virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX);
    ASSERT_NE(session_features(*b.dev) & other, 0u);  // offered: only the state refuses it
    const Reasons was(b.st());
    EXPECT_EQ(fe.ack(Request::SetFeatures, other), 1u);
    expect_one_refusal(b.st(), was, Why::State);
    packets_flow(b, g, 1);
}

// The ring's guest addresses are checked themselves, not only the host pointers
// they land on: a region mapped from file offset 8 puts a descriptor table at a
// guest address 8 mod 16 on a 16-aligned host address.
TEST(VhostUserRules, MisalignedDescriptorTableGuestAddressOnAnAlignedHostPointer) {
    Bed b("rule_align");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    const int mfd = g.region.fd();
    OneRegion t;
    t.r = MemRegion{kGpa, g.region.size() - 4096, kUva, 8};
    ASSERT_EQ(fe.ack(Request::SetMemTable, t, std::span(&mfd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringNum, vs(0, kRingSize)), 0u);
    VringAddr a;
    a.index = 0;
    a.desc_user_addr = kUva + 8;  // gpa kGpa + 8; host: the mapping's start + 16
    a.avail_user_addr = kUva + 0x1008;
    a.used_user_addr = kUva + 0x2008;
    ASSERT_EQ(fe.ack(Request::SetVringAddr, a), 0u);
    const int k = g.kick[0].fd();
    ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{0}, std::span(&k, 1)), 0u);
    const Reasons was(b.st());
    EXPECT_EQ(fe.ack(Request::SetVringEnable, vs(0, 1)), 1u);
    expect_one_refusal(b.st(), was, Why::Payload);
    EXPECT_FALSE(b.dev->vring_started(0));
    EXPECT_EQ(b.dev->vring_error(0), ring::RingError::RingMisaligned);
}

// vhost-user.rst "Ring states": a started but disabled ring is processed
// without side effects: tx consumes and discards (used with 0, counted, never
// at the port); rx supplies nothing. Enabled again, both move frames.
TEST(VhostUserServer, DisabledTxRingDiscardsItsFramesDisabledRxSuppliesNothing) {
    Bed b("disabled");
    FrontEnd fe(b.cfg.path);
    Guest g;
    full_setup(fe, g);
    packets_flow(b, g, 1);
    const uint64_t stopped = b.st().rings_stopped.get();
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(1, 0)), 0u);
    EXPECT_TRUE(b.dev->vring_started(1));
    EXPECT_EQ(b.st().rings_stopped.get(), stopped);
    std::vector<std::byte> frame(60, std::byte{0x5a});
    for (uint64_t t = 2; t < 5; ++t) {
        g.transmit(t, frame);
        ring::UsedBuf u;
        ASSERT_TRUE(wait_until([&] { return g.q[1]->get_used(u); }));
        EXPECT_EQ(u.token, t);
        EXPECT_EQ(u.len, 0u);
    }
    EXPECT_EQ(b.dev->stats().tx_discarded.get(), 3u);
    EXPECT_EQ(b.dev->stats().tx_pkts.get(), 1u);  // packets_flow's frame only
    EXPECT_FALSE(b.far->rx_pending());
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(1, 1)), 0u);
    // rx disabled: stopped, the far end's frame waits.
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(0, 0)), 0u);
    EXPECT_FALSE(b.dev->vring_started(0));
    g.post_rx(9);
    const uint32_t len = kHdr + 60;
    std::vector<std::byte> buf(len);
    const iovec v{buf.data(), len};
    ASSERT_EQ(b.far->send(std::span(&v, 1), len), port::SendResult::Sent);
    ring::UsedBuf u;
    EXPECT_FALSE(g.q[0]->get_used(u));
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(0, 1)), 0u);
    ASSERT_TRUE(wait_until([&] { return g.q[0]->get_used(u); }));
    EXPECT_EQ(u.token, 9u);
    EXPECT_EQ(u.len, len);
    packets_flow(b, g, 10);
    EXPECT_EQ(b.dev->stats().tx_discarded.get(), 3u);
}

// A tx ring not yet enabled waits with its frames (none discarded in the window
// between SET_VRING_KICK and SET_VRING_ENABLE 1 that a restart replays under
// traffic); enabled, it sends them.
TEST(VhostUserServer, TxRingBeforeItsFirstEnableKeepsItsFrames) {
    Bed b("notyet");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(fe.ack(Request::SetVringNum, vs(i, kRingSize)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(i)), 0u);
        const int k = g.kick[i].fd(), c = g.call[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{i}, std::span(&c, 1)), 0u);
    }
    EXPECT_FALSE(b.dev->vring_started(1));
    std::vector<std::byte> frame(60);
    const uint64_t seq = 42;
    std::memcpy(frame.data(), &seq, sizeof seq);
    g.transmit(1, frame);
    ring::UsedBuf u;
    EXPECT_FALSE(g.q[1]->get_used(u));
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(1, 1)), 0u);
    ASSERT_TRUE(wait_until([&] { return b.far->rx_pending(); }));
    std::vector<std::byte> got(4096);
    const iovec v{got.data(), got.size()};
    ASSERT_EQ(b.far->recv(std::span(&v, 1)), kHdr + frame.size());
    uint64_t back = 0;
    std::memcpy(&back, got.data() + kHdr, sizeof back);
    EXPECT_EQ(back, seq);
    EXPECT_EQ(b.dev->stats().tx_discarded.get(), 0u);
}

TEST(VhostUserServer, UnsupportedWithoutNeedReplyCloses) {
    Bed b("unsupp");
    {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        ASSERT_TRUE(fe.msg(Request::SetLogBase, uint64_t{0}, {}, false));
        EXPECT_TRUE(fe.closed_by_peer());
    }
    EXPECT_EQ(b.st().unsupported.get(), 1u);
    fresh_setup_works(b);
}

TEST(VhostUserServer, MemTableReplacedWhileRunningRestartsRings) {
    Bed b("remap");
    Guest g;
    const int maps_before = count_maps("vu_guest");
    {
        FrontEnd fe(b.cfg.path);
        full_setup(fe, g);
        packets_flow(b, g, 0);
        // The front-end remapped guest memory at another address: same fd, same gpa.
        const uint64_t moved = kUva + (1ull << 32);
        const int mfd = g.region.fd();
        ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(moved), std::span(&mfd, 1)), 0u);
        EXPECT_EQ(b.st().mem_tables.get(), 2u);
        EXPECT_EQ(b.st().rings_stopped.get(), 2u);
        EXPECT_EQ(b.st().rings_started.get(), 4u);
        EXPECT_TRUE(b.dev->vring_started(0));
        EXPECT_TRUE(b.dev->vring_started(1));
        packets_flow(b, g, 1);
        packets_flow(b, g, 2);
        // Addresses now translate through the new user addresses only.
        ASSERT_TRUE(fe.msg(Request::GetVringBase, vs(1, 0), {}, false));
        ASSERT_TRUE(fe.reply(Request::GetVringBase));
        EXPECT_NE(fe.ack(Request::SetVringAddr, g.vring_addr(1)).value_or(0), 0u);
    }
    // Both tables unmapped once the front-end is gone.
    ASSERT_TRUE(wait_until([&] { return b.st().disconnects.get() == 1; }));
    EXPECT_EQ(count_maps("vu_guest"), maps_before);
}

TEST(VhostUserServer, HalfAMessageThenStallIsClosed) {
    Bed b("stall", 100);
    {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        const MsgHeader h{static_cast<uint32_t>(Request::SetFeatures), kVersion, 8};
        ASSERT_TRUE(fe.send_raw(&h, 6));
        EXPECT_TRUE(fe.closed_by_peer());
        EXPECT_EQ(b.st().stalled.get(), 1u);
    }
    {
        FrontEnd fe(b.cfg.path);  // the header whole, the payload half
        negotiate(fe);
        const MsgHeader h{static_cast<uint32_t>(Request::SetFeatures), kVersion, 8};
        const char part[sizeof h + 4] = {};
        std::memcpy(const_cast<char*>(part), &h, sizeof h);
        ASSERT_TRUE(fe.send_raw(part, sizeof part));
        EXPECT_TRUE(fe.closed_by_peer());
        EXPECT_EQ(b.st().stalled.get(), 2u);
    }
    fresh_setup_works(b);
}

TEST(VhostUserServer, FloodOfSetVringCallKeepsTheFdCount) {
    Bed b("flood");
    FrontEnd fe(b.cfg.path);
    Guest g;
    full_setup(fe, g);
    const int before = count_fds();
    for (int i = 0; i < 10000; ++i) {
        auto e = notify::EventFd::create();
        ASSERT_TRUE(e);
        const int fd = e->fd();
        ASSERT_TRUE(fe.msg(Request::SetVringCall, uint64_t{static_cast<uint64_t>(i & 1)},
                            std::span(&fd, 1), false));
    }
    ASSERT_TRUE(fe.get(Request::GetFeatures));  // every call handled
    EXPECT_EQ(count_fds(), before);
    EXPECT_GE(b.st().messages.get(), 10000u);
    // The last call fds given are the ones used: the device still signals (rx ring)... and runs.
    const int c0 = g.call[0].fd(), c1 = g.call[1].fd();
    ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{0}, std::span(&c0, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{1}, std::span(&c1, 1)), 0u);
    packets_flow(b, g, 9);
}

TEST(VhostUserServer, ARingTheDeviceRefusesIsARejection) {
    Bed b("badring");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringNum, vs(0, kRingSize)), 0u);
    // Inside the region, but the descriptor table runs past its end.
    VringAddr a = g.vring_addr(0);
    a.desc_user_addr = kUva + g.region.size() - 16;
    ASSERT_EQ(fe.ack(Request::SetVringAddr, a), 0u);
    const int k = g.kick[0].fd();
    ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{0}, std::span(&k, 1)), 0u);
    const uint64_t payload = b.st().bad_payload.get();
    EXPECT_NE(fe.ack(Request::SetVringEnable, vs(0, 1)).value_or(0), 0u);
    EXPECT_EQ(b.st().bad_payload.get(), payload + 1);
    EXPECT_EQ(b.st().rings_started.get(), 0u);
    EXPECT_FALSE(b.dev->vring_started(0));
    // Fixed addresses: it starts.
    ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(0, 0)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(0)), 0u);
    EXPECT_EQ(fe.ack(Request::SetVringEnable, vs(0, 1)), 0u);
    EXPECT_TRUE(b.dev->vring_started(0));
}

TEST(VhostUserServer, StopEndsTheSessionResetsTheDeviceAndRemovesTheSocket) {
    Bed b("stop");
    FrontEnd fe(b.cfg.path);
    Guest g;
    full_setup(fe, g);
    packets_flow(b, g, 0);
    b.server->stop();
    EXPECT_TRUE(fe.closed_by_peer());
    EXPECT_FALSE(b.dev->vring_started(0));
    EXPECT_FALSE(b.dev->vring_started(1));
    EXPECT_EQ(b.dev->features(), 0u);
    EXPECT_EQ(b.st().rings_stopped.get(), 2u);
    EXPECT_EQ(b.st().disconnects.get(), 1u);
    struct stat st{};
    EXPECT_NE(::lstat(b.cfg.path.c_str(), &st), 0);
}

TEST(VhostUserServer, SecondFrontEndIsRejectedWhileOneIsServed) {
    Bed b("busy");
    FrontEnd first(b.cfg.path);
    negotiate(first);
    {
        FrontEnd second(b.cfg.path);
        EXPECT_TRUE(second.closed_by_peer());
    }
    EXPECT_EQ(b.st().busy_rejected.get(), 1u);
    EXPECT_TRUE(first.get(Request::GetFeatures));
    EXPECT_EQ(b.st().connections.get(), 1u);
}

namespace {

/// True once a thread of `pid` sleeps in poll()/ppoll() on `nfds` fds (its
/// /proc/PID/task/TID/syscall line: the number, then the arguments).
bool in_poll(pid_t pid, unsigned nfds) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return false;
    bool found = false;
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        FILE* f = std::fopen((dir + "/" + e->d_name + "/syscall").c_str(), "r");
        if (f == nullptr) continue;
        long nr = -1;
        unsigned long a0 = 0, a1 = 0;
        if (std::fscanf(f, "%ld %lx %lx", &nr, &a0, &a1) == 3 && a1 == nfds &&
            (nr == SYS_ppoll
#ifdef SYS_poll
             || nr == SYS_poll
#endif
             )) {
            found = true;
        }
        std::fclose(f);
    }
    ::closedir(d);
    return found;
}

/// Every thread of `pid` stopped (state T in /proc/PID/task/TID/stat).
bool all_stopped(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return false;
    bool all = true;
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        FILE* f = std::fopen((dir + "/" + e->d_name + "/stat").c_str(), "r");
        char line[512] = {};
        if (f != nullptr) {
            if (std::fgets(line, sizeof line, f) == nullptr) line[0] = 0;
            std::fclose(f);
        }
        const char* paren = std::strrchr(line, ')');
        all = all && paren != nullptr && paren[1] == ' ' && paren[2] == 'T';
    }
    ::closedir(d);
    return all;
}

bool read_bounded(int fd, void* p, std::size_t n) {
    pollfd pf{fd, POLLIN, 0};
    return ::poll(&pf, 1, 10000) == 1 && ::read(fd, p, n) == static_cast<ssize_t>(n);
}

}  // namespace

// A front-end that closes and connects again at once (QEMU restarting without
// reconnect=) is served, not taken for a second front-end: the server, in a
// child process, is frozen in its idle poll while the close and the connect
// happen, so it wakes to both at once, the hang-up and the knock.
TEST(VhostUserServer, ReconnectRightAfterACloseIsServedNotRejected) {
    int ready[2], go[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        uint64_t counts[2] = {};
        {
            Bed b("reconnect");
            char c = 'r';
            if (::write(ready[1], &c, 1) != 1) ::_exit(2);
            (void)read_bounded(go[0], &c, 1);
            counts[0] = b.st().busy_rejected.get();
            counts[1] = b.st().connections.get();
        }
        ::_exit(::write(ready[1], counts, sizeof counts) == sizeof counts ? 0 : 3);
    }
    ::close(ready[1]);
    ::close(go[0]);
    const std::string path = socket_path("reconnect", pid);
    char c = 0;
    bool stopped = false;
    uint64_t counts[2] = {~uint64_t{0}, 0};
    [&] {
        ASSERT_TRUE(read_bounded(ready[0], &c, 1));
        FrontEnd first(path);
        ASSERT_TRUE(first.connected());
        ASSERT_TRUE(first.get(Request::GetFeatures));
        // Idle between messages: the poll on the connection, stop fd and listener.
        ASSERT_TRUE(wait_until([&] { return in_poll(pid, 3); }));
        ASSERT_EQ(::kill(pid, SIGSTOP), 0);
        stopped = true;
        ASSERT_TRUE(wait_until([&] { return all_stopped(pid); }));
        first.close();
        FrontEnd second(path);
        ASSERT_TRUE(second.connected());  // into the backlog
        ASSERT_EQ(::kill(pid, SIGCONT), 0);
        stopped = false;
        EXPECT_TRUE(second.get(Request::GetFeatures));
    }();
    if (stopped) ::kill(pid, SIGCONT);
    c = 'g';
    EXPECT_EQ(::write(go[1], &c, 1), 1);
    EXPECT_TRUE(read_bounded(ready[0], counts, sizeof counts));
    EXPECT_EQ(counts[0], 0u);  // busy_rejected
    EXPECT_EQ(counts[1], 2u);  // connections
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ::close(ready[0]);
    ::close(go[1]);
    ::unlink(path.c_str());
}

TEST(VhostUserServer, ClientModeConnectsOnceTheFrontEndListens) {
    auto pp = port::PeerPort::create_pair({}, {});
    port::PeerPort* ports[] = {pp->first.get()};
    auto dev = std::move(backend::VhostNet<port::PeerPort>::create(
                             backend::VhostNetOptions{}, std::span<port::PeerPort* const>(ports))
                             .value());
    ServerConfig cfg;
    cfg.path = socket_path("client");
    cfg.client = true;
    cfg.retry_ms = 10;
    ::unlink(cfg.path.c_str());
    auto s = Server::create(cfg, *dev);
    ASSERT_TRUE(s);
    (*s)->start();
    std::this_thread::sleep_for(30ms);  // a few refused attempts first
    const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, cfg.path.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(l, 1), 0);
    const int c = ::accept(l, nullptr, nullptr);
    ASSERT_GE(c, 0);
    const MsgHeader h{static_cast<uint32_t>(Request::GetQueueNum), kVersion, 0};
    ASSERT_EQ(::send(c, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
    MsgHeader rh;
    uint64_t v = 0;
    ASSERT_EQ(::recv(c, &rh, sizeof rh, MSG_WAITALL), static_cast<ssize_t>(sizeof rh));
    ASSERT_EQ(::recv(c, &v, sizeof v, MSG_WAITALL), static_cast<ssize_t>(sizeof v));
    EXPECT_EQ(v, 1u);
    EXPECT_TRUE((*s)->connected());
    (*s)->stop();  // wakes the session promptly
    EXPECT_EQ((*s)->stats().disconnects.get(), 1u);
    ::close(c);
    ::close(l);
    ::unlink(cfg.path.c_str());
}

TEST(VhostUserServer, PathsStaleSocketAndNonSocket) {
    auto pp = port::PeerPort::create_pair({}, {});
    port::PeerPort* ports[] = {pp->first.get()};
    auto dev = std::move(backend::VhostNet<port::PeerPort>::create(
                             backend::VhostNetOptions{}, std::span<port::PeerPort* const>(ports))
                             .value());
    ServerConfig cfg;
    cfg.path = socket_path("paths");
    {
        auto s = Server::create(cfg, *dev);
        ASSERT_TRUE(s);
        // A live server's socket is not taken over.
        auto s2 = Server::create(cfg, *dev);
        EXPECT_FALSE(s2);
    }
    struct stat st{};
    EXPECT_NE(::lstat(cfg.path.c_str(), &st), 0);  // removed by the server
    // A stale socket file (nobody listening) is replaced.
    {
        const int l = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, cfg.path.c_str(), sizeof a.sun_path - 1);
        ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        ::close(l);
        auto s = Server::create(cfg, *dev);
        EXPECT_TRUE(s);
    }
    // A regular file is refused, with its name, and left alone.
    const std::string file = socket_path("regular");
    const int f = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(f, 0);
    ::close(f);
    cfg.path = file;
    auto s = Server::create(cfg, *dev);
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().find(file), std::string::npos);
    EXPECT_EQ(::lstat(file.c_str(), &st), 0);
    ::unlink(file.c_str());
}

// The stale-socket probe never waits: a live listener that accepts nothing,
// its backlog full, is "in use" at once (a blocking connect() hung create()).
TEST(VhostUserServer, StaleSocketProbeDoesNotWaitOnAFullBacklog) {
    const std::string path = socket_path("fullbacklog");
    ::unlink(path.c_str());
    const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(l, 0), 0);
    std::vector<int> queued;
    for (int i = 0; i < 64; ++i) {
        const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        const bool ok = ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        if (!ok) {
            ::close(c);
            break;
        }
        queued.push_back(c);
    }
    ASSERT_FALSE(queued.empty());
    std::atomic<bool> done{false};
    Result<int, std::string> got = unexpected(std::string("not run"));
    std::thread t([&] {
        got = listen_unix(path, true, 4);
        done = true;
    });
    const bool returned = wait_until([&] { return done.load(); });
    ::close(l);  // wakes a connect() blocked on the backlog: the thread ends either way
    t.join();
    for (const int c : queued) ::close(c);
    EXPECT_TRUE(returned);
    ASSERT_FALSE(got);
    EXPECT_NE(got.error().find("in use"), std::string::npos) << got.error();
    struct stat st{};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0);  // a live socket is never removed
    ::unlink(path.c_str());
}

}  // namespace
}  // namespace pvnet::vhost_user
