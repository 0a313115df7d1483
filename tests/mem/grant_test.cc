// Grant tables and the backend's three access modes (issue 13, seed 004):
// every rejection, revocation while held, the persistent pool's bound, and
// the PROT_NONE guards around every mapping of a frontend page.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "pvnet/mem/grant_access.h"
#include "pvnet/mem/grant_table.h"
#include "pvnet/mem/memory_region.h"
#include "grant_fixture.h"

namespace pvnet::mem {
namespace {

TEST(GrantRefs, EveryBadRequestIsRejectedAndCounted) {
    Granted g;
    const GrantRef rw = g.front.grant(kBack, 3, false).value();
    const GrantRef ro = g.front.grant(kBack, 4, true).value();
    const GrantRef other = g.front.grant(kGuest, 5, false).value();
    const GrantRef far = g.front.grant(kBack, kFrames, false).value();  // one past the memfd
    const GrantRef revoked = g.front.grant(kBack, 6, false).value();
    ASSERT_TRUE(g.front.end_access(revoked).has_value());

    struct Case {
        uint64_t addr;
        uint32_t len;
        bool write;
        GrantError want;
    };
    const Case cases[] = {
        {grant_addr(kRefs, 0), 16, false, GrantError::RefOutOfRange},
        {~uint64_t{0}, 16, false, GrantError::RefOutOfRange},
        {grant_addr(40, 0), 16, false, GrantError::NotGranted},  // never granted
        {grant_addr(revoked, 0), 16, false, GrantError::NotGranted},
        {grant_addr(ro, 0), 16, true, GrantError::ReadOnly},
        {grant_addr(other, 0), 16, false, GrantError::WrongDomain},
        {grant_addr(rw, 4000), 97, false, GrantError::CrossesPage},
        {grant_addr(rw, 0), kGrantPageBytes + 1, true, GrantError::CrossesPage},
        {grant_addr(rw, 8), 0, false, GrantError::ZeroLength},
        {grant_addr(far, 0), 16, false, GrantError::FrameOutOfRange},
    };
    for (const Case& c : cases) {
        const uint64_t before = g.refs.errors().get(c.want);
        auto p = g.refs.pin(c.addr, c.len, c.write);
        ASSERT_FALSE(p.has_value()) << to_string(c.want);
        EXPECT_EQ(p.error(), c.want) << to_string(p.error());
        EXPECT_EQ(g.refs.errors().get(c.want), before + 1) << to_string(c.want);
    }
    EXPECT_EQ(g.refs.pinned(), 0u);
    EXPECT_EQ(g.flags(far) & (GTF_reading | GTF_writing), 0) << "a refused pin leaves no bit";
    // The good ones: a read of the read-only grant, a whole page of the other.
    auto a = g.refs.pin(grant_addr(ro, 100), 200, false);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->frame, 4u);
    EXPECT_EQ(a->offset, 100u);
    EXPECT_TRUE(a->readonly);
    auto b = g.refs.pin(grant_addr(rw, 0), kGrantPageBytes, true);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(g.refs.pinned(), 2u);
    g.refs.unpin(a->ref, false);
    g.refs.unpin(b->ref, true);
    EXPECT_EQ(g.refs.pinned(), 0u);
}

TEST(GrantRefs, AHeldGrantCannotBeRevokedUntilReleased) {
    Granted g;
    const GrantRef r = g.front.grant(kBack, 2, false).value();
    auto p1 = g.refs.pin(grant_addr(r, 0), 64, false);
    auto p2 = g.refs.pin(grant_addr(r, 64), 64, true);
    ASSERT_TRUE(p1 && p2);
    EXPECT_EQ(g.flags(r) & (GTF_reading | GTF_writing), GTF_reading | GTF_writing);
    const uint32_t free_before = g.front.free_refs();
    EXPECT_EQ(g.front.end_access(r).error(), GrantError::InUse);
    g.refs.unpin(r, false);
    EXPECT_EQ(g.front.end_access(r).error(), GrantError::InUse) << "still held for writing";
    g.refs.unpin(r, true);
    EXPECT_TRUE(g.front.end_access(r).has_value());
    EXPECT_EQ(g.front.free_refs(), free_before + 1);
    EXPECT_EQ(g.refs.pin(grant_addr(r, 0), 64, false).error(), GrantError::NotGranted);
}

TEST(GrantTable, RunsOutOfReferencesCleanly) {
    Granted g;
    for (uint32_t i = 0; i < kRefs; ++i) ASSERT_TRUE(g.front.grant(kBack, i % kFrames, false));
    EXPECT_EQ(g.front.grant(kBack, 0, false).error(), GrantError::TableFull);
    EXPECT_EQ(g.front.end_access(kRefs).error(), GrantError::RefOutOfRange);
}

class AccessModes : public ::testing::TestWithParam<Mode> {};

TEST_P(AccessModes, ReadsAndWritesReachTheGrantedPageOnly) {
    Granted g;
    auto acc = make(GetParam(), g.source());
    std::memset(g.page(3), 0xab, kGrantPageBytes);
    std::memset(g.page(9), 0x11, kGrantPageBytes);
    const GrantRef tx = g.front.grant(kBack, 3, true).value();
    const GrantRef rx = g.front.grant(kBack, 9, false).value();
    // A chain: 100 readable bytes at offset 50 of tx, 300 writable at 1000 of rx.
    iovec in{}, out{};
    ASSERT_TRUE(acc->map(2, grant_addr(tx, 50), 100, false, in));
    ASSERT_TRUE(acc->map(2, grant_addr(rx, 1000), 300, true, out));
    ASSERT_EQ(in.iov_len, 100u);
    ASSERT_EQ(out.iov_len, 300u);
    const auto* src = static_cast<const unsigned char*>(in.iov_base);
    for (uint32_t i = 0; i < 100; ++i) ASSERT_EQ(src[i], 0xab) << i;
    std::memset(out.iov_base, 0x5c, 120);  // the device writes a 120-byte packet
    EXPECT_EQ(g.refs.pinned() > 0, GetParam() != Mode::CopyPread &&
                                       GetParam() != Mode::CopyProcessVm)
        << "only a copy holds nothing between the copies";
    acc->unmap(2, 120);  // 120 of the 300 writable bytes hold data
    for (uint32_t i = 0; i < kGrantPageBytes; ++i) {
        const auto want = (i >= 1000 && i < 1120) ? 0x5c : 0x11;
        ASSERT_EQ(std::to_integer<int>(g.page(9)[i]), want) << "byte " << i;
    }
    for (uint32_t i = 0; i < kGrantPageBytes; ++i) {
        ASSERT_EQ(std::to_integer<int>(g.page(3)[i]), 0xab) << "a read-only page stays";
    }
    acc.reset();  // a persistent pool unmaps everything when the device goes
    EXPECT_EQ(g.refs.pinned(), 0u);
    EXPECT_TRUE(g.front.end_access(tx).has_value());
    EXPECT_TRUE(g.front.end_access(rx).has_value());
}

TEST_P(AccessModes, RefusedRequestsMapNothing) {
    Granted g;
    auto acc = make(GetParam(), g.source());
    const GrantRef ro = g.front.grant(kBack, 1, true).value();
    const GrantRef other = g.front.grant(kGuest, 2, false).value();
    iovec v{};
    EXPECT_FALSE(acc->map(0, grant_addr(ro, 0), 64, true, v));
    EXPECT_FALSE(acc->map(0, grant_addr(other, 0), 64, false, v));
    EXPECT_FALSE(acc->map(0, grant_addr(kRefs + 5, 0), 64, false, v));
    EXPECT_FALSE(acc->map(0, grant_addr(ro, 4090), 64, false, v));
    EXPECT_EQ(g.refs.errors().total(), 4u);
    EXPECT_EQ(acc->stats().maps.get(), 0u);
    EXPECT_EQ(acc->stats().map_syscalls.get(), 0u);
    EXPECT_EQ(g.refs.pinned(), 0u);
    // More grants in one chain than a packet may use.
    const GrantRef r = g.front.grant(kBack, 3, false).value();
    for (uint32_t i = 0; i < kMaxGrantsPerChain; ++i) {
        ASSERT_TRUE(acc->map(1, grant_addr(r, i * 8), 8, false, v)) << i;
    }
    EXPECT_FALSE(acc->map(1, grant_addr(r, 200), 8, false, v));
    EXPECT_EQ(g.refs.errors().get(GrantError::TooManySegments), 1u);
    acc->unmap_all();
    acc.reset();
    EXPECT_EQ(g.refs.pinned(), 0u);
}

TEST_P(AccessModes, ARevokeWhileHeldFailsAndAHostileClearHarmsNothing) {
    Granted g;
    auto acc = make(GetParam(), g.source());
    std::memset(g.page(4), 0x42, kGrantPageBytes);
    const GrantRef r = g.front.grant(kBack, 4, false).value();
    iovec v{}, w{};
    ASSERT_TRUE(acc->map(3, grant_addr(r, 0), 512, false, v));
    ASSERT_TRUE(acc->map(3, grant_addr(r, 512), 512, true, w));
    const bool holds = GetParam() != Mode::CopyPread && GetParam() != Mode::CopyProcessVm;
    if (holds) {
        EXPECT_EQ(g.front.end_access(r).error(), GrantError::InUse);
    }
    // A hostile frontend clears the entry anyway (Xen: the page stays the
    // backend's until it unmaps; here the mapping is of the memfd).
    g.front.write_raw(r, 0, 0);
    const auto* p = static_cast<const unsigned char*>(v.iov_base);
    for (uint32_t i = 0; i < 512; ++i) ASSERT_EQ(p[i], 0x42);
    std::memset(w.iov_base, 0x77, 512);
    acc->unmap(3, 512);
    if (holds) {
        EXPECT_EQ(std::to_integer<int>(g.page(4)[600]), 0x77) << "written before the unmap";
    } else {
        // A grant copy checks again at copy-back: revoked, nothing written.
        EXPECT_EQ(std::to_integer<int>(g.page(4)[600]), 0x42);
        EXPECT_EQ(acc->stats().copy_back_failed.get(), 1u);
    }
    acc.reset();
    EXPECT_EQ(g.refs.pinned(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Grants, AccessModes,
                         ::testing::Values(Mode::Map, Mode::CopyPread, Mode::CopyProcessVm,
                                           Mode::Persistent),
                         [](const ::testing::TestParamInfo<Mode>& p) {
                             switch (p.param) {
                                 case Mode::Map: return std::string("Map");
                                 case Mode::CopyPread: return std::string("CopyPread");
                                 case Mode::CopyProcessVm: return std::string("CopyProcessVm");
                                 case Mode::Persistent: return std::string("Persistent");
                             }
                             return std::string("?");
                         });

TEST(PersistentGrantPool, MapsOnceThenHitsAndEvictsTheLeastRecentIdleGrant) {
    Granted g;
    PersistentGrantPool pool(g.source(), 4);
    GrantRef r[6];
    for (uint32_t i = 0; i < 6; ++i) r[i] = g.front.grant(kBack, i, false).value();
    iovec v{};
    for (uint32_t round = 0; round < 3; ++round) {
        for (uint16_t h = 0; h < 4; ++h) {
            ASSERT_TRUE(pool.map(h, grant_addr(r[h], 0), 64, true, v));
            pool.unmap(h, 64);
        }
    }
    EXPECT_EQ(pool.stats().map_syscalls.get(), 4u) << "each grant mapped once";
    EXPECT_EQ(pool.stats().pool_hits.get(), 8u);
    EXPECT_EQ(pool.mapped(), 4u);
    EXPECT_EQ(g.front.end_access(r[0]).error(), GrantError::InUse) << "pooled grants stay held";
    // Full: a new grant evicts the least recently used (r[0]).
    ASSERT_TRUE(pool.map(0, grant_addr(r[4], 0), 64, true, v));
    EXPECT_EQ(pool.stats().pool_evictions.get(), 1u);
    EXPECT_TRUE(g.front.end_access(r[0]).has_value()) << "evicted: unmapped and released";
    // Every entry in use (heads 0..3 hold r[4], r[1..3]): nothing to evict.
    for (uint16_t h = 1; h < 4; ++h) ASSERT_TRUE(pool.map(h, grant_addr(r[h], 0), 64, true, v));
    EXPECT_FALSE(pool.map(5, grant_addr(r[5], 0), 64, true, v));
    EXPECT_EQ(g.refs.errors().get(GrantError::PoolFull), 1u);
    EXPECT_EQ(g.flags(r[5]) & (GTF_reading | GTF_writing), 0) << "the refused grant is not held";
    // A hit checks the request itself: its range, and a write through a
    // read-only grant.
    pool.unmap_all();
    ASSERT_TRUE(pool.map(0, grant_addr(r[1], 0), 64, true, v));
    EXPECT_FALSE(pool.map(0, grant_addr(r[1], 4000), 200, true, v));
    EXPECT_EQ(g.refs.errors().get(GrantError::CrossesPage), 1u);
    pool.unmap_all();
    const GrantRef ro = g.front.grant(kBack, 7, true).value();
    ASSERT_TRUE(pool.map(1, grant_addr(ro, 0), 64, false, v));
    EXPECT_FALSE(pool.map(1, grant_addr(ro, 0), 64, true, v));
    EXPECT_EQ(g.refs.errors().get(GrantError::ReadOnly), 1u);
}

// The frontend revokes and regrants (and sometimes clears entries it does
// not own) while the backend maps, touches and unmaps; ASan and the guards
// catch any touch of a page that is not mapped. Every grant the backend got
// was readable whole, and nothing is left held.
TEST_P(AccessModes, RevokingWhileInUseNeverTouchesAnUnmappedPage) {
    Granted g;
    auto acc = make(GetParam(), g.source());
    std::vector<GrantRef> live;
    for (uint32_t i = 0; i < 16; ++i) live.push_back(g.front.grant(kBack, i, false).value());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> revoked{0}, busy{0};
    std::thread frontend([&] {
        std::minstd_rand rng(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (std::chrono::steady_clock::now() < until) {
            const std::size_t i = rng() % live.size();
            if (rng() % 16 == 0) {
                g.front.write_raw(live[i], 0, 0);  // hostile: clear it regardless
                continue;
            }
            if (g.front.end_access(live[i])) {
                revoked.fetch_add(1);
                live[i] = g.front.grant(kBack, static_cast<uint32_t>(rng() % kFrames), false).value();
            } else {
                busy.fetch_add(1);
            }
        }
        stop.store(true);
    });
    uint64_t mapped = 0, refused = 0, sum = 0;
    std::minstd_rand rng(2);
    while (!stop.load()) {
        const uint16_t head = static_cast<uint16_t>(rng() % kRing);
        iovec v{};
        const auto ref = static_cast<GrantRef>(rng() % kRefs);
        const bool write = rng() % 2 == 0;
        if (acc->map(head, grant_addr(ref, 0), kGrantPageBytes, write, v)) {
            ++mapped;
            auto* p = static_cast<unsigned char*>(v.iov_base);
            for (uint32_t i = 0; i < kGrantPageBytes; i += 64) sum += p[i];
            if (write) std::memset(p, 1, kGrantPageBytes);
            acc->unmap(head, write ? kGrantPageBytes : 0);
        } else {
            ++refused;
            acc->unmap(head, 0);
        }
    }
    frontend.join();
    EXPECT_GT(mapped, 0u);
    EXPECT_GT(refused, 0u);
    EXPECT_GT(revoked.load(), 0u);
    acc.reset();
    EXPECT_EQ(g.refs.pinned(), 0u);
    (void)sum;
}

// Issue 23: process_vm copies name a pid and an address; they reach only the
// range checked to be the peer's mapping of the memfd, and stop for good
// once a copy fails or the peer is known gone.
TEST(GrantCopierProcessVm, ACopyOutsideThePeersCheckedRangeIsRefusedAndNothingIsWritten) {
    Granted g;
    // The checked mapping is the memfd's first half: frame 20 is past it.
    GrantPeer half{getpid(), reinterpret_cast<uint64_t>(g.data.host()), g.data.size() / 2};
    GrantCopier acc(GrantSource{&g.refs, g.data.fd(), &half}, kRing, CopyVia::ProcessVm);
    std::memset(g.page(20), 0x11, kGrantPageBytes);
    std::memset(g.page(3), 0x22, kGrantPageBytes);
    const GrantRef outside = g.front.grant(kBack, 20, false).value();
    const GrantRef inside = g.front.grant(kBack, 3, false).value();
    iovec v{};
    ASSERT_TRUE(acc.map(0, grant_addr(outside, 0), 256, true, v));  // rx: copied at unmap
    std::memset(v.iov_base, 0x77, 256);
    acc.unmap(0, 256);
    for (uint32_t i = 0; i < kGrantPageBytes; ++i) {
        ASSERT_EQ(std::to_integer<int>(g.page(20)[i]), 0x11) << "written at byte " << i;
    }
    EXPECT_EQ(g.refs.errors().get(GrantError::OutsidePeer), 1u);
    EXPECT_EQ(acc.stats().copy_back_failed.get(), 1u);
    EXPECT_EQ(acc.stats().copy_syscalls.get(), 0u);
    // Stopped: a request inside the range is refused too (the ring breaks the queue).
    EXPECT_FALSE(acc.map(1, grant_addr(inside, 0), 64, false, v));
    EXPECT_EQ(g.refs.errors().get(GrantError::CopyStopped), 1u);
    EXPECT_EQ(acc.stats().copy_syscalls.get(), 0u);
    EXPECT_EQ(g.refs.pinned(), 0u);
}

TEST(GrantCopierProcessVm, AFailedCopyMarksThePeerGoneAndNoLaterCopyNamesIt) {
    Granted g;
    // The "mapping" is a reservation nothing can be read from: the first
    // copy fails, as one to an exited process does (ESRCH).
    void* hole = ::mmap(nullptr, g.data.size(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(hole, MAP_FAILED);
    GrantPeer peer{getpid(), reinterpret_cast<uint64_t>(hole), g.data.size()};
    GrantCopier rx(GrantSource{&g.refs, g.data.fd(), &peer}, kRing, CopyVia::ProcessVm);
    GrantCopier tx(GrantSource{&g.refs, g.data.fd(), &peer}, kRing, CopyVia::ProcessVm);
    const GrantRef r = g.front.grant(kBack, 2, false).value();
    iovec v{};
    EXPECT_FALSE(tx.map(0, grant_addr(r, 0), 64, false, v));
    EXPECT_EQ(g.refs.errors().get(GrantError::SystemError), 1u);
    EXPECT_TRUE(peer.gone()) << "a failed copy: the pid may be another process's soon";
    // The other direction's copier names the pid no more either: a chain
    // it holds is not copied back, and a new one is refused.
    GrantPeer alive{getpid(), reinterpret_cast<uint64_t>(g.data.host()), g.data.size()};
    GrantCopier rx2(GrantSource{&g.refs, g.data.fd(), &alive}, kRing, CopyVia::ProcessVm);
    ASSERT_TRUE(rx2.map(0, grant_addr(r, 0), 64, true, v));
    alive.set_gone();  // its process exits while the chain is out
    rx2.unmap(0, 64);
    EXPECT_EQ(rx2.stats().copy_syscalls.get(), 0u);
    EXPECT_EQ(rx2.stats().copy_back_failed.get(), 1u);
    EXPECT_FALSE(rx.map(0, grant_addr(r, 0), 64, true, v));
    EXPECT_EQ(rx.stats().copy_syscalls.get(), 0u);
    EXPECT_EQ(g.refs.errors().get(GrantError::CopyStopped), 1u) << "the refused request";
    EXPECT_EQ(g.refs.pinned(), 0u);
    ::munmap(hole, g.data.size());
}

}  // namespace
}  // namespace pvnet::mem
