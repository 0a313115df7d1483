// PeerPort: frames cross intact (bytes compared, gathered and scattered),
// bad headers are dropped per reason and never forwarded, a full queue is a
// Retry (no drop) after which the same packet crosses, a short receive
// buffer is a counted drop, delivered + drops == sent, peek_len() tells the
// next frame's length, the rx_fd wakes the reader, and two threads move 1M
// frames in order, none lost.
#include "pvnet/port/peer_port.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace pvnet::port {
namespace {

namespace v = virtio;
using net::HdrError;
constexpr uint32_t kHdr = PeerPort::kHdrBytes;

PeerPort::Pair make_pair(uint32_t arena_bytes = 1u << 20,
                         net::Offloads off = net::Offloads::all()) {
    PeerPortConfig cfg;
    cfg.arena_bytes = arena_bytes;
    cfg.tx_offloads = off;
    auto r = PeerPort::create_pair(cfg, cfg);
    EXPECT_TRUE(r.has_value());
    return std::move(r.value());
}

/// hdr + frame: `frame_bytes` of a pattern led by `seq`, behind header `h`.
std::vector<std::byte> packet(uint64_t seq, uint32_t frame_bytes, v::virtio_net_hdr h = {}) {
    std::vector<std::byte> p(kHdr + frame_bytes);
    std::memcpy(p.data(), &h, kHdr);
    for (uint32_t i = 0; i < frame_bytes; ++i) {
        p[kHdr + i] = std::byte{static_cast<uint8_t>(seq * 7 + i)};
    }
    if (frame_bytes >= 8) std::memcpy(p.data() + kHdr, &seq, sizeof seq);
    return p;
}

/// `p` cut into pieces of `piece` bytes (the last one shorter).
std::vector<iovec> pieces(std::vector<std::byte>& p, std::size_t piece) {
    std::vector<iovec> v;
    for (std::size_t at = 0; at < p.size(); at += piece) {
        v.push_back(iovec{p.data() + at, std::min(piece, p.size() - at)});
    }
    return v;
}

SendResult send_res(PeerPort& port, std::vector<std::byte>& p, std::size_t piece = SIZE_MAX) {
    const auto iov = pieces(p, piece);
    return port.send(iov, static_cast<uint32_t>(p.size()));
}

bool send_all(PeerPort& port, std::vector<std::byte>& p, std::size_t piece = SIZE_MAX) {
    return send_res(port, p, piece) == SendResult::Sent;
}

/// The header PeerPort delivers for a plain frame: zeroed, one buffer.
v::virtio_net_hdr delivered_plain() {
    v::virtio_net_hdr h{};
    h.num_buffers.set(1);
    return h;
}

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

TEST(PeerPortCreate, RejectsBadArenaSize) {
    PeerPortConfig good, small, odd;
    small.arena_bytes = PeerPort::kMinArenaBytes / 2;
    odd.arena_bytes = PeerPort::kMinArenaBytes + 8;
    EXPECT_TRUE(PeerPort::create_pair(good, good).has_value());
    EXPECT_EQ(PeerPort::create_pair(small, good).error(), PortError::BadArenaSize);
    EXPECT_EQ(PeerPort::create_pair(good, odd).error(), PortError::BadArenaSize);
}

TEST(PeerPort, GoodFramesCrossIntactBothWays) {
    auto [a, b] = make_pair();
    for (PeerPort* from : {a.get(), b.get()}) {
        PeerPort* to = from == a.get() ? b.get() : a.get();
        auto p = packet(42, 1514);
        EXPECT_FALSE(to->rx_pending());
        ASSERT_TRUE(send_all(*from, p, 5));  // header split over three iovecs
        ASSERT_TRUE(to->rx_pending());
        std::vector<std::byte> got(4096);
        const iovec dst{got.data(), got.size()};
        ASSERT_EQ(to->recv({&dst, 1}), p.size());
        const v::virtio_net_hdr want = delivered_plain();
        EXPECT_EQ(std::memcmp(got.data(), &want, kHdr), 0);
        EXPECT_EQ(std::memcmp(got.data() + kHdr, p.data() + kHdr, 1514), 0);
        EXPECT_FALSE(to->rx_pending());
        EXPECT_EQ(from->stats.tx_pkts.get(), 1u);
        EXPECT_EQ(from->stats.tx_bytes.get(), p.size());
        EXPECT_EQ(to->stats.rx_pkts.get(), 1u);
        EXPECT_EQ(to->stats.rx_bytes.get(), p.size());
    }
}

TEST(PeerPort, GsoFrameOf64KiBIsGatheredAndScattered) {
    auto [a, b] = make_pair();
    v::virtio_net_hdr h{};
    h.flags = v::VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h.gso_type = v::VIRTIO_NET_HDR_GSO_TCPV4;
    h.hdr_len.set(54);
    h.gso_size.set(1448);
    h.csum_start.set(34);
    h.csum_offset.set(16);
    auto p = packet(7, PeerPort::kMaxFrameBytes, h);
    ASSERT_TRUE(send_all(*a, p, 4096));
    std::vector<std::byte> got(p.size());
    const auto dst = pieces(got, 4000);  // scattered over 17 guest buffers
    ASSERT_EQ(b->recv(dst), p.size());
    v::virtio_net_hdr want = h;
    want.num_buffers.set(1);
    EXPECT_EQ(std::memcmp(got.data(), &want, kHdr), 0);
    EXPECT_EQ(std::memcmp(got.data() + kHdr, p.data() + kHdr, p.size() - kHdr), 0);
}

struct BadHdr {
    const char* name;
    v::virtio_net_hdr h;
    HdrError why;
};

v::virtio_net_hdr hdr(uint8_t flags, uint8_t gso, uint16_t hdr_len, uint16_t gso_size,
                      uint16_t start, uint16_t off) {
    v::virtio_net_hdr h{};
    h.flags = flags;
    h.gso_type = gso;
    h.hdr_len.set(hdr_len);
    h.gso_size.set(gso_size);
    h.csum_start.set(start);
    h.csum_offset.set(off);
    return h;
}

TEST(PeerPort, BadHeadersAreDroppedAndCountedPerReason) {
    constexpr uint8_t C = v::VIRTIO_NET_HDR_F_NEEDS_CSUM;
    const std::vector<BadHdr> bad = {
        {"unknown flag", hdr(0x10, 0, 0, 0, 0, 0), HdrError::UnknownFlag},
        {"data_valid", hdr(v::VIRTIO_NET_HDR_F_DATA_VALID, 0, 0, 0, 0, 0), HdrError::FlagNotForTx},
        {"gso type", hdr(C, 2, 54, 1448, 34, 16), HdrError::BadGsoType},
        {"ecn on udp", hdr(C, 0x80 | 5, 42, 1448, 34, 6), HdrError::EcnWithoutTcp},
        {"tso6 not negotiated", hdr(C, 4, 74, 1448, 54, 16), HdrError::GsoNotNegotiated},
        {"gso_size 0", hdr(C, 1, 54, 0, 34, 16), HdrError::GsoSizeZero},
        {"csum start", hdr(C, 0, 0, 0, 10, 16), HdrError::CsumStartBeforeL4},
        {"csum offset", hdr(C, 1, 54, 1448, 34, 4), HdrError::CsumOffsetNotL4},
        {"hdr_len", hdr(0, 0, 3000, 0, 0, 0), HdrError::HdrLenBeyondFrame},
        {"uso without csum", hdr(0, 5, 42, 1448, 0, 0), HdrError::UsoWithoutCsum},
    };
    net::Offloads no_tso6 = net::Offloads::all();
    no_tso6.tso6 = false;
    auto [a, b] = make_pair(1u << 20, no_tso6);
    for (const BadHdr& c : bad) {
        const uint64_t before = a->stats.tx_drop_bad_hdr.get(c.why);
        auto p = packet(1, 2950, c.h);
        EXPECT_EQ(send_res(*a, p), SendResult::Dropped) << c.name;
        EXPECT_EQ(a->stats.tx_drop_bad_hdr.get(c.why), before + 1) << c.name;
        EXPECT_FALSE(b->rx_pending()) << c.name << " was forwarded";
    }
    EXPECT_EQ(a->stats.tx_drop_bad_hdr.total(), bad.size());
    EXPECT_EQ(a->stats.tx_pkts.get(), bad.size());
    EXPECT_EQ(a->stats.tx_bytes.get(), 0u);
    // The same frame behind a good header crosses.
    auto good = packet(2, 2950);
    EXPECT_TRUE(send_all(*a, good));
}

TEST(PeerPort, ShortAndOversizePacketsAreDropped) {
    auto [a, b] = make_pair();
    auto p = packet(1, 100);
    const iovec whole{p.data(), p.size()};
    EXPECT_EQ(a->send({&whole, 1}, kHdr - 1), SendResult::Dropped);  // shorter than the header
    const iovec cut{p.data(), 50};
    EXPECT_EQ(a->send({&cut, 1}, 112), SendResult::Dropped);  // iovecs short of len
    EXPECT_EQ(a->send({}, kHdr), SendResult::Dropped);        // no iovecs at all
    EXPECT_EQ(a->stats.tx_drop_short.get(), 3u);
    auto big = packet(2, PeerPort::kMaxFrameBytes + 1);
    EXPECT_EQ(send_res(*a, big), SendResult::Dropped);
    EXPECT_EQ(a->stats.tx_drop_oversize.get(), 1u);
    EXPECT_FALSE(b->rx_pending());
    EXPECT_EQ(a->stats.tx_drops(), a->stats.tx_pkts.get());
}

TEST(PeerPort, QueueFullIsRetryAndTheSamePacketCrossesOnceDrained) {
    auto [a, b] = make_pair(PeerPort::kMinArenaBytes);
    uint64_t queued = 0;
    auto p = packet(0, 1514);
    for (;;) {
        p = packet(queued, 1514);
        const SendResult r = send_res(*a, p);
        if (r == SendResult::Retry) break;
        ASSERT_EQ(r, SendResult::Sent);
        ASSERT_LT(++queued, 1000u) << "a 256 KiB queue never filled";
    }
    EXPECT_EQ(send_res(*a, p), SendResult::Retry) << "still full";
    // Not taken: no drop, not in tx_pkts; each Retry counted as one.
    EXPECT_EQ(a->stats.tx_drops(), 0u);
    EXPECT_EQ(a->stats.tx_pkts.get(), queued);
    EXPECT_EQ(a->stats.tx_retry_queue_full.get(), 2u);
    std::vector<std::byte> got(2048);
    const iovec dst{got.data(), got.size()};
    ASSERT_EQ(b->recv({&dst, 1}), kHdr + 1514);  // one frame's room
    ASSERT_EQ(send_res(*a, p), SendResult::Sent) << "the packet that said Retry";
    uint64_t seq = 1;
    while (b->rx_pending()) {
        ASSERT_EQ(b->recv({&dst, 1}), kHdr + 1514);
        uint64_t s;
        std::memcpy(&s, got.data() + kHdr, sizeof s);
        EXPECT_EQ(s, seq++);  // in order, the retried one last
    }
    EXPECT_EQ(seq, queued + 1);
    EXPECT_EQ(a->stats.tx_pkts.get(), b->stats.rx_pkts.get() + a->stats.tx_drops());
    auto largest = packet(9999, PeerPort::kMaxFrameBytes);  // the largest frame fits an empty queue
    EXPECT_EQ(send_res(*a, largest), SendResult::Sent);
}

TEST(PeerPort, AnyFrameThatPassesTheChecksFitsAnEmptyQueueAtEveryOffset) {
    // So a Retry always ends once the reader drains: walk the tail over the
    // arena with odd sizes, draining, and offer the largest frame each time.
    auto [a, b] = make_pair(PeerPort::kMinArenaBytes);
    std::vector<std::byte> got(PeerPort::kMaxFrameBytes + kHdr);
    const iovec dst{got.data(), got.size()};
    auto largest = packet(1, PeerPort::kMaxFrameBytes);
    for (uint32_t step = 0; step < 64; ++step) {
        auto filler = packet(step, 60 + step * 997 % 30000);
        ASSERT_EQ(send_res(*a, filler), SendResult::Sent);
        ASSERT_NE(b->recv({&dst, 1}), 0u);
        ASSERT_EQ(send_res(*a, largest), SendResult::Sent) << "step " << step;
        ASSERT_EQ(b->recv({&dst, 1}), largest.size());
    }
    EXPECT_EQ(a->stats.tx_retry_queue_full.get(), 0u);
}

TEST(PeerPort, ShortReceiveBufferIsACountedDropAndTheNextFrameStillCrosses) {
    auto [a, b] = make_pair();
    auto p1 = packet(1, 1000);
    auto p2 = packet(2, 60);
    ASSERT_TRUE(send_all(*a, p1));
    ASSERT_TRUE(send_all(*a, p2));
    std::vector<std::byte> got(200);
    const iovec dst{got.data(), got.size()};
    EXPECT_EQ(b->recv({&dst, 1}), 0u);
    EXPECT_EQ(b->stats.rx_drop_no_room.get(), 1u);
    ASSERT_EQ(b->recv({&dst, 1}), p2.size());
    EXPECT_EQ(std::memcmp(got.data() + kHdr, p2.data() + kHdr, 60), 0);
    EXPECT_EQ(a->stats.tx_pkts.get(),
              b->stats.rx_pkts.get() + a->stats.tx_drops() + b->stats.rx_drop_no_room.get());
    EXPECT_EQ(b->recv({&dst, 1}), 0u);  // empty: nothing, and no drop counted
    EXPECT_EQ(b->stats.rx_drop_no_room.get(), 1u);
}

TEST(PeerPort, PeekLenTellsTheNextFramesLengthAcrossTheWrap) {
    auto [a, b] = make_pair(PeerPort::kMinArenaBytes);
    EXPECT_EQ(b->peek_len(), 0u);
    std::vector<std::byte> got(PeerPort::kMaxFrameBytes + kHdr);
    const iovec dst{got.data(), got.size()};
    for (uint64_t seq = 0; seq < 200; ++seq) {
        auto p = packet(seq, static_cast<uint32_t>(60 + (seq * 7919) % 40000));
        ASSERT_TRUE(send_all(*a, p));
        ASSERT_EQ(b->peek_len(), p.size()) << seq;
        ASSERT_EQ(b->peek_len(), p.size()) << "peeking takes nothing";
        ASSERT_EQ(b->recv({&dst, 1}), p.size());
        EXPECT_EQ(b->peek_len(), 0u);
    }
}

TEST(PeerPort, WrapsAroundTheArenaManyTimesWithBytesIntact) {
    auto [a, b] = make_pair(PeerPort::kMinArenaBytes);
    std::vector<std::byte> got(PeerPort::kMaxFrameBytes + kHdr);
    const auto dst = pieces(got, 1500);
    uint64_t bytes = 0;
    for (uint64_t seq = 0; seq < 3000; ++seq) {
        const auto frame = static_cast<uint32_t>(14 + (seq * 7919) % 20000);
        auto p = packet(seq, frame);
        ASSERT_TRUE(send_all(*a, p, 1 + seq % 700));
        if (seq % 3 == 2) continue;  // let a few queue up
        while (b->rx_pending()) ASSERT_NE(b->recv(dst), 0u);
        bytes += frame;
    }
    while (b->rx_pending()) ASSERT_NE(b->recv(dst), 0u);
    EXPECT_GT(bytes, 10u * PeerPort::kMinArenaBytes);
    EXPECT_EQ(b->stats.rx_pkts.get(), 3000u);
    // The last frame, checked byte for byte after all the wrapping.
    auto last = packet(3000, 777);
    ASSERT_TRUE(send_all(*a, last, 100));
    ASSERT_EQ(b->recv(dst), last.size());
    EXPECT_EQ(std::memcmp(got.data() + kHdr, last.data() + kHdr, 777), 0);
}

TEST(PeerPort, RxFdIsSignalledWhenTheQueueGoesNonEmpty) {
    auto [a, b] = make_pair();
    EXPECT_FALSE(b->rx_pending());  // arms
    EXPECT_FALSE(readable(b->rx_fd()));
    auto p = packet(1, 60);
    ASSERT_TRUE(send_all(*a, p));
    EXPECT_TRUE(readable(b->rx_fd()));
    ASSERT_TRUE(send_all(*a, p));  // already signalled: no second signal needed
    std::vector<std::byte> got(200);
    const iovec dst{got.data(), got.size()};
    while (b->rx_pending()) ASSERT_EQ(b->recv({&dst, 1}), p.size());
    EXPECT_FALSE(readable(b->rx_fd()));  // found empty: the stale signal is consumed
    ASSERT_TRUE(send_all(*a, p));
    EXPECT_TRUE(readable(b->rx_fd()));
    EXPECT_FALSE(readable(a->rx_fd()));
}

// Two threads, as two VhostNet workers would use the pair: 1M frames of
// varying size, sequence and payload checked. A full queue says Retry and
// the sender offers the same packet again, as the device does: nothing is
// lost, every frame arrives in order, and no drop is counted.
TEST(PeerPortTwoThread, MovesOneMillionFramesInOrderRetryingWhenFull) {
    // Sanitizers slow this ~10x (ASan) to ~50x (TSan): fewer frames there,
    // still far more than the arena holds, so the queue fills and wraps
    // thousands of times.
#if defined(__SANITIZE_THREAD__)
    constexpr uint64_t kFrames = 50'000;
#elif defined(__SANITIZE_ADDRESS__)
    constexpr uint64_t kFrames = 200'000;
#else
    constexpr uint64_t kFrames = 1'000'000;
#endif
    auto [a, b] = make_pair(PeerPort::kMinArenaBytes);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::atomic<bool> done{false}, timed_out{false};
    uint64_t delivered = 0, bad = 0, retries = 0;

    std::thread rx([&] {
        std::vector<std::byte> got(4096);
        const iovec dst{got.data(), got.size()};
        for (;;) {
            if (!b->rx_pending()) {
                if (done.load(std::memory_order_acquire) && !b->rx_pending()) break;
                if (std::chrono::steady_clock::now() > deadline) {
                    timed_out = true;
                    break;
                }
                pollfd pfd{b->rx_fd(), POLLIN, 0};
                (void)::poll(&pfd, 1, 10);  // bounded: a lost wakeup costs 10 ms, not a hang
                continue;
            }
            const uint32_t n = b->recv({&dst, 1});
            uint64_t seq;
            std::memcpy(&seq, got.data() + kHdr, sizeof seq);
            const auto frame = static_cast<uint32_t>(60 + seq % 1455);
            if (seq != delivered || n != kHdr + frame ||
                got[kHdr + frame - 1] != std::byte{static_cast<uint8_t>(seq * 7 + frame - 1)}) {
                ++bad;
            }
            ++delivered;
        }
    });
    std::thread tx([&] {
        for (uint64_t seq = 0; seq < kFrames && !timed_out; ++seq) {
            auto p = packet(seq, static_cast<uint32_t>(60 + seq % 1455));
            SendResult r;
            while ((r = send_res(*a, p)) == SendResult::Retry) {
                ++retries;
                std::this_thread::yield();  // let the reader make room
                if (std::chrono::steady_clock::now() > deadline) {
                    timed_out = true;
                    break;
                }
            }
            if (r != SendResult::Sent && !timed_out) ++bad;
        }
        done.store(true, std::memory_order_release);
    });
    tx.join();
    rx.join();
    ASSERT_FALSE(timed_out.load());
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(delivered, kFrames);
    EXPECT_EQ(a->stats.tx_pkts.get(), kFrames);
    EXPECT_EQ(b->stats.rx_pkts.get(), kFrames);
    EXPECT_EQ(a->stats.tx_drops(), 0u);
    EXPECT_EQ(a->stats.tx_retry_queue_full.get(), retries);
}

}  // namespace
}  // namespace pvnet::port
