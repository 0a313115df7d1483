// The device model (issue 9 §1): a device configured from outside, vring by
// vring, from the description the in-process pairing produces; stop
// returning the base (GET_VRING_BASE), restart at a base, reset, the
// refusals of an incomplete or running setup, and a broken vring reported
// (NEEDS_RESET, counter, err fd) while the others keep being served.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "pvnet/backend/vhost_net.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench

TEST(DeviceModel, StopReportsLastAvailIdxAndARestartContinuesFromIt) {
    Harness h({});
    h.add_tx_burst(0, 10, 64);
    h.dev().handle_tx();
    ASSERT_EQ(h.port.sent_seqs.size(), 10u);

    auto base = h.dev().stop_vring(tx_vring(0));
    ASSERT_TRUE(base);
    EXPECT_EQ(base->last_avail_idx, 10);
    EXPECT_FALSE(h.dev().vring_started(tx_vring(0)));

    // Chains added while stopped are not served...
    for (auto u : Harness::reap(h.txd())) (void)u;
    h.add_tx_burst(10, 5, 64);
    h.dev().handle_tx();
    EXPECT_EQ(h.port.sent_seqs.size(), 10u);

    // ... until the vring starts again from its base: the next chain, no repeat.
    VringSetup s = h.setup().vrings[tx_vring(0)];
    s.base = *base;
    ASSERT_TRUE(h.dev().set_vring(tx_vring(0), s));
    ASSERT_TRUE(h.dev().start_vring(tx_vring(0)));
    h.dev().handle_tx();
    EXPECT_EQ(h.port.sent_seqs, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14}));
    EXPECT_EQ(h.used_idx(h.tx_addrs()), 15);
}

TEST(DeviceModel, ANewDeviceStartedAtTheBaseTakesOverTheRing) {
    Harness h({});
    h.add_tx_burst(0, 7, 64);
    h.dev().handle_tx();
    auto base = h.dev().stop_vring(tx_vring(0));
    ASSERT_TRUE(base);
    h.add_tx_burst(7, 3, 64);

    // A second backend (a restarted process would be one) on the same rings.
    FakePort other;
    DeviceSetup s = h.setup();
    s.vrings[tx_vring(0)].base = *base;
    s.vrings[rx_vring(0)].enabled = false;  // the first device keeps rx
    auto d = VhostNet<FakePort>::create(s, VhostNetOptions{}, other);
    ASSERT_TRUE(d);
    (*d)->handle_tx();
    EXPECT_EQ(other.sent_seqs, (std::vector<uint64_t>{7, 8, 9}));
    EXPECT_EQ(h.used_idx(h.tx_addrs()), 10);
    EXPECT_FALSE((*d)->vring_started(rx_vring(0)));
}

TEST(DeviceModel, RefusesWhatIsIncompleteOrRunning) {
    FakePort port;
    FakePort* ports[] = {&port};
    auto d = VhostNet<FakePort>::create(VhostNetOptions{}, std::span<FakePort* const>(ports));
    ASSERT_TRUE(d);
    NetDevice& dev = **d;
    EXPECT_EQ(dev.max_pairs(), 1);
    EXPECT_EQ(dev.num_vrings(), 3);
    // No memory table, no vring setup.
    EXPECT_EQ(dev.start_vring(0).error(), DeviceError::NotConfigured);
    EXPECT_EQ(dev.start_vring(7).error(), DeviceError::NotConfigured);
    EXPECT_EQ(dev.set_vring(9, VringSetup{}).error(), DeviceError::BadVring);
    EXPECT_EQ(dev.stop_vring(9).error(), DeviceError::BadVring);
    // Features the device does not offer.
    EXPECT_EQ(dev.set_features(virtio::feature_mask(virtio::VIRTIO_F_RING_PACKED)).error(),
              DeviceError::BadFeatures);

    Harness h({});
    const DeviceSetup s = h.setup();
    ASSERT_TRUE(dev.set_features(s.features));
    ASSERT_TRUE(dev.set_mem_table(s.mem));
    EXPECT_EQ(dev.start_vring(0).error(), DeviceError::NotConfigured);  // vring never set
    // The control queue exists only with CTRL_VQ.
    EXPECT_EQ(dev.start_vring(ctrl_vring(1)).error(), DeviceError::BadVring);

    // A ring whose areas are outside guest memory is refused, with its reason.
    VringSetup bad = s.vrings[0];
    bad.addrs.used = mem::GuestAddr(0x10);
    ASSERT_TRUE(dev.set_vring(0, bad));
    EXPECT_EQ(dev.start_vring(0).error(), DeviceError::BadRing);
    EXPECT_NE(dev.vring_error(0), ring::RingError::Count);
    EXPECT_FALSE(dev.vring_started(0));

    ASSERT_TRUE(dev.set_vring(0, s.vrings[0]));
    ASSERT_TRUE(dev.start_vring(0));
    EXPECT_EQ(dev.start_vring(0).error(), DeviceError::Running);
    EXPECT_EQ(dev.set_vring(0, s.vrings[0]).error(), DeviceError::Running);
    EXPECT_EQ(dev.set_features(s.features).error(), DeviceError::Running);
    EXPECT_EQ(dev.set_mem_table(s.mem).error(), DeviceError::Running);
    EXPECT_EQ(dev.configure(s).error(), DeviceError::Running);
    ASSERT_TRUE(dev.stop_vring(0));
    EXPECT_TRUE(dev.configure(s));
    EXPECT_TRUE(dev.vring_started(0));
    EXPECT_TRUE(dev.vring_started(1));
}

TEST(DeviceModel, ABrokenVringIsReportedOnceAndTheOthersAreServed) {
    auto err = notify::EventFd::create();
    ASSERT_TRUE(err);
    FakePort port;
    Harness h({});
    DeviceSetup s = h.setup();
    s.vrings[tx_vring(0)].err = &*err;
    auto d = VhostNet<FakePort>::create(s, VhostNetOptions{}, port);
    ASSERT_TRUE(d);
    NetDevice& dev = **d;
    EXPECT_EQ(dev.status(), 0);

    h.set_avail_slot(h.tx_addrs(), 0, h.size());  // head == size
    h.set_avail_idx(h.tx_addrs(), 1);
    dev.handle_tx();
    dev.handle_tx();
    EXPECT_EQ(dev.status(), virtio::VIRTIO_CONFIG_S_NEEDS_RESET);
    EXPECT_TRUE(dev.vring_broken(tx_vring(0)));
    EXPECT_EQ(dev.vring_error(tx_vring(0)), ring::RingError::HeadOutOfRange);
    EXPECT_EQ(dev.device_stats().vrings_broken.get(), 1u);
    EXPECT_EQ(err->consume(), 1u);

    // rx still works.
    port.rx_left = 3;
    h.add_rx_burst(0, 3);
    dev.handle_rx();
    EXPECT_EQ(dev.stats().rx_pkts.get(), 3u);
    EXPECT_FALSE(dev.vring_broken(rx_vring(0)));

    // Reset forgets the breakage; a new configuration serves again.
    dev.reset();
    EXPECT_EQ(dev.status(), 0);
    EXPECT_FALSE(dev.vring_started(tx_vring(0)));
    EXPECT_EQ(dev.start_vring(tx_vring(0)).error(), DeviceError::NotConfigured);
}

TEST(DeviceModel, StopAndRestartWhileTheWorkerRunsLosesNothing) {
    Harness h({});
    h.dev().start();
    uint64_t next = 0;
    constexpr uint64_t kTotal = 5000;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    uint64_t restarts = 0;
    while (next < kTotal && std::chrono::steady_clock::now() < deadline) {
        // Reap, then add what fits and kick.
        for (auto u : Harness::reap(h.txd())) (void)u;
        uint32_t n = 0;
        while (next < kTotal && n < 64 && h.add_tx(next, 64) == ring::AddStatus::Ok) {
            ++next;
            ++n;
        }
        h.txd().publish();
        h.tx_kick().signal();
        if (next % 512 < 64) {
            // GET_VRING_BASE, then SET_VRING_BASE + start, under traffic.
            auto base = h.dev().stop_vring(tx_vring(0));
            ASSERT_TRUE(base);
            VringSetup s = h.setup().vrings[tx_vring(0)];
            s.base = *base;
            ASSERT_TRUE(h.dev().set_vring(tx_vring(0), s));
            ASSERT_TRUE(h.dev().start_vring(tx_vring(0)));
            h.tx_kick().signal();
            ++restarts;
        }
    }
    ASSERT_EQ(next, kTotal);
    ASSERT_TRUE(wait_until([&] { return h.stats().tx_pkts.get() == kTotal; }));
    h.dev().stop();
    EXPECT_GT(restarts, 5u);
    ASSERT_EQ(h.port.sent_seqs.size(), kTotal);
    for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(h.port.sent_seqs[i], i);
    EXPECT_EQ(h.port.send_bad, 0u);
    EXPECT_EQ(h.dev().status(), 0);
}

/// A port that wants the negotiated features (as a tap does, for TUNSETOFFLOAD).
struct FeaturePort : FakePort {
    uint64_t told = ~uint64_t{0};
    bool refuse = false;
    bool set_guest_features(uint64_t f) noexcept {
        if (refuse) return false;
        told = f;
        return true;
    }
};
static_assert(port::HasGuestFeatures<FeaturePort>);

TEST(DeviceModel, PortsAreToldTheNegotiatedFeaturesAndMayRefuseThem) {
    FeaturePort a, b;
    FeaturePort* ports[] = {&a, &b};
    auto d = VhostNet<FeaturePort>::create(VhostNetOptions{}, std::span<FeaturePort* const>(ports));
    ASSERT_TRUE(d);
    NetDevice& dev = **d;
    const uint64_t f = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) |
                       virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_CSUM) |
                       virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_TSO4);
    ASSERT_TRUE(dev.set_features(f));
    EXPECT_EQ(a.told, f);
    EXPECT_EQ(b.told, f);
    EXPECT_EQ(dev.features(), f);

    // A port that refuses (a tap whose TUNSETOFFLOAD failed): the features stay as they were.
    b.refuse = true;
    const uint64_t g = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1);
    EXPECT_EQ(dev.set_features(g).error(), DeviceError::PortRefused);
    EXPECT_EQ(dev.features(), f);
    b.refuse = false;
    ASSERT_TRUE(dev.set_features(g));
    EXPECT_EQ(b.told, g);
}

}  // namespace
}  // namespace pvnet::backend
