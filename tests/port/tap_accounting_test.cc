// TapPort's counters against what the kernel did (issue 9 f): a frame read
// into less room than the header is consumed and counted, not left queued;
// EINTR is retried, never counted; a write that finds no room in the kernel
// is a Retry (tx_retry), not a drop, and tx_fd() turns writable when room
// comes back; send_batch stops at that frame and writes nothing after it;
// max_frame_bytes() follows the link's MTU; and after a run every frame is
// delivered or counted. Needs root, as tap_port_test.cc.
//
// Back-pressure on this kernel: a tap write fails with EAGAIN only while the
// frames it wrote before are still charged to its socket (TUNSETSNDBUF) —
// the IP stack and tun's own egress orphan them at once, a queue past a
// bridge port does not. So the tap joins a bridge whose other port, a veth,
// holds frames in a 1 kbit/s tbf qdisc; deleting the qdisc frees them.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pvnet/port/tap_port.h"
#include "pvnet/virtio/virtio_config.h"
#include "tap_test_util.h"

// readv/writev interposed for the whole test binary (the definitions in the
// executable win over libc's, and TapPort's calls bind to them): a call on
// the armed fd fails with EINTR while the armed count lasts, as if a signal
// without SA_RESTART had come first. Unarmed, they are libc's.
namespace {
std::atomic<int> g_eintr_fd{-1};
std::atomic<int> g_eintr_reads{0};
std::atomic<int> g_eintr_writes{0};

bool take_eintr(int fd, std::atomic<int>& left) {
    if (fd != g_eintr_fd.load() || left.load() <= 0) return false;
    left.fetch_sub(1);
    errno = EINTR;
    return true;
}

using IovCall = ssize_t (*)(int, const iovec*, int);
IovCall next_symbol(const char* name) { return reinterpret_cast<IovCall>(dlsym(RTLD_NEXT, name)); }
}  // namespace

extern "C" ssize_t readv(int fd, const iovec* iov, int n) {
    static const IovCall real = next_symbol("readv");
    if (take_eintr(fd, g_eintr_reads)) return -1;
    return real(fd, iov, n);
}

extern "C" ssize_t writev(int fd, const iovec* iov, int n) {
    static const IovCall real = next_symbol("writev");
    if (take_eintr(fd, g_eintr_writes)) return -1;
    return real(fd, iov, n);
}

namespace pvnet::port {
namespace {

using namespace tap_test;

TEST(TapWriteVerdict, RetryOnlyWhenNothingWasWrittenForWantOfRoom) {
    for (const int err : {EAGAIN, EWOULDBLOCK, ENOBUFS, EINTR}) {
        EXPECT_EQ(tap_write_verdict(err), SendResult::Retry) << err;
    }
    for (const int err : {EINVAL, EIO, EFAULT, EBADFD, ENOMEM, EMSGSIZE}) {
        EXPECT_EQ(tap_write_verdict(err), SendResult::Dropped) << err;
    }
    EXPECT_EQ(tap_errno_reason(EINVAL), TapErrno::Inval);
    EXPECT_EQ(tap_errno_reason(EIO), TapErrno::Io);
    EXPECT_EQ(tap_errno_reason(EBADFD), TapErrno::Other);
}

/// The first payload byte of a UdpSource datagram read into `buf`.
constexpr std::size_t kTagAt = kHdr + 14 + 20 + 8;

/// A UDP socket in the namespace sending to 192.0.2.1:9, our side of the tap
/// (a permanent neighbour: no ARP), so the kernel hands the tap one frame
/// per datagram, told apart by its first payload byte.
struct UdpSource {
    int fd = -1;
    explicit UdpSource(const std::string& ns) {
        auto r = udp_socket_in(ns, kSrcIp, kUdpDstPort, UdpEnd::Connect);
        EXPECT_TRUE(r.has_value()) << to_string(r.error());
        if (r) fd = *r;
    }
    ~UdpSource() {
        if (fd >= 0) ::close(fd);
    }
    bool send(uint8_t tag, std::size_t bytes = 100) const {
        std::vector<uint8_t> payload(bytes, tag);
        return ::send(fd, payload.data(), payload.size(), 0) == static_cast<ssize_t>(bytes);
    }
};

bool await_readable(const TapPort& tap, int ms = 2000) {
    pollfd p{tap.rx_fd(), POLLIN, 0};
    return ::poll(&p, 1, ms) == 1;
}

/// Reads until nothing waits (frames from the link coming up).
void drain(TapPort& tap) {
    Frame buf(2048);
    const iovec big{buf.data(), buf.size()};
    for (int i = 0; i < 100 && tap.rx_pending(); ++i) (void)tap.recv({&big, 1});
}

TEST_F(TapRootTest, RecvIntoLessRoomThanTheHeaderConsumesTheFrameAndCountsIt) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    drain(**tap);
    const uint64_t drops = (*tap)->rx_drops(), pkts = (*tap)->rx_pkts.get();
    UdpSource src(ns_->name());
    ASSERT_TRUE(src.send('A'));
    ASSERT_TRUE(src.send('B'));
    ASSERT_TRUE(await_readable(**tap));

    std::array<std::byte, 8> small;
    small.fill(std::byte{0xee});
    const iovec eight{small.data(), small.size()};
    EXPECT_EQ((*tap)->recv({&eight, 1}), 0u);
    EXPECT_EQ((*tap)->rx_drop_truncated.get(), 1u);
    EXPECT_EQ((*tap)->rx_drops(), drops + 1);
    for (const std::byte b : small) EXPECT_EQ(b, std::byte{0xee}) << "the guest's bytes untouched";

    // The next frame is B: A was taken off the queue, not left at its head.
    ASSERT_TRUE(await_readable(**tap));
    Frame buf(2048);
    const iovec big{buf.data(), buf.size()};
    ASSERT_EQ((*tap)->recv({&big, 1}), kHdr + 14 + 20 + 8 + 100);
    EXPECT_EQ(std::to_integer<char>(buf[kTagAt]), 'B');
    EXPECT_EQ((*tap)->rx_pkts.get(), pkts + 1);

    // Nothing waits now: the same small read drops nothing.
    EXPECT_FALSE((*tap)->rx_pending());
    const uint64_t empty = (*tap)->rx_empty.get();
    EXPECT_EQ((*tap)->recv({&eight, 1}), 0u);
    EXPECT_EQ((*tap)->rx_empty.get(), empty + 1);
    EXPECT_EQ((*tap)->rx_drops(), drops + 1);
}

TEST_F(TapRootTest, EveryFrameReadIsDeliveredOrCountedOnce) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    drain(**tap);
    const uint64_t base = (*tap)->rx_pkts.get() + (*tap)->rx_drops();
    constexpr int kFrames = 12;
    UdpSource src(ns_->name());
    for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(src.send(static_cast<uint8_t>('a' + i)));

    // Rooms in turn: less than the header, less than the frame, enough.
    Frame buf(2048);
    const std::array<std::size_t, 3> rooms{8, kHdr + 40, buf.size()};
    uint64_t delivered = 0;
    for (int i = 0; i < 3 * kFrames; ++i) {
        if ((*tap)->rx_pkts.get() + (*tap)->rx_drops() - base == kFrames) break;
        ASSERT_TRUE(await_readable(**tap)) << "frame " << i << " never came";
        const iovec dst{buf.data(), rooms[static_cast<std::size_t>(i) % rooms.size()]};
        if ((*tap)->recv({&dst, 1}) != 0) {
            // Each delivered frame is the next one sent after two dropped.
            EXPECT_EQ(std::to_integer<int>(buf[kTagAt]), 'a' + i) << i;
            ++delivered;
        }
    }
    EXPECT_FALSE((*tap)->rx_pending()) << "a frame was left behind";
    EXPECT_EQ(delivered, kFrames / 3u);
    EXPECT_EQ((*tap)->rx_pkts.get() + (*tap)->rx_drops() - base, uint64_t{kFrames});
    EXPECT_EQ((*tap)->rx_drop_truncated.get(), 2u * kFrames / 3u);
}

TEST_F(TapRootTest, InterruptedReadsAndWritesAreRetriedNotCounted) {
    auto tap = TapPort::open(config("pvt0"));
    ASSERT_TRUE(tap.has_value()) << to_string(tap.error());
    address("pvt0");
    drain(**tap);
    const uint64_t rx_drops = (*tap)->rx_drops(), rx_pkts = (*tap)->rx_pkts.get();
    UdpSource src(ns_->name());
    ASSERT_TRUE(src.send('X'));
    ASSERT_TRUE(await_readable(**tap));
    Frame buf(2048);
    const iovec big{buf.data(), buf.size()};
    g_eintr_fd = (*tap)->rx_fd();
    g_eintr_reads = 2;
    const uint32_t n = (*tap)->recv({&big, 1});
    g_eintr_fd = -1;
    EXPECT_EQ(g_eintr_reads.load(), 0) << "readv was not called through the interposer";
    ASSERT_EQ(n, kHdr + 14 + 20 + 8 + 100);
    EXPECT_EQ(std::to_integer<char>(buf[kTagAt]), 'X');
    EXPECT_EQ((*tap)->rx_pkts.get(), rx_pkts + 1);
    EXPECT_EQ((*tap)->rx_drops(), rx_drops);

    Frame req = arp_request();
    g_eintr_fd = (*tap)->tx_fd();
    g_eintr_writes = 3;
    const bool sent = send_split(**tap, req);
    g_eintr_fd = -1;
    EXPECT_EQ(g_eintr_writes.load(), 0) << "writev was not called through the interposer";
    EXPECT_TRUE(sent);
    EXPECT_EQ((*tap)->tx_pkts.get(), 1u);
    EXPECT_EQ((*tap)->tx_drops(), 0u);
    EXPECT_EQ((*tap)->tx_retry.get(), 0u);
    EXPECT_TRUE(await_arp_reply(**tap).has_value()) << "the retried write reached the kernel";
}

/// hdr + a 64-byte frame to an unknown unicast MAC with the local
/// experimental EtherType 0x88b5: a bridge floods it, nothing else parses it.
Frame raw_frame(uint64_t seq) {
    Frame f(kHdr + 64);
    auto* e = reinterpret_cast<uint8_t*>(f.data() + kHdr);
    const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 0x09};
    std::memcpy(e, dst, 6);
    std::memcpy(e + 6, kSrcMac.data(), 6);
    e[12] = 0x88, e[13] = 0xb5;
    std::memcpy(e + 14, &seq, sizeof seq);
    return f;
}

/// A tap whose writes the kernel holds: TUNSETSNDBUF 4 KiB, the tap a port of
/// bridge br0 whose only other port's qdisc keeps what it is given.
class TapHeldTest : public TapRootTest {
protected:
    static constexpr int kSndbufBytes = 4096;

    std::unique_ptr<TapPort> open_held(uint32_t tx_batch = 0) {
        TapConfig c = config("pvt0");
        c.sndbuf_bytes = kSndbufBytes;
        c.tx_batch = tx_batch;
        auto tap = TapPort::open(c);
        EXPECT_TRUE(tap.has_value()) << to_string(tap.error());
        if (!tap) return nullptr;
        const std::vector<std::vector<std::string>> steps = {
            {"link", "add", "br0", "type", "bridge", "forward_delay", "0"},
            {"link", "add", "va", "type", "veth", "peer", "name", "vb"},
            {"link", "set", "pvt0", "master", "br0"},
            {"link", "set", "va", "master", "br0"},
            {"link", "set", "br0", "up"},
            {"link", "set", "va", "up"},
            {"link", "set", "vb", "up"},
        };
        for (const auto& s : steps) EXPECT_EQ(ns_->ip(s), 0) << s[0] << " " << s[1] << " " << s[2];
        EXPECT_EQ(tc("qdisc add dev va root tbf rate 1kbit burst 1600 limit 1000000"), 0);
        return std::move(*tap);
    }

    /// Frees what the qdisc holds (and stops holding more).
    void release() { EXPECT_EQ(tc("qdisc del dev va root"), 0); }

    int tc(const std::string& args) const {
        return std::system(("ip netns exec " + ns_->name() + " tc " + args).c_str());
    }

    /// Frames the tap took from us, by the kernel's count.
    uint64_t kernel_rx_packets() const {
        return std::stoull(run_in(ns_->name(), "cat /sys/class/net/pvt0/statistics/rx_packets"));
    }
};

bool writable(int fd, int ms) {
    pollfd p{fd, POLLOUT, 0};
    return ::poll(&p, 1, ms) == 1 && (p.revents & POLLOUT) != 0;
}

SendResult send_whole(TapPort& tap, Frame& f) {
    const iovec v{f.data(), f.size()};
    return tap.send({&v, 1}, static_cast<uint32_t>(f.size()));
}

TEST_F(TapHeldTest, WriteWithNoRoomIsRetryNotADropAndTxFdSaysWhenToTryAgain) {
    auto tap = open_held();
    ASSERT_NE(tap, nullptr);
    uint64_t sent = 0;
    Frame f = raw_frame(0);
    SendResult r = SendResult::Sent;
    while (sent < 1000 && (r = send_whole(*tap, f)) == SendResult::Sent) f = raw_frame(++sent);
    ASSERT_EQ(r, SendResult::Retry) << "1000 writes and the send buffer never filled";
    EXPECT_GT(sent, 0u);
    EXPECT_EQ(tap->tx_retry.get(), 1u);
    EXPECT_EQ(tap->tx_drops(), 0u) << "EAGAIN is back-pressure, not a drop";
    EXPECT_EQ(tap->tx_last_errno(), 0);
    EXPECT_EQ(tap->tx_pkts.get(), sent);
    EXPECT_EQ(send_whole(*tap, f), SendResult::Retry) << "still no room";
    EXPECT_EQ(tap->tx_retry.get(), 2u);
    EXPECT_FALSE(writable(tap->tx_fd(), 0));

    release();
    ASSERT_TRUE(writable(tap->tx_fd(), 2000)) << "no EPOLLOUT after the held frames went";
    EXPECT_EQ(send_whole(*tap, f), SendResult::Sent) << "the packet that said Retry";
    // Packets offered (the retried one once) = sent + dropped.
    EXPECT_EQ(sent + 1, tap->tx_pkts.get() + tap->tx_drops());
    EXPECT_EQ(kernel_rx_packets(), sent + 1);
}

/// send_batch one by one (tx_batch 0) and through linked io_uring writes
/// (tx_batch 8: several enters; the retry lands inside one of them).
class TapHeldBatchTest : public TapHeldTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(TapHeldBatchTest, SendBatchStopsAtTheFirstRetryAndWritesNothingAfterIt) {
    auto tap = open_held(GetParam());
    ASSERT_NE(tap, nullptr);
    EXPECT_EQ(tap->tx_batch_uring(), GetParam() != 0);
    constexpr std::size_t kFrames = 64;
    std::vector<Frame> frames;
    std::vector<iovec> iovs;
    std::vector<TxFrame> batch;
    frames.reserve(kFrames);
    iovs.reserve(kFrames);
    for (uint64_t seq = 0; seq < kFrames; ++seq) {
        frames.push_back(raw_frame(seq));
        iovs.push_back(iovec{frames.back().data(), frames.back().size()});
        batch.push_back({{&iovs.back(), 1}, static_cast<uint32_t>(frames.back().size())});
    }
    batch.back().len -= 1;  // a bad length: counted only once it is taken

    const SendBatchResult r = tap->send_batch(batch);
    ASSERT_TRUE(r.retry) << "64 frames and the send buffer never filled";
    ASSERT_LT(r.taken, kFrames - 1);
    EXPECT_EQ(r.sent, r.taken);
    EXPECT_EQ(tap->tx_pkts.get(), r.taken);
    EXPECT_EQ(tap->tx_retry.get(), 1u);
    EXPECT_EQ(tap->tx_drops(), 0u) << "nothing past the retry was taken, the bad length included";
    EXPECT_EQ(tap->tx_batch_ring_failed.get(), 0u);
    EXPECT_EQ(kernel_rx_packets(), r.taken) << "a frame after the retry reached the tap";

    release();
    ASSERT_TRUE(writable(tap->tx_fd(), 2000));
    const SendBatchResult rest = tap->send_batch(std::span(batch).subspan(r.taken));
    EXPECT_FALSE(rest.retry);
    EXPECT_EQ(rest.taken, kFrames - r.taken);
    EXPECT_EQ(rest.sent, kFrames - r.taken - 1);
    EXPECT_EQ(tap->tx_pkts.get() + tap->tx_drops(), kFrames);
    EXPECT_EQ(tap->tx_drop_bad_len.get(), 1u);
    EXPECT_EQ(kernel_rx_packets(), kFrames - 1);
}

INSTANTIATE_TEST_SUITE_P(Tap, TapHeldBatchTest, ::testing::Values(0u, 8u));

TEST_F(TapRootTest, MaxFrameFollowsTheLinksMtuAndOffloadsAreRecorded) {
    auto plain = TapPort::open(config("pvt0"));
    ASSERT_TRUE(plain.has_value()) << to_string(plain.error());
    EXPECT_EQ((*plain)->max_frame_bytes(), 1500u + 14 + 4);
    EXPECT_EQ((*plain)->offloads(), 0u);

    ASSERT_EQ(ns_->ip({"tuntap", "add", "dev", "pvt1", "mode", "tap", "vnet_hdr"}), 0);
    ASSERT_EQ(ns_->ip({"link", "set", "dev", "pvt1", "mtu", "9000"}), 0);
    TapConfig c = config("pvt1");
    c.offloads = kTunFCsum | kTunFTso4;
    auto jumbo = TapPort::open(c);
    ASSERT_TRUE(jumbo.has_value()) << to_string(jumbo.error());
    EXPECT_EQ((*jumbo)->max_frame_bytes(), 9000u + 14 + 4);
    EXPECT_EQ((*jumbo)->offloads(), kTunFCsum | kTunFTso4);
    // The guest's features decide from then on (TUNSETOFFLOAD): none, then CSUM + TSO6.
    ASSERT_TRUE((*jumbo)->set_guest_features(0));
    EXPECT_EQ((*jumbo)->offloads(), 0u);
    ASSERT_TRUE((*jumbo)->set_guest_features(
        virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_CSUM) |
        virtio::feature_mask(virtio::VIRTIO_NET_F_GUEST_TSO6)));
    EXPECT_EQ((*jumbo)->offloads(), kTunFCsum | kTunFTso6);
    jumbo.value().reset();

    ASSERT_EQ(ns_->ip({"link", "set", "dev", "pvt1", "mtu", "1280"}), 0);
    auto small = TapPort::open(config("pvt1"));
    ASSERT_TRUE(small.has_value()) << to_string(small.error());
    EXPECT_EQ((*small)->max_frame_bytes(), 1280u + 14 + 4);
}

}  // namespace
}  // namespace pvnet::port
