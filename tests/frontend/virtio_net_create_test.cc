// VirtioNet::create: the layout of 1 and 3 queue pairs inside the area,
// setup rejections, and several pairs each on their own rings and doorbells.
// A SplitDeviceQueue plays the device (virtio_net_fixture.h).
#include <gtest/gtest.h>

#include "virtio_net_fixture.h"

namespace pvnet::frontend::fixture {
namespace {

struct Span {
    uint64_t begin = 0, end = 0;
};


std::vector<Span> occupied(const Env& env, const QueuePair& qp) {
    std::vector<Span> out;
    for (const ring::SplitRingAddrs* a : {&qp.rx_addrs(), &qp.tx_addrs()}) {
        const uint64_t begin = a->desc.value;
        const uint64_t end = begin + ring::split_ring_bytes(a->size);
        // The three parts sit inside the ring's own span, in order.
        EXPECT_EQ(begin % 16, 0u);
        EXPECT_GE(a->avail.value, begin + Layout::desc_bytes(a->size));
        EXPECT_GE(a->used.value, a->avail.value + Layout::avail_bytes(a->size));
        EXPECT_EQ(a->used.value % 4, 0u);
        EXPECT_LE(a->used.value + Layout::used_bytes(a->size), end);
        out.push_back(Span{begin, end});
    }
    const uint64_t bufs = env.gpa_of(qp.buf_host(0));
    for (uint32_t id = 1; id < qp.total_bufs(); ++id) {
        EXPECT_EQ(env.gpa_of(qp.buf_host(id)), bufs + uint64_t{id} * qp.buf_bytes());
    }
    out.push_back(Span{bufs, bufs + uint64_t{qp.total_bufs()} * qp.buf_bytes()});
    return out;
}

void expect_layout(uint16_t pairs) {
    Env env(config(pairs));
    env.start();
    EXPECT_EQ(env.qp().total_bufs(), 2u * (256u + 256u));
    std::vector<Span> all;
    for (uint16_t i = 0; i < pairs; ++i) {
        const QueuePair& qp = env.qp(i);
        EXPECT_EQ(qp.free_bufs(), qp.total_bufs());
        EXPECT_EQ(qp.rx_addrs().size, 256u);
        EXPECT_EQ(qp.tx_addrs().size, 256u);
        for (const Span& s : occupied(env, qp)) all.push_back(s);
    }
    ASSERT_EQ(all.size(), 3u * pairs);
    for (const Span& s : all) {
        EXPECT_LT(s.begin, s.end);
        EXPECT_GE(s.begin, kBase);
        EXPECT_LE(s.end, kBase + env.area());
    }
    std::sort(all.begin(), all.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (std::size_t k = 1; k < all.size(); ++k) {
        EXPECT_LE(all[k - 1].end, all[k].begin) << "overlap at interval " << k;
    }
}

// ---- create ------------------------------------------------------------------

TEST(VirtioNetCreate, OnePairLiesInsideTheArea) { expect_layout(1); }

TEST(VirtioNetCreate, ThreePairsDoNotOverlapAndLieInsideTheArea) { expect_layout(3); }

TEST(VirtioNetCreate, AreaIsPairsTimesPairArea) {
    const VirtioNetConfig c1 = config(1), c3 = config(3);
    EXPECT_EQ(VirtioNet::area_bytes(c3), 3u * QueuePair::area_bytes(c1));
    EXPECT_EQ(QueuePair::area_bytes(c1) % 4096, 0u);
}

TEST(VirtioNetCreate, HonoursExplicitBufferCount) {
    VirtioNetConfig c = config(2, 64, 64);
    c.n_bufs = 100;
    c.buf_bytes = 1024;
    Env env(c);
    env.start();
    for (uint16_t i = 0; i < 2; ++i) {
        EXPECT_EQ(env.qp(i).total_bufs(), 100u);
        EXPECT_EQ(env.qp(i).free_bufs(), 100u);
        EXPECT_EQ(env.qp(i).buf_bytes(), 1024u);
    }
}

TEST(VirtioNetCreate, RejectsTooSmallArea) {
    for (uint16_t pairs : {uint16_t{1}, uint16_t{3}}) {
        Env env(config(pairs));
        auto r = env.create(env.area() - 1);
        ASSERT_FALSE(r.has_value()) << pairs;
        EXPECT_EQ(r.error(), FrontendError::AreaTooSmall);
        auto half = env.create(env.area() / 2);
        EXPECT_FALSE(half.has_value());
        auto ok = env.create(env.area());
        EXPECT_TRUE(ok.has_value()) << pairs;
    }
}

TEST(VirtioNetCreate, RejectsFdsCountMismatch) {
    Env env(config(3));
    auto two = env.create_with_fds(env.fds().first(2));
    ASSERT_FALSE(two.has_value());
    EXPECT_EQ(two.error(), FrontendError::AreaTooSmall);
    auto none = env.create_with_fds({});
    EXPECT_FALSE(none.has_value());
    EXPECT_TRUE(env.create_with_fds(env.fds()).has_value());

    Env one(config(1));
    std::vector<VirtioNetFds> extra(one.fds().begin(), one.fds().end());
    extra.push_back(extra[0]);
    EXPECT_FALSE(one.create_with_fds(extra).has_value());
}

TEST(VirtioNetCreate, RejectsZeroQueuePairs) {
    VirtioNetConfig c = config(0);
    mem::MemoryTable table;
    EXPECT_FALSE(VirtioNet::create(table, GuestAddr(kBase), 1u << 30, c, {}).has_value());
}

TEST(VirtioNetCreate, RejectsAreaBeyondMappedMemory) {
    // Memory holds exactly the area; starting one page in, the buffers of the
    // last pair hang over the end of the region.
    Env env(config(3));
    auto r = env.create(env.area(), GuestAddr(kBase + 4096));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), FrontendError::AreaUnmapped);
    auto away = env.create(env.area(), GuestAddr(kBase + (1u << 30)));
    EXPECT_FALSE(away.has_value());
}

TEST(VirtioNetCreate, RejectsMisalignedBase) {
    Env env(config(1), 2 * QueuePair::area_bytes(config(1)));
    EXPECT_FALSE(env.create(env.area(), GuestAddr(kBase + 16)).has_value());
    EXPECT_TRUE(env.create(env.area(), GuestAddr(kBase + 4096)).has_value());
}

TEST(VirtioNetCreate, RejectsRingSizeNotPowerOfTwo) {
    Env env(config(1, 100, 256));
    auto r = env.create(env.area());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), FrontendError::RingSetup);
}

// ---- several queue pairs ---------------------------------------------------------------

TEST(QueuePairs, EachPairUsesItsOwnRingsAndDoorbells) {
    Env env(config(3, 64, 64));
    env.start();
    ASSERT_EQ(env.qp(1).try_fill_recv(), 64u);
    EXPECT_EQ(env.bells(0).rx_kick.consume(), 0u);
    EXPECT_EQ(env.bells(1).rx_kick.consume(), 1u);
    EXPECT_EQ(env.bells(2).rx_kick.consume(), 0u);
    EXPECT_TRUE(env.pop_rx(0, 64).empty());
    EXPECT_TRUE(env.pop_rx(2, 64).empty());

    ASSERT_EQ(env.qp(0).try_fill_recv(), 64u);
    ASSERT_EQ(env.qp(2).try_fill_recv(), 64u);
    const std::vector<Popped> got = env.pop_rx(2, 3);
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t k = 0; k < 3; ++k) {
        const QueuePair& q2 = env.qp(2);
        EXPECT_GE(got[k].host, q2.buf_host(0)) << "pair 2's own buffers";
        EXPECT_LT(got[k].host, q2.buf_host(0) + std::size_t{q2.total_bufs()} * q2.buf_bytes());
        env.fill_rx(2, got[k], k, 90);
    }
    env.dev(2).rx->flush_used();
    Recorder r0, r1, r2;
    EXPECT_EQ(env.qp(0).poll_rx(64, r0), 0u);
    EXPECT_EQ(env.qp(1).poll_rx(64, r1), 0u);
    EXPECT_EQ(env.qp(2).poll_rx(64, r2), 3u);

    uint32_t id = 0;
    ASSERT_TRUE(env.qp(1).alloc_buf(id));
    ASSERT_TRUE(env.qp(1).xmit(id, 64));
    env.qp(1).tx_flush();
    EXPECT_EQ(env.bells(0).tx_kick.consume(), 0u);
    EXPECT_EQ(env.bells(1).tx_kick.consume(), 1u);
    EXPECT_EQ(env.bells(2).tx_kick.consume(), 0u);
    EXPECT_EQ(env.complete_tx(0), 0u);
    EXPECT_EQ(env.complete_tx(1), 1u);
    EXPECT_EQ(env.complete_tx(2), 0u);
    EXPECT_EQ(env.qp(1).free_old_xmit(), 1u);
}

}  // namespace
}  // namespace pvnet::frontend::fixture
