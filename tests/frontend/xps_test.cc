#include "pvnet/frontend/xps.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "pvnet/frontend/flow.h"

using namespace pvnet::frontend;

namespace {
XpsMask must_parse(std::string_view s, unsigned nbits) {
    XpsMask m;
    auto err = XpsMask::parse(s, nbits, m);
    EXPECT_FALSE(err) << *err;
    return m;
}
std::string parse_error(std::string_view s, unsigned nbits) {
    XpsMask m;
    auto err = XpsMask::parse(s, nbits, m);
    return err ? *err : "";
}
}  // namespace

TEST(XpsMask, ParsesGroupsMostSignificantFirst) {
    auto m = must_parse("f", 8);
    EXPECT_EQ(m.bits.count(), 4u);
    EXPECT_TRUE(m.bits.test(0) && m.bits.test(3));
    m = must_parse("00000001,00000000\n", 64);
    EXPECT_EQ(m.bits.count(), 1u);
    EXPECT_TRUE(m.bits.test(32));
    m = must_parse("  80000000,5 ", 64);
    EXPECT_TRUE(m.bits.test(63) && m.bits.test(0) && m.bits.test(2));
    EXPECT_EQ(m.bits.count(), 3u);
}

TEST(XpsMask, FormatRoundTrip) {
    auto m = must_parse("3,00000010", 64);
    EXPECT_EQ(m.format(64), "00000003,00000010");
    EXPECT_EQ(must_parse(m.format(64), 64).bits, m.bits);
    EXPECT_EQ(must_parse("a", 4).format(4), "0000000a");
}

TEST(XpsMask, BadMasksNameTheBadPart) {
    EXPECT_EQ(parse_error("", 8), "empty mask");
    EXPECT_EQ(parse_error(" \n", 8), "empty mask");
    EXPECT_EQ(parse_error("1g", 8), "group 1 of 1: 'g' at position 2 is not a hex digit");
    EXPECT_EQ(parse_error("123456789", 64), "group 1 of 1 '123456789' has more than 8 hex digits");
    EXPECT_EQ(parse_error("1,,1", 96), "group 2 of 3 is empty");
    EXPECT_EQ(parse_error("10", 4), "group 1 of 1: bit 4 is beyond the 4 the device has");
    EXPECT_EQ(parse_error("1,0", 32), "group 1 of 2: bit 32 is beyond the 32 the device has");
}

TEST(Xps, RxqsHitWins) {
    Xps x(4, 4, 4);
    ASSERT_FALSE(x.set_rxqs(2, "2"));  // rx queue 1 → tx queue 2
    ASSERT_FALSE(x.set_cpus(3, "f"));
    auto p = x.pick(uint16_t{1}, 0, 0x12345678);
    EXPECT_EQ(p.rule, XpsRule::Rxqs);
    EXPECT_EQ(p.txq, 2);
}

TEST(Xps, RxqsMissFallsToCpus) {
    Xps x(4, 4, 4);
    ASSERT_FALSE(x.set_rxqs(2, "2"));
    ASSERT_FALSE(x.set_cpus(3, "4"));  // cpu 2 → tx queue 3
    auto p = x.pick(uint16_t{0}, 2, 0);
    EXPECT_EQ(p.rule, XpsRule::Cpus);
    EXPECT_EQ(p.txq, 3);
    p = x.pick(std::nullopt, 2, 0);
    EXPECT_EQ(p.rule, XpsRule::Cpus);
    EXPECT_EQ(p.txq, 3);
}

TEST(Xps, BothMissHashesInRange) {
    Xps x(3, 4, 4);
    for (uint32_t h : {0u, 1u, 0x55555555u, 0xaaaaaaaau, 0xffffffffu}) {
        auto p = x.pick(uint16_t{1}, 1, h);
        EXPECT_EQ(p.rule, XpsRule::Hash);
        EXPECT_LT(p.txq, 3);
        EXPECT_EQ(p.txq, (uint64_t{h} * 3) >> 32);
        EXPECT_EQ(x.pick(uint16_t{1}, 1, h).txq, p.txq);
    }
}

TEST(Xps, SeveralQueuesInOneMapChosenByHash) {
    Xps x(4, 2, 2);
    ASSERT_FALSE(x.set_rxqs(1, "1"));
    ASSERT_FALSE(x.set_rxqs(3, "1"));  // rx queue 0 → {1, 3}
    EXPECT_EQ(x.pick(uint16_t{0}, 0, 0).txq, 1);
    EXPECT_EQ(x.pick(uint16_t{0}, 0, 0xffffffff).txq, 3);
    ASSERT_FALSE(x.set_cpus(0, "2"));
    ASSERT_FALSE(x.set_cpus(2, "2"));  // cpu 1 → {0, 2}
    EXPECT_EQ(x.pick(std::nullopt, 1, 0x10000000).txq, 0);
    EXPECT_EQ(x.pick(std::nullopt, 1, 0xf0000000).txq, 2);
}

TEST(Xps, SymmetricAndBadSet) {
    Xps x(4, 4, 2);
    x.symmetric(4);
    for (uint16_t q = 0; q < 4; ++q) {
        auto p = x.pick(q, 0, 0xdeadbeef);
        EXPECT_EQ(p.rule, XpsRule::Rxqs);
        EXPECT_EQ(p.txq, q);
    }
    EXPECT_TRUE(x.set_cpus(0, "4"));  // cpu 2 of 2
    EXPECT_TRUE(x.set_rxqs(4, "1"));  // no tx queue 4
}

// virtnet_set_affinity's groups: 5 CPUs over 2 queues → {0,1,2} and {3,4};
// 2 CPUs over 4 queues wrap; queues beyond `pairs` get no CPU.
TEST(Xps, VirtnetAffinityGroupsCpus) {
    Xps x(2, 2, 5);
    EXPECT_EQ(x.virtnet_set_affinity(2), (std::vector<unsigned>{0, 3}));
    for (unsigned c = 0; c < 5; ++c) {
        const auto p = x.pick(std::nullopt, c, 0);
        EXPECT_EQ(p.rule, XpsRule::Cpus);
        EXPECT_EQ(p.txq, c < 3 ? 0 : 1) << "cpu " << c;
    }
    Xps w(4, 4, 2);
    EXPECT_EQ(w.virtnet_set_affinity(4), (std::vector<unsigned>{0, 1, 0, 1}));
    // cpu 0 is in queues 0 and 2: the hash picks between them.
    EXPECT_EQ(w.pick(std::nullopt, 0, 0x10000000).txq, 0);
    EXPECT_EQ(w.pick(std::nullopt, 0, 0xf0000000).txq, 2);
    EXPECT_EQ(w.virtnet_set_affinity(1), (std::vector<unsigned>{0}));
    EXPECT_EQ(w.pick(std::nullopt, 1, 0xf0000000).txq, 0);
}

TEST(Xps, ThreadStatsCountRuleAndMismatch) {
    XpsThreadStats st(2);
    st.record({1, XpsRule::Cpus}, 0);
    st.record({0, XpsRule::Rxqs}, 0);
    st.record({1, XpsRule::Hash}, std::nullopt);
    EXPECT_EQ(st.txq_used[0].get(), 1u);
    EXPECT_EQ(st.txq_used[1].get(), 2u);
    EXPECT_EQ(st.by_rule[static_cast<std::size_t>(XpsRule::Cpus)].get(), 1u);
    EXPECT_EQ(st.rxq_mismatch.get(), 1u);  // only the first: rx 0, tx 1
}

TEST(Flow, RecordsRxQueue) {
    Flow f(1000);
    EXPECT_FALSE(f.rx_queue());
    f.record_rx_queue(3);
    EXPECT_EQ(f.rx_queue(), 3);
}

TEST(XpsThreads, ReaderSeesRunTimeChange) {
    Xps x(4, 4, 4);
    ASSERT_FALSE(x.set_rxqs(0, "1"));
    std::atomic<bool> saw_new{false}, bad{false};
    std::thread reader([&] {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < deadline) {
            auto p = x.pick(uint16_t{0}, 0, 0);
            if (p.rule != XpsRule::Rxqs || (p.txq != 0 && p.txq != 3)) bad = true;
            if (p.txq == 3) { saw_new = true; return; }
        }
    });
    ASSERT_FALSE(x.set_rxqs(3, "1"));
    ASSERT_FALSE(x.set_rxqs(0, "0"));  // rx queue 0 → only tx queue 3
    reader.join();
    EXPECT_TRUE(saw_new);
    EXPECT_FALSE(bad);
}
