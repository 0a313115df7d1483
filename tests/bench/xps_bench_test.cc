// The XPS experiment end to end (bench::run_xps_bench): RSS spreads the
// flows over both rx queues, and what each variant promises about the tx
// queue shows in its counters, never in its timing (STYLE.md §11).
#include "pvnet/bench/xps_bench.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace pvnet::bench {
namespace {

XpsBenchConfig config(XpsVariant v, uint16_t threads, bool pin) {
    XpsBenchConfig c;
    c.variant = v;
    c.threads = threads;
    c.pin_threads = pin;
    c.flows = 32;
    c.rate = 5000;
    c.warmup_s = 0.05;
    c.seconds = 0.3;
    return c;
}

// Every request is answered or counted, and both queue pairs carried both
// directions.
void expect_accounted_on_both_queues(const XpsBenchResult& r) {
    ASSERT_TRUE(r.ok) << r.error;
    ASSERT_EQ(r.queues.size(), 2u);
    EXPECT_GT(r.answered, 0u);
    // The client stops sending when the window closes and waits (up to 1 s)
    // for the rest: every request is answered or dropped with a count.
    EXPECT_LE(r.sent - r.answered, r.drop_sock_full + r.drop_no_buf);
    EXPECT_EQ(r.unmatched, 0u);
    EXPECT_EQ(r.drop_bad_reply, 0u);
    uint64_t rx = 0;
    for (const auto& q : r.queues) {
        EXPECT_GT(q.steered, 0u) << "RSS left a queue without flows";
        EXPECT_GT(q.rx_pkts, 0u);
        rx += q.rx_pkts;
    }
    // Guest rx: every request delivered, answered or dropped in the guest
    // (counted) or a reply still in flight at the end.
    EXPECT_LE(rx, r.sent);
    EXPECT_GE(rx, r.answered + r.drop_sock_full + r.drop_no_buf);
}

TEST(XpsBench, SymmetricRepliesLeaveOnTheRequestsQueue) {
    const auto r = run_xps_bench(config(XpsVariant::Symmetric, 4, false));
    expect_accounted_on_both_queues(r);
    EXPECT_DOUBLE_EQ(r.same_queue_share, 1.0);
    uint64_t replies = 0;
    for (const auto& t : r.threads) {
        EXPECT_EQ(t.rxq_mismatch, 0u);
        for (uint64_t n : t.txq_used) replies += n;
    }
    EXPECT_GE(replies, r.answered);
    for (const auto& q : r.queues) EXPECT_GT(q.tx_pkts, 0u);
}

// Default XPS has only the CPU map, which covers every CPU: it decides
// every reply. Symmetric's rx-queue map decides every one instead.
TEST(XpsBench, EachVariantsRuleDecides) {
    for (const XpsVariant v : {XpsVariant::Default, XpsVariant::Symmetric}) {
        const auto r = run_xps_bench(config(v, 4, false));
        expect_accounted_on_both_queues(r);
        for (const auto& t : r.threads) {
            const uint64_t total = t.by_rule[0] + t.by_rule[1] + t.by_rule[2];
            EXPECT_GT(total, 0u);
            EXPECT_EQ(t.by_rule[v == XpsVariant::Default ? 1 : 0], total) << to_string(v);
        }
    }
}

TEST(XpsBench, CountsAgreeBetweenThreadsAndClient) {
    const auto r = run_xps_bench(config(XpsVariant::Default, 8, false));
    expect_accounted_on_both_queues(r);
    uint64_t mismatch = 0, replies = 0;
    for (const auto& t : r.threads) {
        mismatch += t.rxq_mismatch;
        for (uint64_t n : t.txq_used) replies += n;
    }
    // What the threads sent on another queue than the request's, the client
    // saw arrive on another queue (replies in flight at the end aside).
    const double client_other = (1.0 - r.same_queue_share) * static_cast<double>(r.answered);
    EXPECT_NEAR(static_cast<double>(mismatch), client_other, static_cast<double>(replies - r.answered) + 1);
}

}  // namespace
}  // namespace pvnet::bench
