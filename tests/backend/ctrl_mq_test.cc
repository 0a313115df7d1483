// VIRTIO_NET_CTRL_MQ on the device (VIRTIO 1.2 multiqueue steering and
// RSS): a NetDevice whose control ring the test drives by hand (VQ_PAIRS_SET in
// and out of range, hostile RSS_CONFIGs: ERR acks, counters by reason, the
// steering left as it was), the feature rules (RSS needs CTRL_VQ, MQ/RSS a
// device of more than one pair, the pairs in use by default and after
// reset), hostile HASH_CONFIGs (VIRTIO_NET_F_HASH_REPORT without RSS), and
// end to end, VirtioNet's set_rss / set_queue_pairs against a worker:
// frames steered per Toeplitz, rx of a pair out of use not served.
// Every wait is bounded.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/net/rss.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/pair/shared_memory_pair.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"
#include "steer_frames.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using harness::FakePort;
using harness::wait_until;
using test::udp4_frame;
using Dev = VhostNet<FakePort>;
namespace v = virtio;

constexpr uint64_t kMqFeatures = v::feature_mask(v::VIRTIO_F_VERSION_1) |
                                 v::feature_mask(v::VIRTIO_NET_F_CTRL_VQ) |
                                 v::feature_mask(v::VIRTIO_NET_F_MQ) |
                                 v::feature_mask(v::VIRTIO_NET_F_RSS);

/// A valid RSS config over `pairs` queues (table round-robin), all hash types.
net::RssConfig rss_cfg(uint16_t pairs, uint16_t max_tx_vq) {
    net::RssConfig c;
    c.hash_types = net::kRssSupportedHashTypes;
    c.table_len = 16;
    for (uint16_t i = 0; i < c.table_len; ++i) c.table[i] = static_cast<uint16_t>(i % pairs);
    c.key_len = 40;
    for (uint8_t i = 0; i < 40; ++i) c.key[i] = static_cast<uint8_t>(0x6d ^ (i * 37));
    c.max_tx_vq = max_tx_vq;
    return c;
}

/// A device of kPairs pairs on its own FakePorts, the rings in one guest
/// memory; the test plays the driver of the control ring.
class MqBench {
public:
    static constexpr uint16_t kPairs = 4;
    static constexpr uint16_t kSize = 64;
    static constexpr uint64_t kRingArea = 0x4000;
    static constexpr uint64_t kVrings = 2 * kPairs + 1;
    static constexpr uint64_t kCmdGpa = pair::kGuestBase + kVrings * kRingArea;
    static constexpr uint64_t kCmdSlot = 1024;  ///< hdr + data, then the ack at kAckOff
    static constexpr uint64_t kAckOff = 1000;
    static constexpr uint64_t kSlots = 16;

    explicit MqBench(uint64_t features = kMqFeatures) {
        if (auto err = mem_.setup_memory(kCmdGpa - pair::kGuestBase + kSlots * kCmdSlot, kVrings,
                                         "ctrl_mq_test")) {
            throw std::runtime_error(*err);
        }
        const bool ctrl = v::has_feature(features, v::VIRTIO_NET_F_CTRL_VQ);
        std::vector<ring::SplitRingAddrs> rings;
        for (uint64_t i = 0; i < (ctrl ? kVrings : kVrings - 1); ++i) {
            rings.push_back(
                ring::split_ring_addrs_at(mem::GuestAddr(pair::kGuestBase + i * kRingArea), kSize));
        }
        if (ctrl) {
            ring::DriverQueueConfig dq;
            dq.addrs = rings.back();
            auto d = ring::SplitDriverQueue::create(mem_.guest_table(), dq);
            if (!d) throw std::runtime_error("driver queue");
            drv_ = std::move(*d);
        }
        std::vector<FakePort*> ports;
        for (auto& p : ports_) ports.push_back(&p);
        auto dev = Dev::create(VhostNetOptions{}, std::span<FakePort* const>(ports));
        if (!dev) throw std::runtime_error("VhostNet::create");
        dev_ = std::move(*dev);
        setup_ = mem_.device_setup(features, rings);
        if (!dev_->configure(setup_)) throw std::runtime_error("configure");
    }

    /// Posts `cmd` (hdr, data) and an ack byte, serves the control queue;
    /// returns the ack.
    uint8_t send(const std::vector<std::byte>& cmd) {
        const uint64_t gpa = kCmdGpa + (next_++ % kSlots) * kCmdSlot;
        if (cmd.size() < 2 || cmd.size() > kAckOff) throw std::logic_error("command size");
        std::memcpy(mem_.guest_host(mem::GuestAddr(gpa)), cmd.data(), cmd.size());
        std::byte* ack = mem_.guest_host(mem::GuestAddr(gpa + kAckOff));
        *ack = std::byte{0xff};
        std::vector<ring::Buf> out{{mem::GuestAddr(gpa), 2}};
        if (cmd.size() > 2) {
            out.push_back({mem::GuestAddr(gpa + 2), static_cast<uint32_t>(cmd.size() - 2)});
        }
        const ring::Buf in{mem::GuestAddr(gpa + kAckOff), 1};
        if (drv_->add(out, std::span<const ring::Buf>(&in, 1), next_) != ring::AddStatus::Ok) {
            throw std::logic_error("add");
        }
        drv_->publish();
        dev_->handle_ctrl();
        ring::UsedBuf u;
        if (!drv_->get_used(u) || u.len != 1) throw std::runtime_error("no ack");
        return static_cast<uint8_t>(*ack);
    }

    Dev& dev() { return *dev_; }
    const CtrlQueueStats& cstats() const { return dev_->ctrl_queue()->stats(); }
    const DeviceSetup& setup() const { return setup_; }

private:
    pair::SharedMemoryPair mem_;
    FakePort ports_[kPairs];
    std::unique_ptr<ring::SplitDriverQueue> drv_;
    std::unique_ptr<Dev> dev_;
    DeviceSetup setup_;
    uint64_t next_ = 0;
};

std::vector<std::byte> as_cmd(uint8_t cmd, const std::vector<uint8_t>& data) {
    std::vector<std::byte> b{std::byte{v::VIRTIO_NET_CTRL_MQ}, std::byte{cmd}};
    for (const uint8_t x : data) b.push_back(std::byte{x});
    return b;
}
std::vector<std::byte> pairs_set(uint16_t n) {
    return as_cmd(v::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET,
                  {static_cast<uint8_t>(n & 0xffu), static_cast<uint8_t>(n >> 8)});
}
std::vector<std::byte> rss_config(const std::vector<uint8_t>& data) {
    return as_cmd(v::VIRTIO_NET_CTRL_MQ_RSS_CONFIG, data);
}

// ---- the pairs in use -------------------------------------------------------------------

TEST(CtrlMq, ADriverWithAControlQueueStartsOnOnePair) {
    MqBench b;
    EXPECT_EQ(b.dev().rx_steer().max_pairs(), MqBench::kPairs);
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), 1);
    EXPECT_FALSE(b.dev().rx_steer().rss_enabled());
}

TEST(CtrlMq, WithoutAControlQueueEveryPairIsInUse) {
    // vhost-user: QEMU emulates the control queue and enables the vrings.
    MqBench b(v::feature_mask(v::VIRTIO_F_VERSION_1));
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), MqBench::kPairs);
}

TEST(CtrlMq, VqPairsSetInRangeChangesThePairsInUse) {
    MqBench b;
    EXPECT_EQ(b.send(pairs_set(3)), v::VIRTIO_NET_OK);
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), 3);
    EXPECT_EQ(b.send(pairs_set(MqBench::kPairs)), v::VIRTIO_NET_OK);
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), MqBench::kPairs);
    EXPECT_EQ(b.cstats().mq_pairs_set.get(), 2u);
    EXPECT_EQ(b.cstats().cmds_ok.get(), 2u);
}

TEST(CtrlMq, VqPairsSetOutOfRangeIsErrAndChangesNothing) {
    MqBench b;
    ASSERT_EQ(b.send(pairs_set(2)), v::VIRTIO_NET_OK);
    EXPECT_EQ(b.send(pairs_set(0)), v::VIRTIO_NET_ERR);
    EXPECT_EQ(b.send(pairs_set(MqBench::kPairs + 1)), v::VIRTIO_NET_ERR);
    EXPECT_EQ(b.send(pairs_set(0xffff)), v::VIRTIO_NET_ERR);
    EXPECT_EQ(b.cstats().cmds_err.get(CtrlError::OutOfRange), 3u);
    EXPECT_EQ(b.cstats().mq_pairs_set.get(), 1u);
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), 2);
}

TEST(CtrlMq, CommandsOfAFeatureNotNegotiatedAreErr) {
    // RSS without MQ: RSS_CONFIG is served, VQ_PAIRS_SET is not.
    MqBench rss_only(kMqFeatures & ~v::feature_mask(v::VIRTIO_NET_F_MQ));
    EXPECT_EQ(rss_only.send(pairs_set(2)), v::VIRTIO_NET_ERR);
    EXPECT_EQ(rss_only.cstats().cmds_err.get(CtrlError::NotNegotiated), 1u);
    EXPECT_EQ(rss_only.dev().rx_steer().active_pairs(), 1);
    const std::vector<uint8_t> wire = net::serialize_rss_config(rss_cfg(4, 2));
    EXPECT_EQ(rss_only.send(rss_config(wire)), v::VIRTIO_NET_OK);
    // MQ without RSS: the other way round.
    MqBench mq_only(kMqFeatures & ~v::feature_mask(v::VIRTIO_NET_F_RSS));
    EXPECT_EQ(mq_only.send(rss_config(wire)), v::VIRTIO_NET_ERR);
    EXPECT_EQ(mq_only.cstats().cmds_err.get(CtrlError::NotNegotiated), 1u);
    EXPECT_FALSE(mq_only.dev().rx_steer().rss_enabled());
    EXPECT_EQ(mq_only.send(pairs_set(2)), v::VIRTIO_NET_OK);
}

// ---- RSS_CONFIG from a hostile guest -------------------------------------------------------

/// A config's command data and what a hostile guest makes of it.
struct Hostile {
    std::vector<uint8_t> wire;
    /// One byte changed.
    std::vector<uint8_t> with(std::size_t at, uint8_t x) const {
        std::vector<uint8_t> d = wire;
        d.at(at) = x;
        return d;
    }
    /// hash_key_length (at `key_len_at`) one past the maximum, the key too.
    std::vector<uint8_t> long_key(std::size_t key_len_at) const {
        std::vector<uint8_t> d = with(key_len_at, 41);
        d.push_back(0);
        return d;
    }
    std::vector<uint8_t> trailing() const {
        std::vector<uint8_t> d = wire;
        d.push_back(0);
        return d;
    }
};
struct BadCase {
    std::vector<uint8_t> data;
    net::RssError why;
};

TEST(CtrlMq, HostileRssConfigsAreErrCountedByReasonAndLeaveSteeringAsItWas) {
    MqBench b;
    const net::RssConfig good = rss_cfg(4, 3);
    const std::vector<uint8_t> wire = net::serialize_rss_config(good);
    ASSERT_EQ(b.send(rss_config(wire)), v::VIRTIO_NET_OK);
    const RxSteer& s = b.dev().rx_steer();
    ASSERT_TRUE(s.rss_enabled());
    EXPECT_EQ(s.active_pairs(), 3) << "max_tx_vq";
    EXPECT_EQ(b.cstats().rss_configs.get(), 1u);
    auto steering = [&] {
        std::vector<uint16_t> q;
        for (uint16_t port = 2000; port < 2032; ++port) {
            q.push_back(s.steer(udp4_frame(port, 7)).queue);
        }
        return q;
    };
    const std::vector<uint16_t> before = steering();

    const Hostile h{wire};
    const std::size_t key_len_at = 8 + 2 * std::size_t{good.table_len} + 2;
    const BadCase bad[] = {
        {h.with(4, 2), net::RssError::TableLengthNotPowerOfTwo},  // mask 2: 3 entries
        {h.with(8, 4), net::RssError::TableQueueOutOfRange},      // table[0] = 4 of 4 pairs
        {h.long_key(key_len_at), net::RssError::KeyTooLong},
        {h.trailing(), net::RssError::TrailingBytes},
    };
    for (const auto& c : bad) {
        SCOPED_TRACE(net::to_string(c.why));
        EXPECT_EQ(b.send(rss_config(c.data)), v::VIRTIO_NET_ERR);
        EXPECT_EQ(b.cstats().rss_rejected.get(c.why), 1u);
    }
    EXPECT_EQ(b.cstats().cmds_err.get(CtrlError::BadRss), 4u);
    EXPECT_EQ(b.cstats().rss_rejected.total(), 4u);
    EXPECT_EQ(b.cstats().rss_configs.get(), 1u);
    // Unchanged, unlike QEMU, which turns RSS off for a refused config.
    EXPECT_TRUE(s.rss_enabled());
    EXPECT_EQ(s.active_pairs(), 3);
    EXPECT_EQ(steering(), before);
}

// ---- HASH_CONFIG from a hostile guest -----------------------------------------------------

std::vector<uint8_t> hash_wire(const net::HashConfig& c) {
    std::array<uint8_t, net::kHashConfigMaxBytes> buf{};
    const std::size_t n = net::serialize_hash_config(c, buf);
    return {buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n)};
}

TEST(CtrlMq, HostileHashConfigsAreErrCountedByReasonAndLeaveHashingAsItWas) {
    // HASH_REPORT without RSS: HASH_CONFIG is the command that sets the hash.
    MqBench b((kMqFeatures & ~v::feature_mask(v::VIRTIO_NET_F_RSS)) |
              v::feature_mask(v::VIRTIO_NET_F_HASH_REPORT));
    net::HashConfig good;
    good.hash_types = v::VIRTIO_NET_RSS_HASH_TYPE_UDPv4 | v::VIRTIO_NET_RSS_HASH_TYPE_IPv4;
    good.key_len = 40;
    for (uint8_t i = 0; i < 40; ++i) good.key[i] = static_cast<uint8_t>(i * 11 + 3);
    const std::vector<uint8_t> wire = hash_wire(good);
    const RxSteer& s = b.dev().rx_steer();
    EXPECT_FALSE(s.hashing_enabled());
    ASSERT_EQ(b.send(as_cmd(v::VIRTIO_NET_CTRL_MQ_HASH_CONFIG, wire)), v::VIRTIO_NET_OK);
    ASSERT_TRUE(s.hashing_enabled());
    EXPECT_FALSE(s.rss_enabled());
    EXPECT_EQ(s.active_pairs(), 1) << "no steering";
    EXPECT_EQ(b.cstats().hash_configs.get(), 1u);
    auto hashes = [&] {
        std::vector<uint32_t> h;
        for (uint16_t port = 2000; port < 2016; ++port) h.push_back(s.steer(udp4_frame(port, 7)).hash);
        return h;
    };
    const std::vector<uint32_t> before = hashes();
    EXPECT_NE(before[0], before[1]) << "ports hashed (UDPv4)";

    const Hostile h{wire};
    const BadCase bad[] = {
        {h.with(0, 0x43), net::RssError::UnsupportedHashType},  // + IP_EX
        {h.long_key(v::kHashConfigFixedBytes - 1), net::RssError::KeyTooLong},
        {{wire.begin(), wire.begin() + 20}, net::RssError::DataTooShort},
        {{wire.begin(), wire.begin() + 5}, net::RssError::DataTooShort},
        {h.trailing(), net::RssError::TrailingBytes},
    };
    for (const auto& c : bad) {
        SCOPED_TRACE(net::to_string(c.why));
        EXPECT_EQ(b.send(as_cmd(v::VIRTIO_NET_CTRL_MQ_HASH_CONFIG, c.data)), v::VIRTIO_NET_ERR);
    }
    EXPECT_EQ(b.cstats().hash_config_rejected.get(net::RssError::UnsupportedHashType), 1u);
    EXPECT_EQ(b.cstats().hash_config_rejected.get(net::RssError::KeyTooLong), 1u);
    EXPECT_EQ(b.cstats().hash_config_rejected.get(net::RssError::DataTooShort), 2u);
    EXPECT_EQ(b.cstats().hash_config_rejected.get(net::RssError::TrailingBytes), 1u);
    EXPECT_EQ(b.cstats().cmds_err.get(CtrlError::BadHashConfig), 5u);
    EXPECT_EQ(b.cstats().rss_rejected.total(), 0u);
    EXPECT_EQ(b.cstats().hash_configs.get(), 1u);
    EXPECT_TRUE(s.hashing_enabled());
    EXPECT_EQ(hashes(), before) << "unchanged";

    // VQ_PAIRS_SET keeps it; reset forgets it.
    ASSERT_EQ(b.send(pairs_set(2)), v::VIRTIO_NET_OK);
    EXPECT_TRUE(s.hashing_enabled());
    EXPECT_EQ(hashes(), before);
    b.dev().reset();
    EXPECT_FALSE(s.hashing_enabled());
}

TEST(CtrlMq, HashConfigNeedsHashReportAndNoRss) {
    const std::vector<uint8_t> off(v::kHashConfigFixedBytes, 0);  // hash_types 0, no key
    MqBench rss_and_hash(kMqFeatures | v::feature_mask(v::VIRTIO_NET_F_HASH_REPORT));
    EXPECT_EQ(rss_and_hash.send(as_cmd(v::VIRTIO_NET_CTRL_MQ_HASH_CONFIG, off)), v::VIRTIO_NET_ERR);
    MqBench no_hash(kMqFeatures & ~v::feature_mask(v::VIRTIO_NET_F_RSS));
    EXPECT_EQ(no_hash.send(as_cmd(v::VIRTIO_NET_CTRL_MQ_HASH_CONFIG, off)), v::VIRTIO_NET_ERR);
    for (MqBench* b : {&rss_and_hash, &no_hash}) {
        EXPECT_EQ(b->cstats().cmds_err.get(CtrlError::NotNegotiated), 1u);
        EXPECT_EQ(b->cstats().hash_configs.get(), 0u);
        EXPECT_FALSE(b->dev().rx_steer().hashing_enabled());
    }
}

TEST(CtrlMq, VqPairsSetTurnsRssOffAndResetForgetsItAll) {
    MqBench b;
    ASSERT_EQ(b.send(rss_config(net::serialize_rss_config(rss_cfg(4, 4)))), v::VIRTIO_NET_OK);
    ASSERT_TRUE(b.dev().rx_steer().rss_enabled());
    ASSERT_EQ(b.send(pairs_set(2)), v::VIRTIO_NET_OK);
    EXPECT_FALSE(b.dev().rx_steer().rss_enabled());
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), 2);

    ASSERT_EQ(b.send(rss_config(net::serialize_rss_config(rss_cfg(4, 4)))), v::VIRTIO_NET_OK);
    b.dev().reset();
    EXPECT_FALSE(b.dev().rx_steer().rss_enabled());
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), MqBench::kPairs) << "no control queue";
    ASSERT_TRUE(b.dev().configure(b.setup()));
    EXPECT_EQ(b.dev().rx_steer().active_pairs(), 1) << "negotiated again: one pair";
}

TEST(CtrlMq, FeatureRules) {
    MqBench b;
    b.dev().reset();
    // Rule: RSS requires CTRL_VQ.
    const uint64_t no_ctrl = kMqFeatures & ~v::feature_mask(v::VIRTIO_NET_F_CTRL_VQ);
    EXPECT_EQ(b.dev().set_features(no_ctrl).error(), DeviceError::BadFeatures);
    EXPECT_TRUE(b.dev().set_features(no_ctrl & ~v::feature_mask(v::VIRTIO_NET_F_RSS)));
    EXPECT_TRUE(b.dev().set_features(kMqFeatures));
    EXPECT_NE(b.dev().offered_features() & v::feature_mask(v::VIRTIO_NET_F_MQ), 0u);
    EXPECT_NE(b.dev().offered_features() & v::feature_mask(v::VIRTIO_NET_F_RSS), 0u);

    // A one-pair device offers neither MQ nor RSS, and refuses them.
    FakePort port;
    FakePort* const one[] = {&port};
    auto d = Dev::create(VhostNetOptions{}, std::span<FakePort* const>(one));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ((*d)->offered_features() & kMqFeatures & ~v::feature_mask(v::VIRTIO_NET_F_CTRL_VQ) &
                  ~v::feature_mask(v::VIRTIO_F_VERSION_1),
              0u);
    EXPECT_EQ((*d)->set_features(kMqFeatures).error(), DeviceError::BadFeatures);
    EXPECT_TRUE((*d)->set_features(kMqFeatures & ~(v::feature_mask(v::VIRTIO_NET_F_MQ) |
                                                   v::feature_mask(v::VIRTIO_NET_F_RSS))));
}

// ---- end to end: VirtioNet's commands against a VhostNet worker --------------------------

TEST(CtrlMqEndToEnd, RssSteersFlowsToBothQueuesAndPairsSetTurnsItOff) {
    frontend::VirtioNetConfig fc;
    fc.queue_pairs = 2;
    fc.rx_size = fc.tx_size = 64;
    fc.ctrl_vq = true;
    pair::GuestPair tb;
    ASSERT_FALSE(tb.setup(fc).has_value());
    const DeviceSetup setup = tb.device_setup();
    ASSERT_TRUE(v::has_feature(setup.features, v::VIRTIO_NET_F_MQ));
    ASSERT_TRUE(v::has_feature(setup.features, v::VIRTIO_NET_F_RSS));
    FakePort ports[2];
    ports[0].rx_left = 4;
    ports[1].rx_left = 4;
    FakePort* const pp[] = {&ports[0], &ports[1]};
    auto d = Dev::create(VhostNetOptions{}, std::span<FakePort* const>(pp));
    ASSERT_TRUE(d.has_value());
    Dev& dev = **d;
    ASSERT_TRUE(dev.configure(setup));
    ASSERT_GT(tb.qp(0).try_fill_recv(), 0u);
    ASSERT_GT(tb.qp(1).try_fill_recv(), 0u);
    dev.start();

    // One pair in use: pair 0's frames arrive, pair 1 is never served (the
    // worker queued every running rx at its start; pair 1's run did nothing).
    ASSERT_TRUE(wait_until([&] { return dev.stats(0).rx_pkts.get() == 4; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // a poll round for fd-less ports
    EXPECT_EQ(dev.stats(1).rx_runs.get(), 0u);
    EXPECT_EQ(dev.stats(1).rx_pkts.get(), 0u);
    EXPECT_EQ(dev.rx_steer().active_pairs(), 1);

    // RSS over both queues: the device's pick is Toeplitz's.
    const net::RssConfig cfg = rss_cfg(2, 2);
    const auto st = tb.fe().set_rss(cfg);
    ASSERT_TRUE(st.has_value()) << static_cast<int>(st.error());
    EXPECT_TRUE(dev.rx_steer().rss_enabled());
    EXPECT_EQ(dev.rx_steer().active_pairs(), 2);
    std::set<uint16_t> queues;
    for (uint16_t port = 1000; port < 1032; ++port) {
        const auto f = udp4_frame(port, 4791);
        const net::RxSteering got = dev.rx_steer().steer(f);
        EXPECT_EQ(got.queue, net::select_rx_queue(cfg, f).queue) << port;
        queues.insert(got.queue);
    }
    EXPECT_EQ(queues, (std::set<uint16_t>{0, 1}));
    // Pair 1 in use now: its frames, waiting all along, are served.
    ASSERT_TRUE(wait_until([&] { return dev.stats(1).rx_pkts.get() == 4; }));

    // VQ_PAIRS_SET turns RSS off (QEMU's rule) and narrows to one pair.
    ASSERT_TRUE(tb.fe().set_queue_pairs(1).has_value());
    EXPECT_FALSE(dev.rx_steer().rss_enabled());
    EXPECT_EQ(dev.rx_steer().active_pairs(), 1);
    EXPECT_EQ(dev.rx_steer().steer(udp4_frame(1001, 4791), 1).queue, 0);

    // The device refuses what it cannot do, and the guest hears ERR.
    const auto above = tb.fe().set_queue_pairs(3);
    ASSERT_FALSE(above.has_value());
    EXPECT_EQ(above.error(), frontend::FrontendError::CtrlDeviceErr);
    net::RssConfig bad = cfg;
    bad.table[3] = 2;  // a queue of a bigger device
    ASSERT_FALSE(tb.fe().set_rss(bad).has_value());
    EXPECT_FALSE(dev.rx_steer().rss_enabled());
    EXPECT_EQ(dev.rx_steer().active_pairs(), 1);

    const CtrlQueueStats& cs = dev.ctrl_queue()->stats();
    EXPECT_EQ(cs.rss_configs.get(), 1u);
    EXPECT_EQ(cs.mq_pairs_set.get(), 1u);
    EXPECT_EQ(cs.cmds_err.get(CtrlError::OutOfRange), 1u);
    EXPECT_EQ(cs.rss_rejected.get(net::RssError::TableQueueOutOfRange), 1u);
    dev.stop();
    EXPECT_EQ(ports[1].rx_left, 0u);
    EXPECT_FALSE(tb.any_broken(dev));
}

}  // namespace
}  // namespace pvnet::backend
