// L2Switch / SwitchPort: learning, flooding of unknown, broadcast and
// multicast destinations, unicast once learned, moves, ageing (on an
// injected clock), the bounded table, every drop reason, queue pairs
// mapped modulo the destination's count, and two producer threads into one
// port while its reader drains (every frame exactly once). Then the
// tenants (issue 23): a hostile guest against a victim guest for each
// guard (no fresh MAC move, the per-device MAC limit, storm control, a
// fixed MAC), and what a session's end leaves (nothing).
#include "pvnet/port/switch_port.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace pvnet::port {
namespace {

using namespace std::chrono_literals;
constexpr uint32_t kHdr = SwitchPort::kHdrBytes;
constexpr uint32_t kMaxFrame = 1518;
using Bytes = std::vector<uint8_t>;
using Mac = std::array<uint8_t, 6>;

const Mac kA{0x52, 0x54, 0, 0, 0, 0x0a};
const Mac kB{0x52, 0x54, 0, 0, 0, 0x0b};
const Mac kC{0x52, 0x54, 0, 0, 0, 0x0c};
const Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
const Mac kMulticast{0x01, 0x00, 0x5e, 0, 0, 0x01};

/// hdr (non-zero, which the switch must not pass on) + Ethernet + payload.
Bytes frame(const Mac& dst, const Mac& src, uint32_t payload = 46, uint8_t tag = 0) {
    Bytes b(kHdr, 0x5a);
    b.insert(b.end(), dst.begin(), dst.end());
    b.insert(b.end(), src.begin(), src.end());
    b.push_back(0x08);
    b.push_back(0x00);
    for (uint32_t i = 0; i < payload; ++i) b.push_back(static_cast<uint8_t>(tag + i));
    return b;
}

SendResult send(SwitchPort& p, const Bytes& b) {
    const iovec v{const_cast<uint8_t*>(b.data()), b.size()};
    return p.send(std::span<const iovec>(&v, 1), static_cast<uint32_t>(b.size()));
}
Bytes recv(SwitchPort& p, std::size_t room = 2048) {
    Bytes b(room);
    const iovec v{b.data(), b.size()};
    b.resize(p.recv(std::span<const iovec>(&v, 1)));
    return b;
}
/// What the receiver must see: the same frame behind a zeroed header.
Bytes delivered(Bytes b) {
    std::memset(b.data(), 0, kHdr);
    return b;
}

/// A switch of `devices` devices with `pairs[d]` queue pairs each, on a
/// clock the test moves.
struct Bed {
    std::shared_ptr<std::atomic<int64_t>> clock = std::make_shared<std::atomic<int64_t>>(0);
    std::unique_ptr<L2Switch> sw;
    std::vector<std::vector<std::unique_ptr<SwitchPort>>> ports;

    explicit Bed(std::vector<uint32_t> pairs, uint32_t max_entries = 4096, uint32_t slots = 16,
                 const std::function<void(SwitchConfig&)>& tune = {}) {
        SwitchConfig cfg;
        cfg.max_entries = max_entries;
        if (tune) tune(cfg);
        cfg.now = [c = clock] { return std::chrono::nanoseconds(c->load()); };
        auto s = L2Switch::create(std::move(cfg));
        EXPECT_TRUE(s);
        sw = std::move(*s);
        for (uint32_t d = 0; d < pairs.size(); ++d) {
            ports.emplace_back();
            for (uint32_t q = 0; q < pairs[d]; ++q) {
                auto p = SwitchPort::create(*sw, d, kMaxFrame, slots);
                EXPECT_TRUE(p);
                ports.back().push_back(std::move(*p));
            }
        }
    }
    SwitchPort& at(uint32_t d, uint32_t q = 0) { return *ports[d][q]; }
    void advance(std::chrono::nanoseconds t) { clock->fetch_add(t.count()); }
};

TEST(SwitchPort, UnknownDestinationFloodsEveryOtherDeviceAndLearnsTheSource) {
    Bed bed({1, 1, 1});
    const Bytes f = frame(kB, kA);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
    EXPECT_EQ(recv(bed.at(1)), delivered(f));
    EXPECT_EQ(recv(bed.at(2)), delivered(f));
    EXPECT_FALSE(bed.at(0).rx_pending());  // never back to the sender
    EXPECT_EQ(bed.at(0).tx_pkts.get(), 1u);
    EXPECT_EQ(bed.at(0).tx_flooded.get(), 1u);
    EXPECT_EQ(bed.at(0).forwarded.get(), 2u);
    EXPECT_EQ(bed.at(0).learned.get(), 1u);
    EXPECT_EQ(bed.sw->size(), 1u);
}

TEST(SwitchPort, BroadcastAndMulticastFloodEvenWhenLearnedOnce) {
    Bed bed({1, 1, 1});
    for (const Mac& dst : {kBroadcast, kMulticast}) {
        const Bytes f = frame(dst, kA);
        EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
        EXPECT_EQ(recv(bed.at(1)), delivered(f));
        EXPECT_EQ(recv(bed.at(2)), delivered(f));
    }
    EXPECT_EQ(bed.at(0).tx_flooded.get(), 2u);
    EXPECT_EQ(bed.at(0).learned.get(), 1u);  // the second frame only refreshed kA
}

TEST(SwitchPort, LearnedDestinationGetsUnicast) {
    Bed bed({1, 1, 1});
    ASSERT_EQ(send(bed.at(1), frame(kBroadcast, kB)), SendResult::Sent);  // teaches kB on dev 1
    (void)recv(bed.at(0));
    (void)recv(bed.at(2));
    const Bytes f = frame(kB, kA, 100, 7);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
    EXPECT_EQ(recv(bed.at(1)), delivered(f));
    EXPECT_FALSE(bed.at(2).rx_pending());
    EXPECT_EQ(bed.at(0).tx_unicast.get(), 1u);
    EXPECT_EQ(bed.at(0).forwarded.get(), 1u);
    // And the reply goes back the same way, kA now learned on dev 0.
    const Bytes r = frame(kA, kB);
    EXPECT_EQ(send(bed.at(1), r), SendResult::Sent);
    EXPECT_EQ(recv(bed.at(0)), delivered(r));
    EXPECT_FALSE(bed.at(2).rx_pending());
}

TEST(SwitchPort, MacMovesToAnotherDeviceOnlyOnceAgedOut) {
    Bed bed({1, 1, 1});
    ASSERT_EQ(send(bed.at(1), frame(kBroadcast, kB)), SendResult::Sent);
    EXPECT_EQ(send(bed.at(2), frame(kBroadcast, kB)), SendResult::Dropped);  // fresh on dev 1
    EXPECT_EQ(bed.at(2).drops.get(SwitchDrop::MacMove), 1u);
    bed.advance(SwitchConfig::kDefaultAgeing + 1ns);
    ASSERT_EQ(send(bed.at(2), frame(kBroadcast, kB)), SendResult::Sent);  // kB moved to dev 2
    EXPECT_EQ(bed.at(2).moved.get(), 1u);
    EXPECT_EQ(bed.at(2).learned.get(), 1u);
    EXPECT_EQ(bed.sw->size(1), 0u);
    EXPECT_EQ(bed.sw->size(2), 1u);
    for (uint32_t d = 0; d < 3; ++d) {
        while (bed.at(d).rx_pending()) (void)recv(bed.at(d));
    }
    const Bytes f = frame(kB, kA);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
    EXPECT_EQ(recv(bed.at(2)), delivered(f));
    EXPECT_FALSE(bed.at(1).rx_pending());
    EXPECT_EQ(bed.sw->size(), 2u);
}

TEST(SwitchPort, StaleEntryIsNotUsedAndIsCountedAged) {
    Bed bed({1, 1, 1});
    ASSERT_EQ(send(bed.at(1), frame(kBroadcast, kB)), SendResult::Sent);
    (void)recv(bed.at(0));
    (void)recv(bed.at(2));
    bed.advance(SwitchConfig::kDefaultAgeing);  // exactly the ageing time: still fresh
    EXPECT_EQ(send(bed.at(0), frame(kB, kA)), SendResult::Sent);
    EXPECT_EQ(bed.at(0).tx_unicast.get(), 1u);
    (void)recv(bed.at(1));
    bed.advance(SwitchConfig::kDefaultAgeing + 1ns);  // kB last seen one ageing time + 1 ago
    const Bytes f = frame(kB, kA);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
    EXPECT_EQ(bed.at(0).tx_flooded.get(), 1u);
    EXPECT_EQ(bed.at(0).aged.get(), 2u);  // kA (re-learned) and kB (removed)
    EXPECT_EQ(recv(bed.at(1)), delivered(f));
    EXPECT_EQ(recv(bed.at(2)), delivered(f));
    EXPECT_EQ(bed.sw->size(), 1u);  // kA only
}

TEST(SwitchPort, FrameToItsOwnDeviceIsDropped) {
    Bed bed({2, 1});
    ASSERT_EQ(send(bed.at(0, 1), frame(kBroadcast, kB)), SendResult::Sent);  // kB on dev 0
    (void)recv(bed.at(1));
    EXPECT_EQ(send(bed.at(0, 0), frame(kB, kA)), SendResult::Dropped);
    EXPECT_EQ(bed.at(0, 0).drops.get(SwitchDrop::OwnDevice), 1u);
    EXPECT_EQ(bed.at(0, 0).tx_pkts.get(), 1u);
    EXPECT_EQ(bed.at(0, 0).forwarded.get(), 0u);
    for (uint32_t d = 0; d < 2; ++d) EXPECT_FALSE(bed.at(d).rx_pending());
    EXPECT_FALSE(bed.at(0, 1).rx_pending());
}

TEST(SwitchPort, FullDestinationQueueIsACountedDropNotARetry) {
    Bed bed({1, 1}, 4096, /*slots=*/2);
    const Bytes f = frame(kBroadcast, kA);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);
    EXPECT_EQ(send(bed.at(0), f), SendResult::Sent);  // taken, its one copy dropped
    EXPECT_EQ(bed.at(0).forwarded.get(), 2u);
    EXPECT_EQ(bed.at(0).drops.get(SwitchDrop::QueueFull), 1u);
    EXPECT_EQ(bed.at(1).queue().stats.retry_full.get(), 1u);
    EXPECT_EQ(recv(bed.at(1)), delivered(f));
    EXPECT_EQ(recv(bed.at(1)), delivered(f));
    EXPECT_FALSE(bed.at(1).rx_pending());
}

TEST(SwitchPort, RuntOversizeAndBadSourceAreDroppedUnlearned) {
    Bed bed({1, 1});
    Bytes runt = frame(kB, kA, 0);
    runt.resize(kHdr + 13);
    EXPECT_EQ(send(bed.at(0), runt), SendResult::Dropped);
    // len beyond what the iovecs hold is a runt too.
    const Bytes f = frame(kB, kA);
    const iovec v{const_cast<uint8_t*>(f.data()), f.size()};
    EXPECT_EQ(bed.at(0).send(std::span<const iovec>(&v, 1), static_cast<uint32_t>(f.size() + 1)),
              SendResult::Dropped);
    EXPECT_EQ(bed.at(0).drops.get(SwitchDrop::Runt), 2u);
    EXPECT_EQ(send(bed.at(0), frame(kB, kA, kMaxFrame - 14 + 1)), SendResult::Dropped);
    EXPECT_EQ(bed.at(0).drops.get(SwitchDrop::Oversize), 1u);
    EXPECT_EQ(send(bed.at(0), frame(kB, kBroadcast)), SendResult::Dropped);
    EXPECT_EQ(send(bed.at(0), frame(kB, Mac{})), SendResult::Dropped);
    EXPECT_EQ(bed.at(0).drops.get(SwitchDrop::BadSource), 2u);
    EXPECT_EQ(bed.at(0).tx_pkts.get(), 5u);
    EXPECT_EQ(bed.sw->size(), 0u);
    EXPECT_FALSE(bed.at(1).rx_pending());
    // The largest frame passes.
    const Bytes big = frame(kB, kA, kMaxFrame - 14);
    EXPECT_EQ(send(bed.at(0), big), SendResult::Sent);
    EXPECT_EQ(recv(bed.at(1)), delivered(big));
}

TEST(SwitchPort, FullTableLearnsNothingNewUntilEntriesAge) {
    Bed bed({1, 1}, /*max_entries=*/2);
    ASSERT_EQ(send(bed.at(0), frame(kBroadcast, kA)), SendResult::Sent);
    ASSERT_EQ(send(bed.at(0), frame(kBroadcast, kB)), SendResult::Sent);
    EXPECT_EQ(send(bed.at(1), frame(kBroadcast, kC)), SendResult::Sent);  // forwarded, not learned
    EXPECT_EQ(bed.at(1).learn_table_full.get(), 1u);
    EXPECT_EQ(bed.sw->size(), 2u);
    while (bed.at(0).rx_pending()) (void)recv(bed.at(0));
    while (bed.at(1).rx_pending()) (void)recv(bed.at(1));
    EXPECT_EQ(send(bed.at(0), frame(kC, kA)), SendResult::Sent);
    EXPECT_EQ(bed.at(0).tx_flooded.get(), 3u);  // kC unknown
    (void)recv(bed.at(1));
    // Once kA and kB are stale, a full table is swept and kC learned.
    bed.advance(SwitchConfig::kDefaultAgeing + 1s);
    EXPECT_EQ(send(bed.at(1), frame(kBroadcast, kC)), SendResult::Sent);
    EXPECT_EQ(bed.at(1).aged.get(), 2u);
    EXPECT_EQ(bed.at(1).learned.get(), 1u);
    EXPECT_EQ(bed.sw->size(), 1u);
}

TEST(SwitchPort, ManyMacsLearnedAndErasedKeepTheTableConsistent) {
    // A table half full of entries, so runs collide and may wrap: every
    // entry must still be found after others of its run were erased
    // (backward-shift deletion).
    constexpr uint32_t kMacs = 63;
    Bed bed({1, 1}, /*max_entries=*/kMacs + 1, /*slots=*/256);
    auto mac = [](uint32_t i) {
        return Mac{0x52, 0x54, 0, 1, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    };
    auto drain = [&] {
        while (bed.at(0).rx_pending()) (void)recv(bed.at(0));
    };
    for (uint32_t i = 0; i < kMacs; ++i) {
        ASSERT_EQ(send(bed.at(1), frame(kBroadcast, mac(i))), SendResult::Sent);
    }
    drain();
    EXPECT_EQ(bed.sw->size(), kMacs);
    // Refresh the odd ones only, then let the even ones age out one lookup at a time.
    bed.advance(SwitchConfig::kDefaultAgeing);
    for (uint32_t i = 1; i < kMacs; i += 2) {
        ASSERT_EQ(send(bed.at(1), frame(kBroadcast, mac(i))), SendResult::Sent);
    }
    drain();
    bed.advance(1ns);
    for (uint32_t i = 0; i < kMacs; i += 2) {
        EXPECT_EQ(send(bed.at(0), frame(mac(i), kA)), SendResult::Sent);  // stale: erased, flooded
    }
    constexpr uint32_t kEven = (kMacs + 1) / 2, kOdd = kMacs / 2;
    EXPECT_EQ(bed.at(0).tx_flooded.get(), kEven);
    EXPECT_EQ(bed.at(0).aged.get(), kEven);
    for (uint32_t i = 1; i < kMacs; i += 2) {
        EXPECT_EQ(send(bed.at(0), frame(mac(i), kA)), SendResult::Sent);
    }
    EXPECT_EQ(bed.at(0).tx_unicast.get(), kOdd);  // every odd one still found
    EXPECT_EQ(bed.sw->size(), kOdd + 1);          // the odd ones and kA
}

TEST(SwitchPort, QueuePairMapsModuloTheDestinationsCount) {
    Bed bed({3, 2});
    const Bytes f = frame(kBroadcast, kA);
    EXPECT_EQ(send(bed.at(0, 2), f), SendResult::Sent);
    EXPECT_EQ(recv(bed.at(1, 0)), delivered(f));  // 2 mod 2
    EXPECT_FALSE(bed.at(1, 1).rx_pending());
    EXPECT_EQ(send(bed.at(1, 1), frame(kA, kB)), SendResult::Sent);  // unicast to dev 0, pair 1
    EXPECT_TRUE(bed.at(0, 1).rx_pending());
    EXPECT_FALSE(bed.at(0, 0).rx_pending());
    EXPECT_FALSE(bed.at(0, 2).rx_pending());
}

TEST(SwitchPort, OneDeviceFloodsToNoOne) {
    Bed bed({1});
    EXPECT_EQ(send(bed.at(0), frame(kBroadcast, kA)), SendResult::Sent);
    EXPECT_EQ(bed.at(0).tx_flooded.get(), 1u);
    EXPECT_EQ(bed.at(0).forwarded.get(), 0u);
    EXPECT_FALSE(bed.at(0).rx_pending());
}

TEST(SwitchPort, RxFdWakesTheReaderForAFrameQueuedAfterItFoundNone) {
    Bed bed({1, 1});
    EXPECT_FALSE(bed.at(1).rx_pending());  // arms
    pollfd p{bed.at(1).rx_fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0);
    ASSERT_EQ(send(bed.at(0), frame(kBroadcast, kA)), SendResult::Sent);
    EXPECT_EQ(::poll(&p, 1, 0), 1);
    EXPECT_EQ(bed.at(1).peek_len(), kHdr + 60u);
    EXPECT_EQ(recv(bed.at(1)).size(), kHdr + 60u);
}

// Two devices' workers send into a third device's port while its reader
// drains it, sleeping on rx_fd as the worker does: every frame arrives
// once, each sender's in order, and the reader never sleeps through one.
TEST(SwitchPort, TwoProducersIntoOnePortDeliverEveryFrameOnce) {
    constexpr uint32_t kPerSender = 20000;
    Bed bed({1, 1, 1}, 4096, /*slots=*/64);
    SwitchPort& dst = bed.at(2);
    ASSERT_EQ(send(dst, frame(kBroadcast, kC)), SendResult::Sent);  // learn kC on dev 2
    while (bed.at(0).rx_pending()) (void)recv(bed.at(0));
    while (bed.at(1).rx_pending()) (void)recv(bed.at(1));

    auto sender = [&](uint32_t d, const Mac& src) {
        for (uint32_t i = 0; i < kPerSender;) {
            Bytes f = frame(kC, src, 46);
            std::memcpy(f.data() + kHdr + 14, &i, sizeof i);
            // A full queue drops the copy: send again until one is queued.
            const uint64_t before = bed.at(d).forwarded.get();
            ASSERT_EQ(send(bed.at(d), f), SendResult::Sent);
            if (bed.at(d).forwarded.get() != before) {
                ++i;
            } else {
                std::this_thread::yield();
            }
        }
    };
    std::thread t0(sender, 0, kA);
    std::thread t1(sender, 1, kB);
    std::array<uint32_t, 2> next{0, 0};
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while ((next[0] < kPerSender || next[1] < kPerSender) &&
           std::chrono::steady_clock::now() < deadline) {
        if (!dst.rx_pending()) {
            pollfd p{dst.rx_fd(), POLLIN, 0};
            (void)::poll(&p, 1, 1000);  // a lost wakeup shows as a 1 s stall, then the deadline
            continue;
        }
        const Bytes b = recv(dst);
        ASSERT_EQ(b.size(), kHdr + 60u);
        const uint8_t src = b[kHdr + 11];
        ASSERT_TRUE(src == kA[5] || src == kB[5]) << int{src};
        const std::size_t who = src == kA[5] ? 0 : 1;
        uint32_t seq;
        std::memcpy(&seq, b.data() + kHdr + 14, sizeof seq);
        ASSERT_EQ(seq, next[who]) << "sender " << who;
        ++next[who];
    }
    t0.join();
    t1.join();
    EXPECT_EQ(next[0], kPerSender);
    EXPECT_EQ(next[1], kPerSender);
    EXPECT_FALSE(dst.rx_pending());
    EXPECT_EQ(dst.queue().stats.rx_pkts.get(), 2u * kPerSender);
    EXPECT_EQ(bed.at(0).forwarded.get() + bed.at(1).forwarded.get(), 2u * kPerSender);
    EXPECT_EQ(dst.queue().stats.retry_full.get(), bed.at(0).drops.get(SwitchDrop::QueueFull) +
                                                      bed.at(1).drops.get(SwitchDrop::QueueFull));
}

// ---- tenants ----------------------------------------------------------------

void drain_all(Bed& bed) {
    for (auto& dev : bed.ports) {
        for (auto& p : dev) {
            while (p->rx_pending()) (void)recv(*p);
        }
    }
}

Mac sprayed(uint32_t i) {
    return Mac{0x52, 0x54, 0xee, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8),
               static_cast<uint8_t>(i)};
}

// Issue 23's three guests: B sends broadcasts with A's MAC as source; C's
// unicast to that MAC must still reach A, and none of it B.
TEST(SwitchTenants, HostileGuestCannotTakeOverAFreshMac) {
    Bed bed({1, 1, 1});
    SwitchPort &a = bed.at(0), &b = bed.at(1), &c = bed.at(2);
    ASSERT_EQ(send(a, frame(kBroadcast, kA)), SendResult::Sent);
    drain_all(bed);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(send(b, frame(kBroadcast, kA)), SendResult::Dropped);
    EXPECT_EQ(b.drops.get(SwitchDrop::MacMove), 3u);
    EXPECT_EQ(b.forwarded.get(), 0u);  // the spoofed broadcasts went nowhere
    EXPECT_EQ(b.learned.get(), 0u);
    for (uint8_t i = 0; i < 5; ++i) {
        const Bytes f = frame(kA, kC, 46, i);
        ASSERT_EQ(send(c, f), SendResult::Sent);
        EXPECT_EQ(recv(a), delivered(f));
    }
    EXPECT_EQ(c.tx_unicast.get(), 5u);
    EXPECT_FALSE(b.rx_pending());
    EXPECT_EQ(b.queue().stats.queued.get(), 1u);  // C's first frame taught kC by a flood; no more
    EXPECT_EQ(bed.sw->size(0), 1u);
    EXPECT_EQ(bed.sw->size(1), 0u);
}

// A spray of 4096 source MACs: the attacker's learning stops at its
// device's limit, the table keeps room, a victim that shows up afterwards
// is learned and its unicast reaches it alone (not flooded to the attacker).
TEST(SwitchTenants, MacSprayStopsAtTheDeviceLimitAndVictimsStayReachable) {
    constexpr uint32_t kLimit = 16, kSpray = 4096;
    Bed bed({1, 1, 1, 1}, /*max_entries=*/64, /*slots=*/16,
            [](SwitchConfig& c) { c.max_dev_macs = kLimit; });
    SwitchPort &a = bed.at(0), &attacker = bed.at(1), &c = bed.at(2), &late = bed.at(3);
    ASSERT_EQ(send(a, frame(kBroadcast, kA)), SendResult::Sent);
    drain_all(bed);
    // Each sprayed frame goes to the attacker's own first MAC: learned, then an own-device drop.
    for (uint32_t i = 0; i < kSpray; ++i) (void)send(attacker, frame(sprayed(0), sprayed(i)));
    EXPECT_EQ(attacker.learned.get(), kLimit);
    EXPECT_EQ(attacker.learn_dev_limit.get(), kSpray - kLimit);
    EXPECT_EQ(attacker.learn_table_full.get(), 0u);
    EXPECT_EQ(bed.sw->size(1), kLimit);
    drain_all(bed);
    ASSERT_EQ(send(late, frame(kBroadcast, kB)), SendResult::Sent);  // a victim arrives late
    EXPECT_EQ(late.learned.get(), 1u);
    drain_all(bed);
    for (const auto& [victim, mac] : {std::pair{&a, kA}, std::pair{&late, kB}}) {
        const Bytes f = frame(mac, kC);
        ASSERT_EQ(send(c, f), SendResult::Sent);
        EXPECT_EQ(recv(*victim), delivered(f));
        drain_all(bed);  // the first one floods once, to teach kC
    }
    EXPECT_EQ(c.tx_unicast.get(), 2u);
    EXPECT_EQ(attacker.queue().stats.queued.get(), 2u);  // A's and B's broadcasts only
}

// A broadcast storm: the attacker's flood budget (burst 128 at once, then
// 10000/s) keeps the victim's 256-slot queue from filling, so the victim's
// own traffic still gets in.
TEST(SwitchTenants, BroadcastStormIsCutAtTheFloodBudget) {
    constexpr uint32_t kStorm = 1000, kBurst = SwitchConfig::kDefaultFloodBurst;
    Bed bed({1, 1, 1}, 4096, /*slots=*/256);
    SwitchPort &victim = bed.at(0), &attacker = bed.at(1), &c = bed.at(2);
    ASSERT_EQ(send(victim, frame(kBroadcast, kA)), SendResult::Sent);
    drain_all(bed);
    for (uint32_t i = 0; i < kStorm; ++i) (void)send(attacker, frame(kBroadcast, kB));
    EXPECT_EQ(attacker.tx_flooded.get(), kBurst);
    EXPECT_EQ(attacker.drops.get(SwitchDrop::Storm), kStorm - kBurst);
    EXPECT_EQ(victim.queue().size(), kBurst);
    EXPECT_EQ(attacker.drops.get(SwitchDrop::QueueFull), 0u);
    const Bytes f = frame(kA, kC);
    ASSERT_EQ(send(c, f), SendResult::Sent);  // unicast to the victim: room left
    EXPECT_EQ(c.drops.get(SwitchDrop::QueueFull), 0u);
    EXPECT_EQ(victim.queue().size(), kBurst + 1);
    // Another second: 10000 more allowed, capped at the burst again.
    bed.advance(1s);
    for (uint32_t i = 0; i < kStorm; ++i) (void)send(attacker, frame(kBroadcast, kB));
    EXPECT_EQ(attacker.tx_flooded.get(), 2 * kBurst);
    // Unicast to a learned MAC spends no budget.
    for (uint32_t i = 0; i < kStorm; ++i) {
        ASSERT_EQ(send(attacker, frame(kC, kB)), SendResult::Sent);
        (void)recv(c);
    }
    EXPECT_EQ(attacker.tx_unicast.get(), kStorm);
}

TEST(SwitchTenants, StormBudgetRefillsAtItsRate) {
    Bed bed({1, 1}, 4096, /*slots=*/256, [](SwitchConfig& c) {
        c.flood_pps = 1000;  // one per ms
        c.flood_burst = 2;
    });
    SwitchPort& p = bed.at(0);
    for (int i = 0; i < 3; ++i) (void)send(p, frame(kBroadcast, kA));
    EXPECT_EQ(p.tx_flooded.get(), 2u);
    bed.advance(999us);
    EXPECT_EQ(send(p, frame(kBroadcast, kA)), SendResult::Dropped);
    bed.advance(1us);
    EXPECT_EQ(send(p, frame(kBroadcast, kA)), SendResult::Sent);
    EXPECT_EQ(p.drops.get(SwitchDrop::Storm), 2u);
}

// A device with a fixed MAC sends nothing else: the spoofed frames are
// dropped before learning, so nothing else is ever learned for it.
TEST(SwitchTenants, FixedMacDropsEveryOtherSource) {
    Bed bed({1, 1, 1});
    auto mac = [](const Mac& m) {
        L2Switch::Mac v = 0;
        for (const uint8_t b : m) v = (v << 8) | b;
        return v;
    };
    bed.sw->fix_mac(1, mac(kB));
    SwitchPort &a = bed.at(0), &b = bed.at(1);
    ASSERT_EQ(send(a, frame(kBroadcast, kA)), SendResult::Sent);
    drain_all(bed);
    for (const Mac& src : {kA, kC, sprayed(1)}) {
        EXPECT_EQ(send(b, frame(kBroadcast, src)), SendResult::Dropped);
    }
    EXPECT_EQ(b.drops.get(SwitchDrop::Spoofed), 3u);
    EXPECT_EQ(b.forwarded.get(), 0u);
    EXPECT_EQ(bed.sw->size(1), 0u);
    ASSERT_EQ(send(b, frame(kA, kB)), SendResult::Sent);  // its own MAC passes
    EXPECT_EQ(bed.sw->size(1), 1u);
    EXPECT_TRUE(a.rx_pending());
    EXPECT_EQ(bed.sw->fixed_mac(0), 0u);
    EXPECT_EQ(send(a, frame(kBroadcast, kC)), SendResult::Sent);  // dev 0 has none: any source
}

// Issue 23, item 5: a session's end leaves the next guest on that device
// nothing: the queue is drained (counted), the device's MACs forgotten, and
// until its next session no copy is queued for it.
TEST(SwitchTenants, SessionEndDrainsTheQueueForgetsTheMacsAndTakesThePortDown) {
    Bed bed({1, 1, 1});
    SwitchPort &a = bed.at(0), &gone = bed.at(1), &c = bed.at(2);
    ASSERT_EQ(send(gone, frame(kBroadcast, kB)), SendResult::Sent);  // kB on dev 1
    drain_all(bed);
    ASSERT_EQ(send(a, frame(kB, kA)), SendResult::Sent);  // queued for dev 1's guest
    ASSERT_EQ(send(c, frame(kBroadcast, kC)), SendResult::Sent);
    ASSERT_EQ(gone.queue().size(), 2u);
    gone.session_end();
    EXPECT_FALSE(gone.up());
    EXPECT_EQ(gone.queue().stats.drop_session_end.get(), 2u);
    EXPECT_FALSE(gone.rx_pending());
    EXPECT_EQ(gone.forgotten.get(), 1u);
    EXPECT_EQ(bed.sw->size(1), 0u);
    drain_all(bed);
    // kB is unknown now: a flood, which skips the port that is down.
    ASSERT_EQ(send(a, frame(kB, kA)), SendResult::Sent);
    EXPECT_EQ(a.tx_flooded.get(), 1u);  // the first went to kB as unicast
    EXPECT_TRUE(c.rx_pending());
    EXPECT_FALSE(gone.rx_pending());
    EXPECT_EQ(a.drops.total(), 0u);
    // The departed guest's MAC may be taken at once, by anyone.
    drain_all(bed);
    ASSERT_EQ(send(c, frame(kBroadcast, kB)), SendResult::Sent);
    EXPECT_EQ(c.drops.get(SwitchDrop::MacMove), 0u);
    EXPECT_EQ(bed.sw->size(2), 2u);
    // The next session: traffic is queued for it again, and only new traffic.
    gone.session_start();
    EXPECT_TRUE(gone.up());
    EXPECT_FALSE(gone.rx_pending());
    const Bytes f = frame(kBroadcast, kA, 46, 9);
    ASSERT_EQ(send(a, f), SendResult::Sent);
    EXPECT_EQ(recv(gone), delivered(f));
}

// Unicast to a device whose port is down (an entry learned in the moment
// its session ended) is a counted drop, not a copy kept for the next guest.
TEST(SwitchTenants, UnicastToADownPortIsACountedDrop) {
    Bed bed({1, 1});
    bed.at(1).session_end();
    ASSERT_EQ(send(bed.at(1), frame(kBroadcast, kB)), SendResult::Sent);  // learned while down
    EXPECT_EQ(send(bed.at(0), frame(kB, kA)), SendResult::Sent);
    EXPECT_EQ(bed.at(0).drops.get(SwitchDrop::PortDown), 1u);
    EXPECT_EQ(bed.at(0).forwarded.get(), 0u);
    EXPECT_FALSE(bed.at(1).rx_pending());
}

TEST(SwitchTenants, ForgetKeepsOtherDevicesEntriesFindable) {
    // Devices' entries interleaved in the runs: forgetting one device's
    // must leave every other entry reachable (the backward shift).
    Bed bed({1, 1, 1}, /*max_entries=*/64, /*slots=*/256,
            [](SwitchConfig& c) { c.flood_pps = 0; });
    for (uint32_t i = 0; i < 60; ++i) {
        ASSERT_EQ(send(bed.at(i % 2), frame(kBroadcast, sprayed(i))), SendResult::Sent);
    }
    drain_all(bed);
    bed.at(0).session_end();
    EXPECT_EQ(bed.at(0).forgotten.get(), 30u);
    EXPECT_EQ(bed.sw->size(), 30u);
    for (uint32_t i = 1; i < 60; i += 2) {
        ASSERT_EQ(send(bed.at(2), frame(sprayed(i), kC)), SendResult::Sent);
    }
    EXPECT_EQ(bed.at(2).tx_unicast.get(), 30u);  // every one of dev 1's still found
    EXPECT_EQ(bed.at(2).tx_flooded.get(), 0u);
}

TEST(SwitchTenants, ConfigIsCheckedAtCreate) {
    for (const auto& tune : std::vector<std::function<void(SwitchConfig&)>>{
             [](SwitchConfig& c) { c.max_dev_macs = 0; },
             [](SwitchConfig& c) { c.flood_burst = 0; },
             [](SwitchConfig& c) { c.flood_pps = SwitchConfig::kMaxFloodPps + 1; }}) {
        SwitchConfig cfg;
        tune(cfg);
        EXPECT_FALSE(L2Switch::create(std::move(cfg)));
    }
}

}  // namespace
}  // namespace pvnet::port
