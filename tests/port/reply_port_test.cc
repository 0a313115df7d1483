// MacswapPort and IcmpEchoPort on their shared ReplyQueue: the reply bytes
// (ARP, ICMP echo with valid checksums, swapped MACs), every malformed
// frame a counted drop of its reason, the queue's bound (Retry, nothing
// counted as taken), its eventfd, and a session's end (nothing queued is
// left for the next guest).
#include <gtest/gtest.h>
#include <poll.h>

#include <array>
#include <cstring>
#include <thread>
#include <vector>

#include "pvnet/port/icmp_echo_port.h"
#include "pvnet/port/macswap_port.h"

namespace pvnet::port {
namespace {

constexpr uint32_t kHdr = 12;
using Bytes = std::vector<uint8_t>;

const IcmpEchoPort::Ipv4 kAddr{10, 0, 0, 1};
const IcmpEchoPort::Mac kMac{0x02, 0, 0, 0, 0, 0x01};
const uint8_t kGuestMac[6] = {0x52, 0x54, 0, 0x12, 0x34, 0x56};
const uint8_t kGuestIp[4] = {10, 0, 0, 2};

SendResult send(auto& p, const Bytes& b) {
    const iovec v{const_cast<uint8_t*>(b.data()), b.size()};
    return p.send(std::span<const iovec>(&v, 1), static_cast<uint32_t>(b.size()));
}
Bytes recv(auto& p, std::size_t room = 2048) {
    Bytes b(room);
    const iovec v{b.data(), b.size()};
    b.resize(p.recv(std::span<const iovec>(&v, 1)));
    return b;
}

uint16_t fold(const uint8_t* p, std::size_t n) {
    uint32_t s = 0;
    for (std::size_t i = 0; i < n; i += 2) s += (p[i] << 8) | (i + 1 < n ? p[i + 1] : 0);
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return static_cast<uint16_t>(s);
}

Bytes arp_request(const std::array<uint8_t, 4>& target, uint16_t op = 1) {
    Bytes b(kHdr, 0);
    const uint8_t eth[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0x12, 0x34, 0x56,
                           0x08, 0x06};
    b.insert(b.end(), eth, eth + 14);
    const uint8_t arp[] = {0, 1, 8, 0, 6, 4, 0, static_cast<uint8_t>(op)};
    b.insert(b.end(), arp, arp + 8);
    b.insert(b.end(), kGuestMac, kGuestMac + 6);
    b.insert(b.end(), kGuestIp, kGuestIp + 4);
    b.insert(b.end(), 6, 0);
    b.insert(b.end(), target.begin(), target.end());
    b.insert(b.end(), 18, 0);  // Ethernet padding to 60
    return b;
}

/// An echo request to `dst`, `payload` bytes, valid checksums.
Bytes echo_request(const std::array<uint8_t, 4>& dst, uint32_t payload = 56) {
    Bytes b(kHdr, 0);
    const uint8_t eth[] = {0x02, 0, 0, 0, 0, 0x01, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0x08, 0x00};
    b.insert(b.end(), eth, eth + 14);
    const uint16_t total = static_cast<uint16_t>(20 + 8 + payload);
    const uint8_t ip[] = {0x45, 0, static_cast<uint8_t>(total >> 8), static_cast<uint8_t>(total),
                          0x12, 0x34, 0x40, 0, 64, 1, 0, 0};
    b.insert(b.end(), ip, ip + 12);
    b.insert(b.end(), kGuestIp, kGuestIp + 4);
    b.insert(b.end(), dst.begin(), dst.end());
    const uint8_t icmp[] = {8, 0, 0, 0, 0xab, 0xcd, 0, 7};
    b.insert(b.end(), icmp, icmp + 8);
    for (uint32_t i = 0; i < payload; ++i) b.push_back(static_cast<uint8_t>(i * 7));
    uint8_t* iph = b.data() + kHdr + 14;
    const uint16_t ic = static_cast<uint16_t>(~fold(iph, 20));
    iph[10] = static_cast<uint8_t>(ic >> 8);
    iph[11] = static_cast<uint8_t>(ic);
    uint8_t* icm = iph + 20;
    const uint16_t cc = static_cast<uint16_t>(~fold(icm, 8 + payload));
    icm[2] = static_cast<uint8_t>(cc >> 8);
    icm[3] = static_cast<uint8_t>(cc);
    return b;
}

std::unique_ptr<IcmpEchoPort> echo_port(uint32_t slots = 256) {
    auto p = IcmpEchoPort::create(kAddr, kMac, 1518, slots);
    EXPECT_TRUE(p.has_value());
    return std::move(*p);
}

TEST(IcmpEchoPortTest, ArpRequestForUsGetsTheReplyBytes) {
    auto p = echo_port();
    ASSERT_EQ(send(*p, arp_request(kAddr)), SendResult::Sent);
    ASSERT_TRUE(p->rx_pending());
    EXPECT_EQ(p->peek_len(), kHdr + 42);
    const Bytes r = recv(*p);
    Bytes want(kHdr, 0);
    want.insert(want.end(), kGuestMac, kGuestMac + 6);
    want.insert(want.end(), kMac.begin(), kMac.end());
    const uint8_t fixed[] = {0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2};
    want.insert(want.end(), fixed, fixed + 10);
    want.insert(want.end(), kMac.begin(), kMac.end());
    want.insert(want.end(), kAddr.begin(), kAddr.end());
    want.insert(want.end(), kGuestMac, kGuestMac + 6);
    want.insert(want.end(), kGuestIp, kGuestIp + 4);
    EXPECT_EQ(r, want);
    EXPECT_EQ(p->arp_replies.get(), 1u);
    EXPECT_EQ(p->tx_pkts.get(), 1u);
    EXPECT_EQ(p->queue().stats.rx_pkts.get(), 1u);
    EXPECT_FALSE(p->rx_pending());
}

TEST(IcmpEchoPortTest, EchoRequestGetsAReplyWithValidChecksums) {
    auto p = echo_port();
    const Bytes req = echo_request(kAddr);
    ASSERT_EQ(send(*p, req), SendResult::Sent);
    const Bytes r = recv(*p);
    ASSERT_EQ(r.size(), req.size());
    const uint8_t* eth = r.data() + kHdr;
    EXPECT_EQ(std::memcmp(eth, kGuestMac, 6), 0);
    EXPECT_EQ(std::memcmp(eth + 6, kMac.data(), 6), 0);
    const uint8_t* ip = eth + 14;
    EXPECT_EQ(std::memcmp(ip + 12, kAddr.data(), 4), 0);
    EXPECT_EQ(std::memcmp(ip + 16, kGuestIp, 4), 0);
    EXPECT_EQ(fold(ip, 20), 0xffff);
    const uint8_t* ic = ip + 20;
    EXPECT_EQ(ic[0], 0);  // echo reply
    EXPECT_EQ(fold(ic, r.size() - kHdr - 34), 0xffff);
    // id, sequence and payload come back unchanged.
    EXPECT_EQ(std::memcmp(ic + 4, req.data() + kHdr + 34 + 4, r.size() - kHdr - 38), 0);
    EXPECT_EQ(p->echo_replies.get(), 1u);
}

TEST(IcmpEchoPortTest, EthernetPaddingIsTrimmedAndOddPayloadsKeepTheirChecksum) {
    auto p = echo_port();
    Bytes req = echo_request(kAddr, 3);
    req.insert(req.end(), 10, 0xee);  // padding past the IPv4 total length
    ASSERT_EQ(send(*p, req), SendResult::Sent);
    const Bytes r = recv(*p);
    ASSERT_EQ(r.size(), kHdr + 14 + 20 + 8 + 3);
    EXPECT_EQ(fold(r.data() + kHdr + 34, 11), 0xffff);
}

TEST(IcmpEchoPortTest, MalformedFramesAreCountedDropsOfTheirReason) {
    auto p = echo_port();
    auto expect_drop = [&](const Bytes& b, IcmpDrop why) {
        const uint64_t before = p->drops.get(why);
        EXPECT_EQ(send(*p, b), SendResult::Dropped) << to_string(why);
        EXPECT_EQ(p->drops.get(why), before + 1) << to_string(why);
    };
    expect_drop(Bytes(kHdr + 13, 0), IcmpDrop::Short);
    expect_drop(Bytes(kHdr + 1519, 0), IcmpDrop::Oversize);
    Bytes vlan = echo_request(kAddr);
    vlan[kHdr + 12] = 0x81;
    expect_drop(vlan, IcmpDrop::OtherEthertype);
    Bytes arp = arp_request(kAddr);
    expect_drop(Bytes(arp.begin(), arp.begin() + kHdr + 41), IcmpDrop::ArpMalformed);
    arp[kHdr + 14 + 4] = 8;  // hlen
    expect_drop(arp, IcmpDrop::ArpMalformed);
    expect_drop(arp_request(kAddr, 2), IcmpDrop::ArpNotRequest);
    expect_drop(arp_request({10, 0, 0, 9}), IcmpDrop::ArpNotForUs);

    const Bytes good = echo_request(kAddr);
    Bytes b = good;
    b[kHdr + 14] = 0x65;  // version 6
    expect_drop(b, IcmpDrop::IpMalformed);
    b = good;
    b[kHdr + 14] = 0x44;  // IHL 4
    expect_drop(b, IcmpDrop::IpMalformed);
    b = good;
    b[kHdr + 14] = 0x4f;  // IHL 15: the checksum now covers 60 bytes
    expect_drop(b, IcmpDrop::IpBadChecksum);
    b = good;
    b[kHdr + 16] = 0x05;  // total length 0x554: beyond the frame
    expect_drop(b, IcmpDrop::IpMalformed);
    b = good;
    b[kHdr + 16] = 0;
    b[kHdr + 17] = 19;  // total length below the header
    expect_drop(b, IcmpDrop::IpMalformed);
    expect_drop(Bytes(good.begin(), good.begin() + kHdr + 14 + 19), IcmpDrop::IpMalformed);
    b = good;
    b[kHdr + 14 + 8] = 63;  // TTL changed, checksum not
    expect_drop(b, IcmpDrop::IpBadChecksum);

    // Fix the IPv4 checksum after each edit so the later checks are reached.
    auto reip = [](Bytes& f) {
        uint8_t* ip = f.data() + kHdr + 14;
        ip[10] = ip[11] = 0;
        const uint16_t c = static_cast<uint16_t>(~fold(ip, 20));
        ip[10] = static_cast<uint8_t>(c >> 8);
        ip[11] = static_cast<uint8_t>(c);
    };
    b = good;
    b[kHdr + 14 + 6] = 0x20;  // MF
    reip(b);
    expect_drop(b, IcmpDrop::IpFragment);
    expect_drop(echo_request({10, 0, 0, 3}), IcmpDrop::IpNotForUs);
    b = good;
    b[kHdr + 14 + 9] = 17;
    reip(b);
    expect_drop(b, IcmpDrop::NotIcmp);
    b = good;
    b[kHdr + 17] = 27;  // 7 bytes of ICMP
    reip(b);
    expect_drop(b, IcmpDrop::IcmpMalformed);
    b = good;
    b[kHdr + 34] = 0;  // an echo reply
    expect_drop(b, IcmpDrop::IcmpNotEcho);

    EXPECT_EQ(p->tx_pkts.get(), p->drops.total());
    EXPECT_FALSE(p->rx_pending());
    EXPECT_EQ(p->queue().stats.queued.get(), 0u);
}

TEST(IcmpEchoPortTest, AFullQueueIsARetryAndDrainingMakesRoom) {
    auto p = echo_port(2);
    const Bytes req = echo_request(kAddr);
    EXPECT_EQ(send(*p, req), SendResult::Sent);
    EXPECT_EQ(send(*p, req), SendResult::Sent);
    EXPECT_EQ(send(*p, req), SendResult::Retry);
    EXPECT_EQ(p->tx_pkts.get(), 2u);
    EXPECT_EQ(p->queue().stats.retry_full.get(), 1u);
    EXPECT_EQ(recv(*p).size(), req.size());
    EXPECT_EQ(send(*p, req), SendResult::Sent);
}

TEST(MacswapPortTest, SwapsTheAddressesAndZeroesTheHeader) {
    auto p = MacswapPort::create(1518);
    ASSERT_TRUE(p.has_value());
    Bytes f(kHdr + 60);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(i + 1);
    ASSERT_EQ(send(**p, f), SendResult::Sent);
    EXPECT_EQ((*p)->peek_len(), f.size());
    const Bytes r = recv(**p);
    ASSERT_EQ(r.size(), f.size());
    EXPECT_EQ(Bytes(r.begin(), r.begin() + kHdr), Bytes(kHdr, 0));
    EXPECT_EQ(std::memcmp(r.data() + kHdr, f.data() + kHdr + 6, 6), 0);
    EXPECT_EQ(std::memcmp(r.data() + kHdr + 6, f.data() + kHdr, 6), 0);
    EXPECT_EQ(std::memcmp(r.data() + kHdr + 12, f.data() + kHdr + 12, 48), 0);
}

TEST(MacswapPortTest, FrameSpreadOverIovecsIsGathered) {
    auto p = MacswapPort::create(1518);
    ASSERT_TRUE(p.has_value());
    Bytes f(kHdr + 64);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(i);
    const iovec v[3] = {{f.data(), kHdr}, {f.data() + kHdr, 5}, {f.data() + kHdr + 5, 59}};
    ASSERT_EQ((*p)->send(std::span<const iovec>(v, 3), static_cast<uint32_t>(f.size())),
              SendResult::Sent);
    const Bytes r = recv(**p);
    ASSERT_EQ(r.size(), f.size());
    EXPECT_EQ(r[kHdr], f[kHdr + 6]);
    EXPECT_EQ(r.back(), f.back());
}

TEST(MacswapPortTest, BoundsAreDropsOrRetriesAndCounted) {
    auto p = MacswapPort::create(100, 4);
    ASSERT_TRUE(p.has_value());
    MacswapPort& m = **p;
    EXPECT_EQ(send(m, Bytes(kHdr + 13)), SendResult::Dropped);
    EXPECT_EQ(send(m, Bytes(kHdr + 101)), SendResult::Dropped);
    // iovecs shorter than len.
    Bytes f(kHdr + 60);
    const iovec v{f.data(), f.size()};
    EXPECT_EQ(m.send(std::span<const iovec>(&v, 1), static_cast<uint32_t>(f.size() + 1)),
              SendResult::Dropped);
    EXPECT_EQ(m.tx_drop_short.get(), 2u);
    EXPECT_EQ(m.tx_drop_oversize.get(), 1u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(send(m, Bytes(kHdr + 100)), SendResult::Sent);
    EXPECT_EQ(send(m, Bytes(kHdr + 100)), SendResult::Retry);
    EXPECT_EQ(m.queue().stats.retry_full.get(), 1u);
    EXPECT_EQ(m.tx_pkts.get(), 7u);
    // A frame larger than recv()'s buffers: dropped there, counted.
    EXPECT_EQ(recv(m, 50).size(), 0u);
    EXPECT_EQ(m.queue().stats.rx_drop_no_room.get(), 1u);
    EXPECT_EQ(m.queue().size(), 3u);
}

TEST(MacswapPortTest, RxFdIsReadableOnceAFrameArrivesAfterTheQueueWasFoundEmpty) {
    auto p = MacswapPort::create(1518);
    ASSERT_TRUE(p.has_value());
    MacswapPort& m = **p;
    auto readable = [&] {
        pollfd pfd{m.rx_fd(), POLLIN, 0};
        return ::poll(&pfd, 1, 0) == 1;
    };
    EXPECT_FALSE(m.rx_pending());  // arms
    EXPECT_FALSE(readable());
    ASSERT_EQ(send(m, Bytes(kHdr + 60)), SendResult::Sent);
    EXPECT_TRUE(readable());
    EXPECT_TRUE(m.rx_pending());
    EXPECT_EQ(recv(m).size(), kHdr + 60);
    EXPECT_FALSE(m.rx_pending());  // consumes the wakeup, arms again
    EXPECT_FALSE(readable());
}

bool fd_readable(int fd) {
    pollfd pfd{fd, POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 1;
}

/// Commits one frame of `len` bytes whose first byte is `tag`.
bool put(ReplyQueue& q, uint32_t len, uint8_t tag) {
    std::byte* s = q.reserve();
    if (s == nullptr) return false;
    std::memset(s, tag, len);
    q.commit(len);
    return true;
}

TEST(ReplyQueueTest, PerBurstFramesAreInvisibleUntilPublishedThenWakeTheReaderOnce) {
    auto q = ReplyQueue::create(8, 100, ReplyQueue::Publish::PerBurst);
    ASSERT_TRUE(q.has_value());
    ReplyQueue& r = **q;
    EXPECT_FALSE(r.pending());  // arms rx_fd
    for (uint8_t i = 0; i < 3; ++i) ASSERT_TRUE(put(r, 10u + i, i));
    EXPECT_FALSE(r.pending()) << "staged, not published";
    EXPECT_EQ(r.peek_len(), 0u);
    EXPECT_FALSE(fd_readable(r.rx_fd()));
    EXPECT_EQ(r.size(), 0u);
    r.publish();
    EXPECT_TRUE(fd_readable(r.rx_fd()));
    EXPECT_EQ(r.size(), 3u);
    for (uint8_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(r.pending());
        EXPECT_EQ(r.peek_len(), 10u + i);
        std::array<uint8_t, 100> b{};
        const iovec v{b.data(), b.size()};
        EXPECT_EQ(r.pop(std::span<const iovec>(&v, 1)), 10u + i);
        EXPECT_EQ(b[0], i) << "in order";
    }
    EXPECT_FALSE(r.pending());  // consumes the one wakeup, arms again
    EXPECT_FALSE(fd_readable(r.rx_fd()));
    r.publish();  // nothing staged: no wakeup
    EXPECT_FALSE(fd_readable(r.rx_fd()));
    EXPECT_EQ(r.stats.queued.get(), 3u);
    EXPECT_EQ(r.stats.rx_pkts.get(), 3u);
}

TEST(ReplyQueueTest, PerBurstBoundCountsStagedFramesAndDrainDropsThem) {
    auto q = ReplyQueue::create(4, 100, ReplyQueue::Publish::PerBurst);
    ASSERT_TRUE(q.has_value());
    ReplyQueue& r = **q;
    ASSERT_TRUE(put(r, 20, 1));
    ASSERT_TRUE(put(r, 20, 2));
    r.publish();
    ASSERT_TRUE(put(r, 20, 3));
    ASSERT_TRUE(put(r, 20, 4));
    EXPECT_FALSE(put(r, 20, 5)) << "staged frames hold their slots";
    EXPECT_EQ(r.stats.retry_full.get(), 1u);
    EXPECT_EQ(r.drain(), 4u) << "published and staged alike";
    EXPECT_EQ(r.stats.drop_session_end.get(), 4u);
    r.publish();  // what was staged is gone, never published later
    EXPECT_FALSE(r.pending());
    EXPECT_EQ(r.size(), 0u);
    ASSERT_TRUE(put(r, 30, 6));
    r.publish();
    EXPECT_EQ(r.peek_len(), 30u);
}

TEST(ReplyQueueTest, SameThreadPollPublishesEachCommitAndNeverTouchesTheFd) {
    auto q = ReplyQueue::create(4, 100, ReplyQueue::Publish::SameThreadPoll);
    ASSERT_TRUE(q.has_value());
    ReplyQueue& r = **q;
    EXPECT_FALSE(r.pending());
    ASSERT_TRUE(put(r, 40, 1));
    EXPECT_TRUE(r.pending()) << "visible at commit";
    EXPECT_EQ(r.peek_len(), 40u);
    EXPECT_FALSE(fd_readable(r.rx_fd())) << "never armed, never signalled";
    std::array<uint8_t, 100> b{};
    const iovec v{b.data(), b.size()};
    EXPECT_EQ(r.pop(std::span<const iovec>(&v, 1)), 40u);
    EXPECT_FALSE(r.pending());
    ASSERT_TRUE(put(r, 41, 2));
    EXPECT_FALSE(fd_readable(r.rx_fd()));
}

// Event mode across threads: a reader that sleeps on rx_fd() whenever
// pending() says empty is always woken by the next publish() (arm, fence,
// recheck against publish's fence, check): every frame arrives, and no
// wait runs into its (generous) timeout, which is what a lost wakeup does.
TEST(ReplyQueueTest, PerBurstPublishNeverLosesAWakeupOfASleepingReader) {
    constexpr uint32_t kFrames = 20000;
    auto q = ReplyQueue::create(64, 16, ReplyQueue::Publish::PerBurst);
    ASSERT_TRUE(q.has_value());
    ReplyQueue& r = **q;
    uint32_t got = 0;
    uint32_t timeouts = 0;
    bool in_order = true;
    std::thread reader([&] {
        std::array<uint8_t, 16> b{};
        const iovec v{b.data(), b.size()};
        while (got < kFrames && timeouts == 0) {
            if (!r.pending()) {
                pollfd pfd{r.rx_fd(), POLLIN, 0};
                if (::poll(&pfd, 1, 5000) == 0) ++timeouts;
                continue;
            }
            if (r.pop(std::span<const iovec>(&v, 1)) != 4) in_order = false;
            uint32_t seq;
            std::memcpy(&seq, b.data(), 4);
            if (seq != got) in_order = false;
            ++got;
        }
    });
    uint32_t sent = 0;
    while (sent < kFrames) {
        // Bursts of 1..7 frames, then one publish, as run_tx's flush_tx.
        const uint32_t burst = 1 + sent % 7;
        for (uint32_t k = 0; k < burst && sent < kFrames; ++k) {
            std::byte* s = r.reserve();
            if (s == nullptr) break;  // full: publish what we have, retry later
            std::memcpy(s, &sent, 4);
            r.commit(4);
            ++sent;
        }
        r.publish();
        if (sent % 64 == 0) std::this_thread::yield();  // let the reader find it empty
    }
    reader.join();
    EXPECT_EQ(timeouts, 0u) << "a wakeup was lost";
    EXPECT_EQ(got, kFrames);
    EXPECT_TRUE(in_order);
}

TEST(MacswapPortTest, PerBurstFramesWaitForFlushTx) {
    auto p = MacswapPort::create(1518, 4, ReplyQueue::Publish::PerBurst);
    ASSERT_TRUE(p.has_value());
    MacswapPort& m = **p;
    ASSERT_EQ(send(m, Bytes(kHdr + 60)), SendResult::Sent);
    ASSERT_EQ(send(m, Bytes(kHdr + 61)), SendResult::Sent);
    EXPECT_FALSE(m.rx_pending());
    m.flush_tx();
    EXPECT_TRUE(fd_readable(m.rx_fd()));
    EXPECT_EQ(recv(m).size(), kHdr + 60);
    EXPECT_EQ(recv(m).size(), kHdr + 61);
    EXPECT_FALSE(m.rx_pending());
}

TEST(ReplyQueueTest, RefusesBadSizes) {
    EXPECT_FALSE(ReplyQueue::create(3, 100).has_value());
    EXPECT_FALSE(ReplyQueue::create(1, 100).has_value());
    EXPECT_FALSE(ReplyQueue::create(4, 0).has_value());
    EXPECT_TRUE(ReplyQueue::create(4, 100).has_value());
}

// Issue 23, item 5: a reply queued for a guest whose session ended (an ARP
// reply with no rx buffer posted) is dropped and counted, never handed to
// the next session's guest.
TEST(IcmpEchoPortTest, SessionEndDropsTheQueuedRepliesCounted) {
    auto p = echo_port(4);
    ASSERT_EQ(send(*p, arp_request(kAddr)), SendResult::Sent);
    ASSERT_EQ(send(*p, echo_request(kAddr)), SendResult::Sent);
    p->session_end();
    EXPECT_FALSE(p->rx_pending());
    EXPECT_EQ(recv(*p).size(), 0u);
    EXPECT_EQ(p->queue().stats.drop_session_end.get(), 2u);
    EXPECT_EQ(p->queue().stats.rx_pkts.get(), 0u);
    p->session_start();
    const Bytes req = echo_request(kAddr);
    ASSERT_EQ(send(*p, req), SendResult::Sent);  // the slots are free again
    EXPECT_EQ(recv(*p).size(), req.size());
    EXPECT_FALSE(p->rx_pending());
}

TEST(MacswapPortTest, SessionEndDropsTheQueuedFramesCounted) {
    auto p = MacswapPort::create(1518, 2);
    ASSERT_TRUE(p.has_value());
    const Bytes f = arp_request(kAddr);
    ASSERT_EQ(send(**p, f), SendResult::Sent);
    ASSERT_EQ(send(**p, f), SendResult::Sent);
    EXPECT_EQ(send(**p, f), SendResult::Retry);  // full
    (*p)->session_end();
    EXPECT_FALSE((*p)->rx_pending());
    EXPECT_EQ((*p)->queue().stats.drop_session_end.get(), 2u);
    EXPECT_EQ(send(**p, f), SendResult::Sent);  // room again
    EXPECT_EQ((*p)->queue().size(), 1u);
}

}  // namespace
}  // namespace pvnet::port
