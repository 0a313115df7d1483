// VIRTIO_NET_F_HASH_REPORT end to end (VIRTIO 1.2 "Hash calculation for
// incoming packets", "Hash reporting for incoming packets"): VirtioNet, the
// driver, against a VhostNet worker over FramePorts that hand it real
// Ethernet frames. Covered: the offer (with RSS, on more than one pair,
// never without the control queue); the chain a port sees without the hash
// fields (iov_cut); each received frame's 20-byte header
// carrying the Toeplitz hash of its hash input and the type, on the queue
// the table gives, under RSS_CONFIG and under HASH_CONFIG alone; NONE
// while nothing is configured; tx with 20-byte headers reaching the port
// whole; 64 KiB frames over mergeable buffers. Every wait is bounded.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/net/rss.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/util/iov.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"
#include "steer_frames.h"
#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

namespace v = virtio;
using Frame = std::vector<uint8_t>;
using harness::wait_until;
constexpr uint32_t kHdr = sizeof(v::virtio_net_hdr);
constexpr uint32_t kHashHdr = sizeof(v::virtio_net_hdr_v1_hash);

/// The world behind one pair: hands over `frames` in order behind a zeroed
/// virtio_net_hdr, the first `released` of them (set by the test; the
/// frames themselves before the worker starts); records what it is sent.
struct FramePort {
    std::vector<Frame> frames;
    std::atomic<std::size_t> released{0};
    std::size_t next = 0;  ///< the worker's
    bool peek = false;     ///< peek_len() tells the next length (else 0: unknown)
    std::atomic<uint64_t> no_room{0};
    std::mutex mu;
    std::vector<Frame> sent;  ///< virtio_net_hdr + frame, as the port got them

    bool rx_pending() noexcept { return next < released.load(std::memory_order_acquire); }
    uint32_t peek_len() noexcept {
        return peek && rx_pending() ? static_cast<uint32_t>(kHdr + frames[next].size()) : 0;
    }
    uint32_t recv(std::span<const iovec> dst) noexcept {
        const Frame& f = frames[next++];
        Frame pkt(kHdr, 0);
        pkt.insert(pkt.end(), f.begin(), f.end());
        if (iov_bytes(dst) < pkt.size()) {
            no_room.fetch_add(1);
            return 0;
        }
        (void)copy_to_iov(dst, 0, std::as_bytes(std::span(pkt)));
        return static_cast<uint32_t>(pkt.size());
    }
    port::SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        Frame pkt(len);
        const bool ok = iov_bytes(src) == len &&
                        copy_from_iov(src, 0, std::as_writable_bytes(std::span(pkt)));
        const std::lock_guard<std::mutex> lock(mu);
        if (ok) sent.push_back(std::move(pkt));
        return ok ? port::SendResult::Sent : port::SendResult::Dropped;
    }
};
using Dev = VhostNet<FramePort>;

/// One received packet: the frame after the 20-byte header, the hash fields.
struct Got {
    Frame frame;
    uint32_t hash_value = 0;
    uint16_t hash_report = 0;
    std::size_t pieces = 0;
};

net::RssConfig rss_cfg(uint32_t types = net::kRssSupportedHashTypes) {
    net::RssConfig c;
    c.hash_types = types;
    c.table_len = 16;
    for (uint16_t i = 0; i < c.table_len; ++i) c.table[i] = static_cast<uint16_t>(i % 2);
    c.unclassified_queue = 1;
    c.max_tx_vq = 2;
    c.key_len = 40;
    for (uint8_t i = 0; i < 40; ++i) c.key[i] = static_cast<uint8_t>(0x6d ^ (i * 37));
    return c;
}

net::HashConfig hash_cfg(uint32_t types) {
    const net::RssConfig r = rss_cfg(types);
    net::HashConfig c;
    c.hash_types = types;
    c.key = r.key;
    c.key_len = r.key_len;
    return c;
}

/// What the device must report for `f` under (types, key): computed here
/// from net's pieces, not through the steering the device uses.
struct Want {
    uint16_t report;
    uint32_t hash;
};
Want want_of(const Frame& f, uint32_t types, std::span<const uint8_t> key) {
    const net::HashInput in = net::extract_hash_input(f, types);
    if (in.hash_report == v::VIRTIO_NET_HASH_REPORT_NONE) return {in.hash_report, 0};
    return {in.hash_report, net::toeplitz_hash(key, in.span())};
}

/// The driver (two pairs, a control queue, hash_report) and the device on
/// two FramePorts. `rss` false: the device setup without VIRTIO_NET_F_RSS.
class Bed {
public:
    explicit Bed(bool rss = true, bool mergeable = false, uint64_t offloads = 0) {
        fc_.queue_pairs = 2;
        fc_.rx_size = fc_.tx_size = 256;
        fc_.ctrl_vq = true;
        fc_.hash_report = true;
        fc_.mergeable_rx = mergeable;
        if (auto err = tb_.setup(fc_)) throw std::runtime_error(*err);
        setup_ = tb_.device_setup(offloads);
        if (!rss) setup_.features &= ~v::feature_mask(v::VIRTIO_NET_F_RSS);
        FramePort* const pp[] = {&ports[0], &ports[1]};
        auto d = Dev::create(VhostNetOptions{}, std::span<FramePort* const>(pp));
        if (!d) throw std::runtime_error("VhostNet::create");
        dev_ = std::move(*d);
    }
    ~Bed() { dev_->stop(); }

    /// Configures the device, posts rx buffers (stale bytes in them, so a
    /// field the device leaves unwritten shows), starts the worker.
    void start() {
        for (uint16_t q = 0; q < 2; ++q) {
            for (uint32_t id = 0; id < tb_.qp(q).total_bufs(); ++id) {
                std::memset(tb_.qp(q).buf_host(id), 0xee, tb_.qp(q).buf_bytes());
            }
        }
        ASSERT_TRUE(dev_->configure(setup_));
        ASSERT_GT(tb_.qp(0).try_fill_recv(), 0u);
        ASSERT_GT(tb_.qp(1).try_fill_recv(), 0u);
        dev_->start();
    }
    void release(uint16_t q) { ports[q].released.store(ports[q].frames.size()); }

    /// Reaps `n` packets from queue `q` (bounded), reposting buffers.
    std::vector<Got> receive(uint16_t q, std::size_t n) {
        std::vector<Got> out;
        frontend::QueuePair& qp = tb_.qp(q);
        const bool ok = wait_until([&] {
            qp.poll_rx_packets(64, [&](std::span<const frontend::RxPiece> p) {
                Got g{{}, p[0].hash_value, p[0].hash_report, p.size()};
                for (std::size_t k = 0; k < p.size(); ++k) {
                    const uint32_t skip = k == 0 ? kHashHdr : 0;
                    const auto* b = reinterpret_cast<const uint8_t*>(p[k].host);
                    g.frame.insert(g.frame.end(), b + skip, b + p[k].len);
                }
                out.push_back(std::move(g));
                return false;
            });
            qp.try_fill_recv();
            return out.size() >= n;
        });
        EXPECT_TRUE(ok) << "queue " << q << ": " << out.size() << " of " << n;
        // The device wrote every report (the buffers' stale 0xeeee is no type).
        EXPECT_EQ(qp.stats().rx_hash_report_unknown.get(), 0u);
        return out;
    }

    frontend::VirtioNet& fe() { return tb_.fe(); }
    frontend::QueuePair& qp(uint16_t q) { return tb_.qp(q); }
    Dev& dev() { return *dev_; }
    bool any_broken() { return tb_.any_broken(*dev_); }

    FramePort ports[2];

private:
    frontend::VirtioNetConfig fc_;
    pair::GuestPair tb_;
    DeviceSetup setup_;
    std::unique_ptr<Dev> dev_;
};

/// Flows of every kind: UDPv4, TCPv4, UDPv6, TCPv6, and ARP (no hash).
std::vector<Frame> mixed_frames() {
    std::vector<Frame> out;
    for (uint16_t p = 0; p < 6; ++p) {
        out.push_back(test::udp4_frame(static_cast<uint16_t>(2000 + p), 53));
        out.push_back(test::tcp4_frame(static_cast<uint16_t>(3000 + p), 80));
        out.push_back(test::ip6_frame(17, static_cast<uint16_t>(4000 + p), 53));
        out.push_back(test::ip6_frame(6, static_cast<uint16_t>(5000 + p), 443));
    }
    out.push_back(test::arp_frame());
    return out;
}

// ---- the cut the ports see ---------------------------------------------------------------------

TEST(IovCut, LeavesOutExactlyTheGapWhateverThePieces) {
    // 40 bytes in pieces of every split into up to three; the gap [12, 20).
    std::vector<uint8_t> bytes(40);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
    std::vector<uint8_t> want(bytes.begin(), bytes.begin() + 12);
    want.insert(want.end(), bytes.begin() + 20, bytes.end());
    for (std::size_t a = 0; a <= 40; ++a) {
        for (std::size_t b = a; b <= 40; ++b) {
            const std::array<iovec, 3> src{iovec{bytes.data(), a},
                                           iovec{bytes.data() + a, b - a},
                                           iovec{bytes.data() + b, 40 - b}};
            std::array<iovec, 4> out{};
            const std::size_t n = iov_cut(src, 12, 8, out);
            ASSERT_NE(n, 0u) << a << "," << b;
            std::vector<uint8_t> got;
            for (std::size_t k = 0; k < n; ++k) {
                ASSERT_NE(out[k].iov_len, 0u) << "no empty pieces";
                const auto* p = static_cast<const uint8_t*>(out[k].iov_base);
                got.insert(got.end(), p, p + out[k].iov_len);
            }
            EXPECT_EQ(got, want) << a << "," << b;
        }
    }
    // Shorter than the gap's end: refused, as a chain shorter than the header.
    const iovec shorter{bytes.data(), 19};
    std::array<iovec, 2> out{};
    EXPECT_EQ(iov_cut({&shorter, 1}, 12, 8, out), 0u);
    // No room for the split: refused.
    const iovec one{bytes.data(), 40};
    EXPECT_EQ(iov_cut({&one, 1}, 12, 8, std::span<iovec>(out).first(1)), 0u);
}

// ---- the offer -------------------------------------------------------------------------------

TEST(HashReportFeature, OfferedWhereRssIsAndNeverWithoutTheControlQueue) {
    FramePort a, b;
    FramePort* const two[] = {&a, &b};
    auto d2 = Dev::create(VhostNetOptions{}, std::span<FramePort* const>(two));
    auto d1 = Dev::create(VhostNetOptions{}, std::span<FramePort* const>(two).first(1));
    ASSERT_TRUE(d2 && d1);
    const uint64_t hr = v::feature_mask(v::VIRTIO_NET_F_HASH_REPORT);
    const uint64_t rss = v::feature_mask(v::VIRTIO_NET_F_RSS);
    EXPECT_NE((*d2)->offered_features() & hr, 0u);
    EXPECT_NE((*d2)->offered_features() & rss, 0u);
    EXPECT_EQ((*d1)->offered_features() & (hr | rss), 0u) << "one pair: neither";
    const uint64_t base = v::feature_mask(v::VIRTIO_F_VERSION_1);
    const uint64_t ctrl = v::feature_mask(v::VIRTIO_NET_F_CTRL_VQ);
    EXPECT_EQ((*d1)->set_features(base | ctrl | hr).error(), DeviceError::BadFeatures);
    // Rule: no command could configure the hash without the control queue.
    EXPECT_EQ((*d2)->set_features(base | hr).error(), DeviceError::BadFeatures);
    EXPECT_TRUE((*d2)->set_features(base | ctrl | hr));
    EXPECT_TRUE((*d2)->set_features(base | ctrl | hr | rss));
}

// ---- rx: the hash in the header ---------------------------------------------------------------

TEST(HashReportEndToEnd, RssFramesCarryTheirToeplitzHashAndTypeOnTheTablesQueue) {
    Bed bed;
    const net::RssConfig cfg = rss_cfg();
    std::vector<Want> want[2];
    for (const Frame& f : mixed_frames()) {
        const uint16_t q = net::select_rx_queue(cfg, f).queue;  // the NIC's steering
        bed.ports[q].frames.push_back(f);
        want[q].push_back(want_of(f, cfg.hash_types, {cfg.key.data(), cfg.key_len}));
    }
    ASSERT_FALSE(bed.ports[0].frames.empty());
    ASSERT_FALSE(bed.ports[1].frames.empty());
    bed.start();
    ASSERT_TRUE(bed.fe().set_rss(cfg).has_value());
    bed.release(0);
    bed.release(1);
    std::set<uint16_t> types;
    for (uint16_t q = 0; q < 2; ++q) {
        const std::vector<Got> got = bed.receive(q, bed.ports[q].frames.size());
        ASSERT_EQ(got.size(), want[q].size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            SCOPED_TRACE(testing::Message() << "queue " << q << " frame " << i);
            EXPECT_EQ(got[i].frame, bed.ports[q].frames[i]) << "the frame intact behind 20 bytes";
            EXPECT_EQ(got[i].hash_report, want[q][i].report);
            EXPECT_EQ(got[i].hash_value, want[q][i].hash);
            types.insert(got[i].hash_report);
            if (got[i].hash_report == v::VIRTIO_NET_HASH_REPORT_NONE) {
                EXPECT_EQ(q, cfg.unclassified_queue);
            } else {
                EXPECT_EQ(cfg.table[got[i].hash_value & (cfg.table_len - 1u)], q);
            }
        }
    }
    EXPECT_EQ(types, (std::set<uint16_t>{v::VIRTIO_NET_HASH_REPORT_NONE,
                                         v::VIRTIO_NET_HASH_REPORT_TCPv4,
                                         v::VIRTIO_NET_HASH_REPORT_UDPv4,
                                         v::VIRTIO_NET_HASH_REPORT_TCPv6,
                                         v::VIRTIO_NET_HASH_REPORT_UDPv6}));
    EXPECT_FALSE(bed.any_broken());
}

TEST(HashReportEndToEnd, HashConfigWithoutRssReportsHashesAndSteersNothing) {
    Bed bed(/*rss=*/false);
    // UDPv4 not enabled: a UDPv4 frame hashes on its addresses (IPv4).
    const uint32_t types = v::VIRTIO_NET_RSS_HASH_TYPE_IPv4 | v::VIRTIO_NET_RSS_HASH_TYPE_TCPv4 |
                           v::VIRTIO_NET_RSS_HASH_TYPE_TCPv6;
    const net::HashConfig cfg = hash_cfg(types);
    bed.ports[0].frames = mixed_frames();
    bed.ports[1].frames = {test::tcp4_frame(7, 8), test::udp4_frame(9, 10)};
    bed.start();
    // RSS is not negotiated: its command is refused, HASH_CONFIG served.
    EXPECT_EQ(bed.fe().set_rss(rss_cfg()).error(), frontend::FrontendError::CtrlDeviceErr);
    ASSERT_TRUE(bed.fe().set_hash_config(cfg).has_value());
    EXPECT_TRUE(bed.dev().rx_steer().hashing_enabled());
    EXPECT_FALSE(bed.dev().rx_steer().rss_enabled());
    EXPECT_EQ(bed.dev().rx_steer().active_pairs(), 1) << "no steering: the pairs as they were";
    bed.release(0);
    const std::vector<Got> got = bed.receive(0, bed.ports[0].frames.size());
    ASSERT_EQ(got.size(), bed.ports[0].frames.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        const Want w = want_of(bed.ports[0].frames[i], types, {cfg.key.data(), cfg.key_len});
        EXPECT_EQ(got[i].frame, bed.ports[0].frames[i]) << i;
        EXPECT_EQ(got[i].hash_report, w.report) << i;
        EXPECT_EQ(got[i].hash_value, w.hash) << i;
    }
    EXPECT_EQ(got[0].hash_report, v::VIRTIO_NET_HASH_REPORT_IPv4) << "UDPv4 frame, IPv4 type";
    EXPECT_EQ(got[2].hash_report, v::VIRTIO_NET_HASH_REPORT_NONE) << "UDPv6, IPv6 not enabled";
    // VQ_PAIRS_SET widens the pairs and leaves the hash configuration.
    ASSERT_TRUE(bed.fe().set_queue_pairs(2).has_value());
    EXPECT_TRUE(bed.dev().rx_steer().hashing_enabled());
    bed.release(1);
    const std::vector<Got> got1 = bed.receive(1, 2);
    ASSERT_EQ(got1.size(), 2u);
    EXPECT_EQ(got1[0].hash_report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
    EXPECT_EQ(got1[1].hash_report, v::VIRTIO_NET_HASH_REPORT_IPv4);
    const CtrlQueueStats& cs = bed.dev().ctrl_queue()->stats();
    EXPECT_EQ(cs.hash_configs.get(), 1u);
    EXPECT_EQ(cs.cmds_err.get(CtrlError::NotNegotiated), 1u);
    EXPECT_FALSE(bed.any_broken());
}

TEST(HashReportEndToEnd, UntilHashingIsConfiguredEveryReportIsNone) {
    Bed bed;
    bed.ports[0].frames = mixed_frames();
    bed.start();
    bed.release(0);
    for (const Got& g : bed.receive(0, bed.ports[0].frames.size())) {
        EXPECT_EQ(g.hash_report, v::VIRTIO_NET_HASH_REPORT_NONE);
        EXPECT_EQ(g.hash_value, 0u);
    }
    // With RSS negotiated HASH_CONFIG is refused (RSS_CONFIG sets the hash),
    // and an RSS config of no hash types hashes nothing.
    EXPECT_EQ(bed.fe().set_hash_config(hash_cfg(net::kRssSupportedHashTypes)).error(),
              frontend::FrontendError::CtrlDeviceErr);
    net::RssConfig off = rss_cfg(0);
    off.key_len = 0;
    off.key = {};
    off.max_tx_vq = 1;
    off.unclassified_queue = 0;
    ASSERT_TRUE(bed.fe().set_rss(off).has_value());
    EXPECT_TRUE(bed.dev().rx_steer().rss_enabled());
    EXPECT_EQ(bed.dev().rx_steer().steer(test::tcp4_frame(1, 2)).hash_report,
              v::VIRTIO_NET_HASH_REPORT_NONE);
    EXPECT_FALSE(bed.any_broken());
}

// ---- tx: the driver's 20-byte header ----------------------------------------------------------

TEST(HashReportEndToEnd, TxFramesReachThePortWithTheirNetHdrAndNoHashFields) {
    Bed bed;
    bed.start();
    frontend::QueuePair& qp = bed.qp(0);
    std::vector<Frame> sent;
    for (uint16_t i = 0; i < 8; ++i) {
        const Frame f = test::tcp4_frame(static_cast<uint16_t>(100 + i), 80, 16u * i);
        uint32_t id = 0;
        ASSERT_TRUE(qp.alloc_buf(id));
        std::byte* b = qp.buf_host(id);
        // virtio_net_hdr bytes the port must see as written; hash fields the
        // device must drop (the spec: ignored on tx).
        for (uint32_t k = 0; k < kHdr; ++k) b[k] = static_cast<std::byte>(0x10 + k + i);
        std::memset(b + kHdr, 0xee, kHashHdr - kHdr);
        std::memcpy(b + kHashHdr, f.data(), f.size());
        ASSERT_TRUE(qp.xmit(id, static_cast<uint32_t>(kHashHdr + f.size())));
        Frame want(kHdr);
        for (uint32_t k = 0; k < kHdr; ++k) want[k] = static_cast<uint8_t>(0x10 + k + i);
        want.insert(want.end(), f.begin(), f.end());
        sent.push_back(std::move(want));
    }
    // A chain shorter than the 20-byte header: a bad chain, not a packet.
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    std::memset(qp.buf_host(id), 0, kHashHdr);
    ASSERT_TRUE(qp.xmit(id, kHashHdr - 1));
    qp.tx_flush();
    // tx_pkts is added when the worker's run ends, after the bad chain is counted: wait for both.
    ASSERT_TRUE(wait_until([&] {
        return bed.dev().stats(0).tx_drop_bad_chain.get() == 1 &&
               bed.dev().stats(0).tx_pkts.get() == 8;
    }));
    const std::lock_guard<std::mutex> lock(bed.ports[0].mu);
    EXPECT_EQ(bed.ports[0].sent, sent);
    EXPECT_EQ(bed.dev().stats(0).tx_pkts.get(), 8u);
    // tx_bytes counts what the port got: 12-byte headers, not the guest's 20.
    uint64_t port_bytes = 0;
    for (const Frame& f : bed.ports[0].sent) port_bytes += f.size();
    EXPECT_EQ(bed.dev().stats(0).tx_bytes.get(), port_bytes);
}

// ---- mergeable rx: 64 KiB frames behind the bigger header ------------------------------------

TEST(HashReportEndToEnd, MergeableRx64KiBFramesCarryTheHashInTheirFirstBuffer) {
    const uint64_t gso = v::feature_mask(v::VIRTIO_NET_F_GUEST_CSUM) |
                         v::feature_mask(v::VIRTIO_NET_F_GUEST_TSO4);
    Bed bed(/*rss=*/true, /*mergeable=*/true, gso);
    bed.ports[1].peek = true;  // pair 0: length unknown (64 KiB gathered); pair 1: exact
    const net::RssConfig cfg = rss_cfg();
    for (uint16_t p = 0; bed.ports[0].frames.size() < 3 || bed.ports[1].frames.size() < 3; ++p) {
        // 14 + 20 + 20 + 65000 bytes: the IP length near its 65535 limit.
        Frame f = test::tcp4_frame(static_cast<uint16_t>(6000 + p), 80, p % 2 ? 65000 : 100);
        const uint16_t q = net::select_rx_queue(cfg, f).queue;
        if (bed.ports[q].frames.size() < 3) bed.ports[q].frames.push_back(std::move(f));
    }
    bed.start();
    ASSERT_TRUE(bed.fe().set_rss(cfg).has_value());
    bed.release(0);
    bed.release(1);
    for (uint16_t q = 0; q < 2; ++q) {
        const std::vector<Got> got = bed.receive(q, 3);
        ASSERT_EQ(got.size(), 3u);
        for (std::size_t i = 0; i < 3; ++i) {
            const Frame& f = bed.ports[q].frames[i];
            const Want w = want_of(f, cfg.hash_types, {cfg.key.data(), cfg.key_len});
            EXPECT_EQ(got[i].frame, f) << q << "/" << i;
            EXPECT_EQ(got[i].hash_report, v::VIRTIO_NET_HASH_REPORT_TCPv4);
            EXPECT_EQ(got[i].hash_value, w.hash);
            if (f.size() > 60000) {
                EXPECT_GT(got[i].pieces, 30u) << "2 KiB buffers";
            }
        }
        EXPECT_GT(bed.dev().stats(q).rx_merged_pkts.get(), 0u);
        EXPECT_EQ(bed.ports[q].no_room.load(), 0u);
    }
    EXPECT_FALSE(bed.any_broken());
}

}  // namespace
}  // namespace pvnet::backend
