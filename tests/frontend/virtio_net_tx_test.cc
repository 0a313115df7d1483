// VirtioNet's transmit side against a SplitDeviceQueue playing the device:
// xmit, tx_flush, free_old_xmit, the full ring, forwarding a received buffer,
// and a hostile tx completion that breaks tx only. Decided by counters and bytes.
#include <gtest/gtest.h>

#include "virtio_net_fixture.h"

namespace pvnet::frontend::fixture {
namespace {

// ---- xmit / tx_flush / free_old_xmit ----------------------------------------------------

TEST(Xmit, DevicePopsAReadableChainAtTheBuffersGpa) {
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    write_packet(qp.buf_host(id), 7, 100);
    ASSERT_TRUE(qp.xmit(id, 100));
    EXPECT_EQ(env.bells().tx_kick.consume(), 0u) << "not published before tx_flush";
    qp.tx_flush();
    EXPECT_EQ(env.bells().tx_kick.consume(), 1u);
    EXPECT_EQ(qp.stats().tx_kicks.get(), 1u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 0u);

    DescChain& c = *env.dev().chain;
    ASSERT_EQ(env.dev().tx->pop(c), PopStatus::Ok);
    EXPECT_EQ(c.out_num, 1u);
    EXPECT_EQ(c.in_num, 0u);
    EXPECT_EQ(c.out_bytes, 100u);
    EXPECT_EQ(c.readable()[0].iov_base, qp.buf_host(id));
    EXPECT_EQ(c.readable()[0].iov_len, 100u);
    EXPECT_TRUE(packet_ok(static_cast<const std::byte*>(c.readable()[0].iov_base), 7, 100));
    const virtio::virtq_desc d = env.tx_desc(0, c.head);
    EXPECT_EQ(d.addr.get(), env.gpa_of(qp.buf_host(id)));
    EXPECT_EQ(d.len.get(), 100u);
    EXPECT_EQ(d.flags.get(), 0u) << "device-readable, single descriptor";
    EXPECT_EQ(env.dev().tx->pop(c), PopStatus::Empty);
    EXPECT_EQ(qp.stats().tx_pkts.get(), 1u);
    EXPECT_EQ(qp.stats().tx_bytes.get(), 100u);
}

TEST(Xmit, FullRingRefusesCountsAndFreesTheBuffer) {
    Env env(config(1, 64, 8));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    for (uint32_t k = 0; k < 8; ++k) {
        uint32_t id = 0;
        ASSERT_TRUE(qp.alloc_buf(id));
        ASSERT_TRUE(qp.xmit(id, 60)) << k;
    }
    EXPECT_EQ(qp.tx_queue().num_free(), 0u);
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    EXPECT_EQ(qp.free_bufs(), total - 9u);
    EXPECT_FALSE(qp.xmit(id, 60));
    EXPECT_EQ(qp.stats().tx_drop_ring_full.get(), 1u);
    EXPECT_EQ(qp.free_bufs(), total - 8u) << "the refused buffer is back in the pool";
    EXPECT_EQ(qp.stats().tx_pkts.get(), 8u);
    qp.tx_flush();
    EXPECT_EQ(env.bells().tx_kick.consume(), 1u);
    EXPECT_EQ(env.complete_tx(0), 8u);
}

TEST(Xmit, FreeOldXmitReturnsBuffersOnceTheDeviceIsDone) {
    Env env(config(1, 64, 8));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    for (int round = 0; round < 3; ++round) {
        for (uint32_t k = 0; k < 8; ++k) {
            uint32_t id = 0;
            ASSERT_TRUE(qp.alloc_buf(id));
            ASSERT_TRUE(qp.xmit(id, 60));
        }
        qp.tx_flush();
        EXPECT_EQ(qp.free_old_xmit(), 0u) << "nothing completed yet";
        EXPECT_EQ(qp.free_bufs(), total - 8u);
        EXPECT_EQ(env.complete_tx(0), 8u);
        EXPECT_EQ(qp.free_old_xmit(), 8u);
        EXPECT_EQ(qp.free_bufs(), total);
        EXPECT_EQ(qp.tx_queue().num_free(), 8u);
        EXPECT_EQ(qp.free_old_xmit(), 0u);
    }
    EXPECT_EQ(qp.stats().tx_drop_ring_full.get(), 0u);
}

TEST(Xmit, ReceivedBufferForwardedAsIs) {
    // The guest's io forwarding: an rx buffer kept by deliver goes out on tx
    // and comes back to the pool through free_old_xmit.
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    qp.try_fill_recv();
    const std::vector<Popped> got = env.pop_rx(0, 5);
    for (std::size_t k = 0; k < got.size(); ++k) env.fill_rx(0, got[k], k, 150);
    env.dev().rx->flush_used();
    auto forward = [&](uint32_t id, const std::byte*, uint32_t len) { return qp.xmit(id, len); };
    EXPECT_EQ(qp.poll_rx(64, forward), 5u);
    qp.tx_flush();
    DescChain& c = *env.dev().chain;
    for (std::size_t k = 0; k < 5; ++k) {
        ASSERT_EQ(env.dev().tx->pop(c), PopStatus::Ok);
        EXPECT_EQ(c.readable()[0].iov_base, got[k].host);
        EXPECT_EQ(c.out_bytes, 150u);
        EXPECT_TRUE(packet_ok(got[k].host, k, 150));
        ASSERT_TRUE(env.dev().tx->add_used(c.head, 0));
    }
    env.dev().tx->flush_used();
    EXPECT_EQ(qp.free_old_xmit(), 5u);
    EXPECT_EQ(qp.free_bufs(), total - 59u) << "5 of 64 posted rx buffers went out on tx and back";
}

TEST(Xmit, HostileTxCompletionBreaksTxOnly) {
    // A tx used entry claiming written bytes: the device wrote into a
    // device-readable buffer.
    Env env(config(1, 64, 8));
    env.start();
    QueuePair& qp = env.qp();
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    ASSERT_TRUE(qp.xmit(id, 60));
    qp.tx_flush();
    DescChain& c = *env.dev().chain;
    ASSERT_EQ(env.dev().tx->pop(c), PopStatus::Ok);
    const ring::SplitRingAddrs& a = qp.tx_addrs();
    virtio::virtq_used_elem e{};
    e.id.set(c.head);
    e.len.set(60);
    std::memcpy(env.host(a.used.value) + Layout::used_ring_off(0), &e, sizeof e);
    virtio::Le16 idx{};
    idx.set(1);
    std::memcpy(env.host(a.used.value) + Layout::used_idx_off(), &idx, sizeof idx);
    EXPECT_EQ(qp.free_old_xmit(), 0u);
    EXPECT_TRUE(qp.tx_queue().broken());
    EXPECT_EQ(qp.tx_queue().broken_reason(), RingError::UsedLenTooLong);
    uint32_t id2 = 0;
    ASSERT_TRUE(qp.alloc_buf(id2));
    EXPECT_FALSE(qp.xmit(id2, 60));
    EXPECT_FALSE(qp.rx_queue().broken());
    EXPECT_EQ(qp.try_fill_recv(), 64u);
}

}  // namespace
}  // namespace pvnet::frontend::fixture
