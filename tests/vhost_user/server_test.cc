// vhost_user::Server against a test front-end over a real unix socket: the
// QEMU-like setup sequence moves packets both ways through a VhostNet on a
// PeerPort; then the hostile cases, each checked by the answer (REPLY_ACK
// failure or close), the counter, the fd count, and that a fresh session
// still works afterwards.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/peer_port.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/vhost_user/protocol.h"
#include "pvnet/vhost_user/server.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::vhost_user {
namespace {

using namespace std::chrono_literals;
using mem::GuestAddr;

constexpr uint64_t kGpa = 0x100000;
constexpr uint64_t kUva = 0x7f0000000000;  // the front-end's (fictitious) address of guest memory
constexpr uint64_t kRingArea = 64 * 1024;
constexpr uint64_t kMemBytes = 4 * 1024 * 1024;
constexpr uint64_t kDataGpa = kGpa + 2 * kRingArea;
constexpr uint16_t kRingSize = 256;
constexpr uint32_t kHdr = backend::kHdrBytes;

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

int count_fds() {
    int n = 0;
    DIR* d = ::opendir("/proc/self/fd");
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    return n;
}

/// Mappings of the guest's memfd in /proc/self/maps (the back-end's and the test's own).
int count_maps() {
    FILE* f = std::fopen("/proc/self/maps", "r");
    int n = 0;
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
        n += std::strstr(line, "memfd:vu_guest") != nullptr;
    }
    std::fclose(f);
    return n;
}

std::string socket_path(const char* tag) {
    return "/tmp/pvnet_vu_" + std::to_string(::getpid()) + "_" + tag + ".sock";
}

/// The test's front-end: one connection, blocking with a receive timeout.
class FrontEnd {
public:
    explicit FrontEnd(const std::string& path) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        timeval tv{5, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    ~FrontEnd() { ::close(fd_); }
    bool connected() const { return connected_; }

    bool send_raw(const void* data, std::size_t len, std::span<const int> fds = {}) {
        iovec iov{const_cast<void*>(data), len};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 16)];
        if (!fds.empty()) {
            mh.msg_control = cbuf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
            cmsghdr* c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
            std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
        }
        return ::sendmsg(fd_, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
    }
    bool send(Request r, uint32_t flags, const void* payload, uint32_t size,
              std::span<const int> fds = {}) {
        std::vector<std::byte> m(sizeof(MsgHeader) + size);
        const MsgHeader h{static_cast<uint32_t>(r), flags, size};
        std::memcpy(m.data(), &h, sizeof h);
        if (size != 0) std::memcpy(m.data() + sizeof h, payload, size);
        return send_raw(m.data(), m.size(), fds);
    }
    template <typename T>
    bool msg(Request r, const T& payload, std::span<const int> fds = {}, bool need_reply = true) {
        return send(r, kVersion | (need_reply ? kFlagNeedReply : 0), &payload, sizeof payload, fds);
    }
    /// A reply's u64 (or VringState), nullopt on EOF / timeout / bad reply.
    std::optional<uint64_t> reply(Request r) {
        MsgHeader h;
        if (!read_all(&h, sizeof h)) return std::nullopt;
        uint64_t v = 0;
        if (h.request != static_cast<uint32_t>(r) || h.flags != (kVersion | kFlagReply) ||
            h.size != 8 || !read_all(&v, sizeof v)) {
            return std::nullopt;
        }
        return v;
    }
    /// Sends with NEED_REPLY and returns the REPLY_ACK value.
    template <typename T>
    std::optional<uint64_t> ack(Request r, const T& payload, std::span<const int> fds = {}) {
        if (!msg(r, payload, fds)) return std::nullopt;
        return reply(r);
    }
    std::optional<uint64_t> get(Request r) {
        if (!send(r, kVersion, nullptr, 0)) return std::nullopt;
        return reply(r);
    }
    /// True when the back-end closed the connection within the timeout (EOF,
    /// or a reset when it closed with our bytes unread).
    bool closed_by_peer() {
        char c;
        const ssize_t n = ::recv(fd_, &c, 1, 0);
        return n == 0 || (n < 0 && errno == ECONNRESET);
    }

private:
    bool read_all(void* p, std::size_t n) {
        auto* b = static_cast<char*>(p);
        while (n != 0) {
            const ssize_t k = ::recv(fd_, b, n, 0);
            if (k <= 0) return false;
            b += k;
            n -= static_cast<std::size_t>(k);
        }
        return true;
    }
    int fd_ = -1;
    bool connected_ = false;
};

struct OneRegion {
    uint32_t nregions = 1;
    uint32_t padding = 0;
    MemRegion r;
};

VringState vs(uint32_t i, uint32_t n) { return VringState{i, n}; }

/// The guest side: memory (one memfd), both rings and their doorbells.
struct Guest {
    mem::MemoryRegion region = std::move(mem::MemoryRegion::create(kMemBytes, "vu_guest").value());
    mem::MemoryTable table;
    ring::SplitRingAddrs addrs[2];
    std::unique_ptr<ring::SplitDriverQueue> q[2];  // rx, tx
    notify::EventFd kick[2] = {std::move(notify::EventFd::create().value()),
                               std::move(notify::EventFd::create().value())};
    notify::EventFd call[2] = {std::move(notify::EventFd::create().value()),
                               std::move(notify::EventFd::create().value())};

    Guest() {
        EXPECT_TRUE(table.add(GuestAddr(kGpa), region.bytes()));
        for (uint64_t i = 0; i < 2; ++i) {
            addrs[i] = ring::split_ring_addrs_at(GuestAddr(kGpa + i * kRingArea), kRingSize);
            ring::DriverQueueConfig c;
            c.addrs = addrs[i];
            q[i] = std::move(ring::SplitDriverQueue::create(table, c).value());
        }
    }
    static uint64_t uva(GuestAddr g) { return kUva + (g.value - kGpa); }
    OneRegion mem_table(uint64_t uva_base = kUva) const {
        OneRegion t;
        t.r = MemRegion{kGpa, region.size(), uva_base, 0};
        return t;
    }
    VringAddr vring_addr(uint32_t i) const {
        VringAddr a;
        a.index = i;
        a.desc_user_addr = uva(addrs[i].desc);
        a.avail_user_addr = uva(addrs[i].avail);
        a.used_user_addr = uva(addrs[i].used);
        return a;
    }
    std::byte* host(uint64_t gpa) const { return region.host() + (gpa - kGpa); }
};

/// Device, port pair and server.
struct Bed {
    std::unique_ptr<port::PeerPort> dev_port, far;
    std::unique_ptr<backend::VhostNet<port::PeerPort>> dev;
    std::unique_ptr<Server> server;
    ServerConfig cfg;

    explicit Bed(const char* tag, uint32_t stall_ms = 200) {
        auto pp = port::PeerPort::create_pair({}, {});
        dev_port = std::move(pp->first);
        far = std::move(pp->second);
        port::PeerPort* ports[] = {dev_port.get()};
        dev = std::move(backend::VhostNet<port::PeerPort>::create(
                            backend::VhostNetOptions{}, std::span<port::PeerPort* const>(ports))
                            .value());
        dev->start();
        cfg.path = socket_path(tag);
        cfg.stall_ms = stall_ms;
        cfg.max_mtu = 9000;
        auto s = Server::create(cfg, *dev);
        EXPECT_TRUE(s) << (s ? "" : s.error());
        server = std::move(s.value());
        server->start();
    }
    ~Bed() {
        server->stop();
        dev->stop();
    }
    const SessionStats& st() const { return server->stats(); }
};

constexpr uint64_t kFeatures =
    virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) | bit(kFProtocolFeatures);

/// Features and protocol features (REPLY_ACK) negotiated.
void negotiate(FrontEnd& fe) {
    const auto offered = fe.get(Request::GetFeatures);
    ASSERT_TRUE(offered);
    EXPECT_EQ(*offered & virtio::feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ), 0u);
    EXPECT_EQ(*offered & virtio::feature_mask(virtio::VIRTIO_NET_F_NOTF_COAL), 0u);
    ASSERT_NE(*offered & bit(kFProtocolFeatures), 0u);
    ASSERT_TRUE(fe.msg(Request::SetFeatures, kFeatures, {}, false));
    const auto proto = fe.get(Request::GetProtocolFeatures);
    ASSERT_TRUE(proto);
    EXPECT_EQ(*proto, kBackendProtocolFeatures);
    ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, *proto, {}, false));
    EXPECT_EQ(fe.get(Request::GetQueueNum), 1u);
}

/// QEMU's order: features, owner, memory, then per vring num, base, addr,
/// kick, call, enable; every request acked.
void full_setup(FrontEnd& fe, Guest& g) {
    negotiate(fe);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(fe.ack(Request::SetVringNum, vs(i, kRingSize)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringBase, vs(i, 0)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(i)), 0u);
        const int k = g.kick[i].fd(), c = g.call[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{i}, std::span(&c, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(i, 1)), 0u);
    }
}

/// One frame each way through the device: guest tx → far end, far end → guest rx.
void packets_flow(Bed& b, Guest& g, uint64_t seq) {
    const uint32_t len = kHdr + 60;
    const uint64_t tx_gpa = kDataGpa + (seq % 64) * 2048;
    const uint64_t rx_gpa = kDataGpa + 64 * 2048 + (seq % 64) * 2048;
    std::memset(g.host(tx_gpa), 0, len);
    std::memcpy(g.host(tx_gpa) + kHdr, &seq, sizeof seq);
    const ring::Buf out{GuestAddr(tx_gpa), len};
    ASSERT_EQ(g.q[1]->add(std::span(&out, 1), {}, seq), ring::AddStatus::Ok);
    g.q[1]->publish();
    g.kick[1].signal();
    std::vector<std::byte> got(4096);
    uint32_t n = 0;
    ASSERT_TRUE(wait_until([&] {
        if (!b.far->rx_pending()) return false;
        const iovec v{got.data(), got.size()};
        n = b.far->recv(std::span(&v, 1));
        return true;
    }));
    ASSERT_EQ(n, len);
    uint64_t back = 0;
    std::memcpy(&back, got.data() + kHdr, sizeof back);
    EXPECT_EQ(back, seq);
    ring::UsedBuf u;
    ASSERT_TRUE(wait_until([&] { return g.q[1]->get_used(u); }));
    EXPECT_EQ(u.token, seq);

    const ring::Buf in{GuestAddr(rx_gpa), 2048};
    ASSERT_EQ(g.q[0]->add({}, std::span(&in, 1), seq), ring::AddStatus::Ok);
    g.q[0]->publish();
    g.kick[0].signal();
    const iovec v{got.data(), len};
    ASSERT_EQ(b.far->send(std::span(&v, 1), len), port::SendResult::Sent);
    ASSERT_TRUE(wait_until([&] { return g.q[0]->get_used(u); }));
    EXPECT_EQ(u.token, seq);
    EXPECT_EQ(u.len, len);
    std::memcpy(&back, g.host(rx_gpa) + kHdr, sizeof back);
    EXPECT_EQ(back, seq);
}

/// A new front-end with new rings gets a working device after whatever the last one did.
void fresh_setup_works(Bed& b) {
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    const uint64_t conns = b.st().connections.get();
    FrontEnd fe(b.cfg.path);
    ASSERT_TRUE(fe.connected());
    Guest g;
    full_setup(fe, g);
    EXPECT_EQ(b.st().connections.get(), conns + 1);
    packets_flow(b, g, 1);
    packets_flow(b, g, 2);
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
    // Without REPLY_ACK a refused request closes the connection.
    ASSERT_TRUE(fe.msg(Request::NetSetMtu, uint64_t{10}, {}, true));
    EXPECT_TRUE(fe.closed_by_peer());
    EXPECT_EQ(b.st().bad_payload.get(), 1u);
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
    const int maps_before = count_maps();
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
    EXPECT_EQ(count_maps(), maps_before);
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

}  // namespace
}  // namespace pvnet::vhost_user
