// vhost_user::Server with VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD: the buffer
// GET_INFLIGHT_FD hands out, a back-end restart that finds chains its dead
// predecessor left in flight (they come back used with length 0, counted,
// never transmitted), the consistent point a graceful stop leaves, and the
// hostile GET/SET_INFLIGHT_FD payloads.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "pvnet/mem/memory_region.h"
#include "pvnet/vhost_user/frontend.h"
#include "pvnet/ring/inflight.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/virtio/inflight.h"
#include "pvnet/virtio/virtio_ring.h"
#include "server_bed.h"
#include "test_frontend.h"

namespace pvnet::vhost_user {
namespace {

using namespace test;
using virtio::DescStateSplit;
using virtio::QueueRegionSplit;
using virtio::SplitRingLayout;

constexpr InflightInfo kReq{0, 0, 2, kRingSize};
constexpr uint64_t kQueueBytes = virtio::inflight_queue_bytes(kRingSize);

/// The front-end's copy of the buffer (it never reads it; the test does).
struct Log {
    mem::MemoryRegion map;
    explicit Log(int fd, uint64_t bytes)
        : map(std::move(mem::MemoryRegion::map_fd(::dup(fd), bytes, 0).value())) {}
    std::byte* queue(uint16_t q) const { return map.host() + q * kQueueBytes; }
    QueueRegionSplit header(uint16_t q) const {
        QueueRegionSplit h;
        std::memcpy(&h, queue(q), sizeof h);
        return h;
    }
    DescStateSplit entry(uint16_t q, uint16_t head) const {
        DescStateSplit d;
        std::memcpy(&d, queue(q) + virtio::kInflightQueueHeader + 16u * head, sizeof d);
        return d;
    }
    void mark(uint16_t q, uint16_t head, uint64_t counter) const {
        DescStateSplit d{};
        d.inflight = 1;
        d.counter = counter;
        std::memcpy(queue(q) + virtio::kInflightQueueHeader + 16u * head, &d, sizeof d);
    }
    int marked(uint16_t q) const {
        int n = 0;
        for (uint16_t h = 0; h < kRingSize; ++h) n += entry(q, h).inflight;
        return n;
    }
};

uint16_t ring_u16(const Guest& g, uint64_t gpa) {
    uint16_t v;
    std::memcpy(&v, g.host(gpa), sizeof v);
    return v;
}
uint16_t used_idx(const Guest& g, uint32_t i) {
    return ring_u16(g, g.addrs[i].used.value + SplitRingLayout::used_idx_off());
}
uint16_t avail_idx(const Guest& g, uint32_t i) {
    return ring_u16(g, g.addrs[i].avail.value + SplitRingLayout::avail_idx_off());
}
/// The head the driver put at avail index `idx`.
uint16_t avail_head(const Guest& g, uint32_t i, uint16_t idx) {
    return ring_u16(g, g.addrs[i].avail.value +
                           SplitRingLayout::avail_ring_off(static_cast<uint16_t>(idx % kRingSize)));
}

/// negotiate(), the memory table, SET_INFLIGHT_FD, then each vring from
/// `base` (as a front-end reconnecting: SET_VRING_BASE = used.idx).
void setup_with_log(FrontEnd& fe, Guest& g, int log_fd, const InflightInfo& info,
                    const uint16_t base[2]) {
    negotiate(fe);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetInflightFd, info, std::span(&log_fd, 1)), 0u);
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(fe.ack(Request::SetVringNum, vs(i, kRingSize)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringBase, vs(i, base[i])), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(i)), 0u);
        const int k = g.kick[i].fd(), c = g.call[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{i}, std::span(&c, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(i, 1)), 0u);
    }
}

TEST(VhostUserInflight, GetInflightFdReturnsASealedBufferOfInitialisedLogs) {
    Bed b("inf_get");
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    const auto got = fe.get_inflight(kReq);
    ASSERT_TRUE(got);
    const auto [info, fd] = *got;
    EXPECT_EQ(info.mmap_size, 2 * kQueueBytes);
    EXPECT_EQ(info.mmap_offset, 0u);
    EXPECT_EQ(info.num_queues, 2);
    EXPECT_EQ(info.queue_size, kRingSize);
    struct stat st{};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_GE(static_cast<uint64_t>(st.st_size), info.mmap_size);
    {
        const Log log(fd, info.mmap_size);
        EXPECT_TRUE(log.map.sealed_against_shrink());
        for (uint16_t q = 0; q < 2; ++q) {
            EXPECT_EQ(log.header(q).version, 1);
            EXPECT_EQ(log.header(q).desc_num, kRingSize);
            EXPECT_EQ(log.marked(q), 0);
        }
    }
    ::close(fd);
    EXPECT_EQ(b.st().inflight_fds.get(), 1u);
    EXPECT_EQ(b.st().rejected.get(), 0u);
}

// The issue-14 scenario: a back-end died with two tx chains popped and not
// used (its log says so); the front-end reconnects with the same log and
// SET_VRING_BASE = used.idx. The chains come back used with length 0 and
// counted; neither frame reaches the port; traffic goes on.
TEST(VhostUserInflight, ChainsADeadBackEndLeftInFlightComeBackDroppedNotSent) {
    Bed b("inf_restart");
    Guest g;
    int log_fd = -1;
    InflightInfo info;
    {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        auto got = fe.get_inflight(kReq);
        ASSERT_TRUE(got);
        std::tie(info, log_fd) = *got;
        fe.close();
    }
    ASSERT_TRUE(wait_until([&] { return b.st().disconnects.get() == 1; }));
    const Log log(log_fd, info.mmap_size);
    {
        FrontEnd fe(b.cfg.path);
        const uint16_t base[2] = {0, 0};
        setup_with_log(fe, g, log_fd, info, base);
        for (uint64_t s = 0; s < 3; ++s) packets_flow(b, g, s);
    }
    ASSERT_TRUE(wait_until([&] { return b.st().disconnects.get() == 2; }));
    EXPECT_EQ(log.marked(0), 0);
    EXPECT_EQ(log.marked(1), 0);
    EXPECT_EQ(log.header(1).used_idx, used_idx(g, 1));

    // What a back-end killed right after popping two frames leaves: the frames
    // available (and kicked), their heads marked in the log, not used.
    const std::vector<std::byte> frame(60, std::byte{0xab});
    g.transmit(100, frame);
    g.transmit(101, frame);
    const uint16_t avail = avail_idx(g, 1);
    log.mark(1, avail_head(g, 1, static_cast<uint16_t>(avail - 2)), 7);
    log.mark(1, avail_head(g, 1, static_cast<uint16_t>(avail - 1)), 8);
    const uint16_t used_before = used_idx(g, 1);

    FrontEnd fe(b.cfg.path);
    const uint16_t base[2] = {used_idx(g, 0), used_before};  // GET_VRING_BASE never answered
    setup_with_log(fe, g, log_fd, info, base);
    EXPECT_EQ(b.dev->stats(0).tx_inflight_dropped.get(), 2u);
    EXPECT_EQ(b.dev->stats(0).rx_inflight_dropped.get(), 0u);
    EXPECT_EQ(used_idx(g, 1), static_cast<uint16_t>(used_before + 2));
    EXPECT_EQ(log.marked(1), 0);
    for (const uint64_t token : {100u, 101u}) {
        ring::UsedBuf u;
        ASSERT_TRUE(wait_until([&] { return g.q[1]->get_used(u); }));
        EXPECT_EQ(u.token, token);
        EXPECT_EQ(u.len, 0u);
    }
    // The next frame the far end sees is the next one sent (packets_flow checks it).
    packets_flow(b, g, 3);
    EXPECT_EQ(b.st().inflight_fds.get(), 3u);  // GET, then SET twice
    EXPECT_EQ(b.st().inflight_bad_log.get(), 0u);
    ::close(log_fd);
}

// A graceful stop (GET_VRING_BASE, or the server's stop on SIGTERM) leaves
// the ring at a consistent point: base == used.idx, nothing marked.
TEST(VhostUserInflight, GracefulStopLeavesNothingInFlight) {
    Bed b("inf_stop");
    Guest g;
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    auto got = fe.get_inflight(kReq);
    ASSERT_TRUE(got);
    const auto [info, log_fd] = *got;
    const Log log(log_fd, info.mmap_size);
    const uint16_t zero[2] = {0, 0};
    setup_with_log(fe, g, log_fd, info, zero);
    for (uint64_t s = 0; s < 20; ++s) packets_flow(b, g, s);
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(fe.msg(Request::GetVringBase, vs(i, 0), {}, false));
        const auto r = fe.reply(Request::GetVringBase);
        ASSERT_TRUE(r);
        VringState st;
        std::memcpy(static_cast<void*>(&st), &*r, sizeof st);
        EXPECT_EQ(st.num, used_idx(g, i));
        EXPECT_EQ(log.marked(static_cast<uint16_t>(i)), 0);
        EXPECT_EQ(log.header(static_cast<uint16_t>(i)).used_idx, used_idx(g, i));
    }
    // Restarted by new kicks, then the server stopped as serve's SIGTERM does.
    for (uint32_t i = 0; i < 2; ++i) {
        const int k = g.kick[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
    }
    for (uint64_t s = 20; s < 30; ++s) packets_flow(b, g, s);
    g.post_rx(99);  // an rx buffer the device holds no frame for
    b.server->stop();
    EXPECT_FALSE(b.dev->vring_started(0));
    for (uint16_t i = 0; i < 2; ++i) {
        EXPECT_EQ(log.marked(i), 0);
        EXPECT_EQ(log.header(i).used_idx, used_idx(g, i));
    }
    EXPECT_EQ(b.dev->stats(0).tx_inflight_dropped.get(), 0u);
    ::close(log_fd);
}

TEST(VhostUserInflight, HostileSetInflightFdIsRefusedAndCounted) {
    Bed b("inf_hostile_set");
    FrontEnd fe(b.cfg.path);
    Guest g;
    negotiate(fe);
    auto sealed = mem::MemoryRegion::create(2 * kQueueBytes, "inf_sealed");
    ASSERT_TRUE(sealed);
    for (uint16_t q = 0; q < 2; ++q) {
        ASSERT_TRUE(ring::init_split_inflight(sealed->bytes().subspan(q * kQueueBytes), kRingSize));
    }
    const int base_fds = count_fds();
    const int good = sealed->fd();
    const InflightInfo ok{2 * kQueueBytes, 0, 2, kRingSize};
    const auto refused = [&](const auto& payload, std::span<const int> fds) {
        EXPECT_NE(fe.ack(Request::SetInflightFd, payload, fds).value_or(0), 0u);
    };
    uint64_t payload = b.st().bad_payload.get(), fdsc = b.st().bad_fds.get();
    // Short payload, no fd, two fds.
    refused(uint64_t{0}, std::span(&good, 1));
    EXPECT_EQ(b.st().bad_payload.get(), ++payload);
    refused(ok, {});
    EXPECT_EQ(b.st().bad_fds.get(), ++fdsc);
    const int two[] = {good, good};
    refused(ok, two);
    EXPECT_EQ(b.st().bad_fds.get(), ++fdsc);
    // Sizes: past the file, offset + size wrapping, an unaligned offset,
    // smaller than the queues need, zero.
    const uint64_t file = sealed->size();
    for (const InflightInfo& bad : {
             InflightInfo{file + 4096, 0, 2, kRingSize},
             InflightInfo{2 * kQueueBytes, 4096, 2, kRingSize},
             InflightInfo{2 * kQueueBytes, UINT64_MAX - 10, 2, kRingSize},
             InflightInfo{2 * kQueueBytes, 8, 2, kRingSize},
             InflightInfo{2 * kQueueBytes - 1, 0, 2, kRingSize},
             InflightInfo{0, 0, 2, kRingSize},
             // Shape: too many queues, none, queue sizes 0, not a power of two.
             InflightInfo{2 * kQueueBytes, 0, 3, kRingSize},
             InflightInfo{2 * kQueueBytes, 0, 0, kRingSize},
             InflightInfo{2 * kQueueBytes, 0, 2, 0},
             InflightInfo{2 * kQueueBytes, 0, 2, 100},
             InflightInfo{2 * kQueueBytes, 0, 2, 0xffff},
         }) {
        refused(bad, std::span(&good, 1));
        EXPECT_EQ(b.st().bad_payload.get(), ++payload)
            << bad.mmap_size << " " << bad.mmap_offset << " " << bad.num_queues << " "
            << bad.queue_size;
    }
    // A file the front-end could shrink under the mapping.
    {
        const int unsealed = ::memfd_create("inf_unsealed", MFD_CLOEXEC);
        ASSERT_EQ(::ftruncate(unsealed, static_cast<off_t>(file)), 0);
        refused(ok, std::span(&unsealed, 1));
        EXPECT_EQ(b.st().bad_payload.get(), ++payload);
        ::close(unsealed);
    }
    EXPECT_EQ(count_fds(), base_fds);
    EXPECT_EQ(b.st().inflight_fds.get(), 0u);
    // Accepted; but not replaced while a ring runs.
    ASSERT_EQ(fe.ack(Request::SetInflightFd, ok, std::span(&good, 1)), 0u);
    const uint16_t zero[2] = {0, 0};
    setup_with_log(fe, g, good, ok, zero);
    const uint64_t state = b.st().bad_state.get();
    refused(ok, std::span(&good, 1));
    EXPECT_EQ(b.st().bad_state.get(), state + 1);
    const InflightInfo req{0, 0, 2, kRingSize};
    ASSERT_TRUE(fe.msg(Request::GetInflightFd, req, {}, false));
    EXPECT_TRUE(fe.closed_by_peer());  // a GET has no REPLY_ACK: refused means closed
    EXPECT_EQ(b.st().bad_state.get(), state + 2);
    EXPECT_EQ(b.st().inflight_fds.get(), 2u);
    EXPECT_EQ(b.st().rejected.get(), b.st().bad_payload.get() + b.st().bad_fds.get() +
                                         b.st().bad_state.get() + b.st().unsupported.get());
}

TEST(VhostUserInflight, HostileGetInflightFdClosesTheConnection) {
    Bed b("inf_hostile_get");
    const auto closes = [&](const auto& payload) {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        ASSERT_TRUE(fe.msg(Request::GetInflightFd, payload, {}, false));
        EXPECT_TRUE(fe.closed_by_peer());
        ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    };
    closes(uint64_t{0});                               // short payload
    closes(InflightInfo{0, 0, 3, kRingSize});          // more queues than data vrings
    closes(InflightInfo{0, 0, 0, kRingSize});
    closes(InflightInfo{0, 0, 2, 100});                // not a power of two
    closes(InflightInfo{0, 0, 2, 0});
    EXPECT_EQ(b.st().bad_payload.get(), 5u);
    // With an fd: the count is exact, the fd closed.
    {
        FrontEnd fe(b.cfg.path);
        negotiate(fe);
        const int before = count_fds();
        auto e = notify::EventFd::create();
        const int fd = e->fd();
        ASSERT_TRUE(fe.msg(Request::GetInflightFd, kReq, std::span(&fd, 1), false));
        EXPECT_TRUE(fe.closed_by_peer());
        ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
        // + our eventfd - the server's end of the connection: the fd it got was closed.
        EXPECT_EQ(count_fds(), before);
    }
    EXPECT_EQ(b.st().bad_fds.get(), 1u);
    // Not negotiated: unsupported.
    {
        FrontEnd fe(b.cfg.path);
        ASSERT_TRUE(fe.msg(Request::SetFeatures, kFeatures, {}, false));
        ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, bit(kProtoReplyAck), {}, false));
        EXPECT_NE(fe.ack(Request::SetInflightFd, kReq, {}).value_or(0), 0u);
        ASSERT_TRUE(fe.msg(Request::GetInflightFd, kReq, {}, false));
        EXPECT_TRUE(fe.closed_by_peer());
    }
    EXPECT_EQ(b.st().unsupported.get(), 2u);
    EXPECT_EQ(b.st().inflight_fds.get(), 0u);
    fresh_setup_works(b);
}

// A log that does not fit its ring refuses that ring (counted); the others run.
TEST(VhostUserInflight, ALogThatDoesNotFitTheRingRefusesIt) {
    Bed b("inf_badlog");
    Guest g;
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    auto got = fe.get_inflight(kReq);
    ASSERT_TRUE(got);
    const auto [info, log_fd] = *got;
    const Log log(log_fd, info.mmap_size);
    // Queue 0: version 2.
    const uint16_t v2 = 2;
    std::memcpy(log.queue(0) + offsetof(QueueRegionSplit, version), &v2, sizeof v2);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetInflightFd, info, std::span(&log_fd, 1)), 0u);
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(fe.ack(Request::SetVringNum, vs(i, kRingSize)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(i)), 0u);
        const int k = g.kick[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
    }
    EXPECT_NE(fe.ack(Request::SetVringEnable, vs(0, 1)).value_or(0), 0u);
    EXPECT_EQ(b.dev->vring_error(0), ring::RingError::InflightBadLog);
    EXPECT_EQ(b.st().inflight_bad_log.get(), 1u);
    EXPECT_EQ(fe.ack(Request::SetVringEnable, vs(1, 1)), 0u);
    EXPECT_TRUE(b.dev->vring_started(1));
    // Queue 1 with a size other than the log's: refused too.
    ASSERT_TRUE(fe.msg(Request::GetVringBase, vs(1, 0), {}, false));
    ASSERT_TRUE(fe.reply(Request::GetVringBase));
    ASSERT_EQ(fe.ack(Request::SetVringNum, vs(1, kRingSize / 2)), 0u);
    const int k = g.kick[1].fd();
    EXPECT_NE(fe.ack(Request::SetVringKick, uint64_t{1}, std::span(&k, 1)).value_or(0), 0u);
    EXPECT_EQ(b.st().inflight_bad_log.get(), 2u);
    EXPECT_FALSE(b.dev->vring_started(1));
    ::close(log_fd);
}

// The log's queue_size is the one every ring must have: a ring of another size
// is refused even when the front-end rewrote that queue's header to match it
// (the header is the front-end's memory; the session holds the layout).
TEST(VhostUserInflight, ARingOfAnotherSizeThanTheLogsQueueSizeIsRefused) {
    Bed b("inf_qsize");
    Guest g;
    FrontEnd fe(b.cfg.path);
    negotiate(fe);
    auto got = fe.get_inflight(kReq);
    ASSERT_TRUE(got);
    const auto [info, log_fd] = *got;
    const Log log(log_fd, info.mmap_size);
    const uint16_t half = kRingSize / 2;
    std::memcpy(log.queue(1) + offsetof(QueueRegionSplit, desc_num), &half, sizeof half);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetInflightFd, info, std::span(&log_fd, 1)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringNum, vs(1, half)), 0u);
    ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(1)), 0u);
    const int k = g.kick[1].fd();
    ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{1}, std::span(&k, 1)), 0u);
    EXPECT_EQ(fe.ack(Request::SetVringEnable, vs(1, 1)), 1u);
    EXPECT_EQ(b.st().inflight_bad_log.get(), 1u);
    EXPECT_EQ(b.st().bad_payload.get(), 1u);
    EXPECT_FALSE(b.dev->vring_started(1));
    ::close(log_fd);
}

// ---- pvnet's own front-end (vhost_user::Frontend) and its inflight buffer -------------

/// A device for the Frontend: guest memory, its two rings of the sizes asked, doorbells.
struct FeDevice {
    mem::MemoryRegion region = std::move(mem::MemoryRegion::create(kMemBytes, "inf_fe").value());
    notify::EventFd efd[4] = {
        std::move(notify::EventFd::create().value()), std::move(notify::EventFd::create().value()),
        std::move(notify::EventFd::create().value()), std::move(notify::EventFd::create().value())};
    backend::DeviceSetup setup(uint64_t features, uint16_t rx, uint16_t tx) const {
        backend::DeviceSetup d;
        d.features = features;
        const uint16_t sizes[2] = {rx, tx};
        for (std::size_t i = 0; i < 2; ++i) {
            backend::VringSetup v;
            v.addrs = ring::split_ring_addrs_at(mem::GuestAddr(kGpa + i * kRingArea), sizes[i]);
            v.kick = &efd[2 * i];
            v.call = &efd[2 * i + 1];
            d.vrings.push_back(v);
        }
        return d;
    }
    GuestMemory memory() const { return {region.fd(), kGpa, region.size(), region.host()}; }
};

std::unique_ptr<Frontend> make_frontend(const std::string& path, bool inflight = true) {
    FrontendConfig c;
    c.path = path;
    c.inflight = inflight;
    c.connect_timeout_ms = 3000;
    auto fe = Frontend::create(c);
    EXPECT_TRUE(fe) << (fe ? "" : fe.error());
    return fe ? std::move(*fe) : nullptr;
}

constexpr uint64_t kVersion1 = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1);

/// The back-end dies (the server goes) and another takes the socket, same device.
void restart_backend(Bed& b, Frontend& fe) {
    b.server.reset();
    auto s = Server::create(b.cfg, *b.dev);
    ASSERT_TRUE(s) << (s ? "" : s.error());
    b.server = std::move(*s);
    b.server->start();
    ASSERT_TRUE(wait_until([&] { return !fe.alive(); }));
}

// The buffer is one device layout's: a second start() on the same back-end, with
// rings of another size, gets a fresh buffer laid out for them (the first
// device's, for 256 entries, had every 128-entry ring refused).
TEST(VhostUserInflight, FrontendStartWithOtherRingSizesGetsAFreshBuffer) {
    Bed b("inf_fe_layout");
    FeDevice d;
    auto fe = make_frontend(b.cfg.path);
    auto f = fe->connect(kVersion1);
    ASSERT_TRUE(f) << f.error().text;
    ASSERT_NE(fe->protocol_features() & bit(kProtoInflightShmfd), 0u);
    auto s = fe->start(d.setup(*f, kRingSize, kRingSize), d.memory());
    ASSERT_TRUE(s) << s.error().text;
    EXPECT_EQ(b.st().rings_started.get(), 2u);
    EXPECT_EQ(b.st().inflight_fds.get(), 2u);  // GET_INFLIGHT_FD, then SET_INFLIGHT_FD
    ASSERT_TRUE(fe->stop());
    f = fe->connect(kVersion1);
    ASSERT_TRUE(f) << f.error().text;
    s = fe->start(d.setup(*f, kRingSize / 2, kRingSize / 2), d.memory());
    EXPECT_TRUE(s) << s.error().text;
    EXPECT_EQ(b.st().inflight_bad_log.get(), 0u);
    EXPECT_EQ(b.st().rings_started.get(), 4u);
    EXPECT_EQ(b.st().inflight_fds.get(), 4u);
    EXPECT_EQ(b.st().busy_rejected.get(), 0u);
}

// Only a reconnect() after a lost back-end hands the next one the old log (what
// the dead one had in flight). New rings after a loss (connect + start), or a
// reconnect after a clean stop, get a fresh buffer: an old log applied to fresh
// rings would complete chains they never had.
TEST(VhostUserInflight, FrontendReplaysTheLogOnlyAfterALoss) {
    Bed b("inf_fe_loss");
    FeDevice d;
    auto fe = make_frontend(b.cfg.path);
    auto f = fe->connect(kVersion1);
    ASSERT_TRUE(f) << f.error().text;
    ASSERT_TRUE(fe->start(d.setup(*f, kRingSize, kRingSize), d.memory()));
    EXPECT_EQ(b.st().inflight_fds.get(), 2u);
    restart_backend(b, *fe);
    auto s = fe->reconnect();
    ASSERT_TRUE(s) << s.error().text;
    EXPECT_EQ(b.st().inflight_fds.get(), 1u);  // SET_INFLIGHT_FD alone: the kept log
    EXPECT_EQ(b.st().rings_started.get(), 2u);

    restart_backend(b, *fe);
    f = fe->connect(kVersion1);
    ASSERT_TRUE(f) << f.error().text;
    s = fe->start(d.setup(*f, kRingSize, kRingSize), d.memory());
    ASSERT_TRUE(s) << s.error().text;
    EXPECT_EQ(b.st().inflight_fds.get(), 2u);  // a fresh one asked for

    ASSERT_TRUE(fe->stop());
    s = fe->reconnect();
    ASSERT_TRUE(s) << s.error().text;
    EXPECT_EQ(b.st().inflight_fds.get(), 4u);  // clean stop: fresh again
    EXPECT_EQ(b.st().rings_started.get(), 4u);
}

// One queue_size describes every queue's log (vhost-user.rst GET_INFLIGHT_FD):
// rings of different sizes are refused before anything is sent, with a reason
// that says what to change; without INFLIGHT_SHMFD the same device runs.
TEST(VhostUserInflight, FrontendRefusesMixedRingSizesWithInflightUpFront) {
    Bed b("inf_fe_mixed");
    FeDevice d;
    {
        auto fe = make_frontend(b.cfg.path);
        auto f = fe->connect(kVersion1);
        ASSERT_TRUE(f) << f.error().text;
        const uint64_t messages = b.st().messages.get();
        auto s = fe->start(d.setup(*f, kRingSize, kRingSize / 2), d.memory());
        ASSERT_FALSE(s);
        EXPECT_EQ(s.error().fail, FrontendFail::Layout);
        EXPECT_NE(s.error().text.find("vring 1 has 128 entries, vring 0 256"), std::string::npos)
            << s.error().text;
        EXPECT_EQ(fe->stats().fails.get(FrontendFail::Layout), 1u);
        EXPECT_EQ(b.st().messages.get(), messages);
        EXPECT_EQ(b.st().inflight_fds.get(), 0u);
    }
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    auto fe = make_frontend(b.cfg.path, false);
    auto f = fe->connect(kVersion1);
    ASSERT_TRUE(f) << f.error().text;
    auto s = fe->start(d.setup(*f, kRingSize, kRingSize / 2), d.memory());
    EXPECT_TRUE(s) << s.error().text;
    EXPECT_EQ(b.st().rings_started.get(), 2u);
}

}  // namespace
}  // namespace pvnet::vhost_user
