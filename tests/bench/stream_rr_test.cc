// The stream and RR experiments end to end (bench::run_stream_rr): every
// variant runs, and what the variant promises shows in its counters, never
// in its timing (STYLE.md §11). Each run is bounded by its own window.
#include "pvnet/bench/stream_rr.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstdio>
#include <string>

#include "pvnet/frontend/virtio_net.h"
#include "pvnet/port/echo_port.h"

namespace pvnet::bench {
namespace {

constexpr TxVariant kVariants[] = {TxVariant::Upstream, TxVariant::Napi, TxVariant::NapiCoalesce,
                                   TxVariant::NapiAtRx, TxVariant::NapiCoalesceAtRx};

bool at_rx(TxVariant v) { return v == TxVariant::NapiAtRx || v == TxVariant::NapiCoalesceAtRx; }
bool coalesce(TxVariant v) {
    return v == TxVariant::NapiCoalesce || v == TxVariant::NapiCoalesceAtRx;
}

StreamRrConfig config(Workload w, TxVariant v, uint16_t flows) {
    StreamRrConfig c;
    c.workload = w;
    c.variant = v;
    c.flows = flows;
    c.warmup_s = 0.05;
    c.seconds = 0.15;
    c.backend_cpu = c.frontend_cpu = -1;
    return c;
}

StreamRrResult run(const StreamRrConfig& c) {
    const Workload w = c.workload;
    const TxVariant v = c.variant;
    const uint16_t flows = c.flows;
    StreamRrResult r = run_stream_rr(c);
    std::printf("[%s %ux %s] ok %d %s gbps %.2f trans/s %.0f tx irq/s %.0f at-rx %.3f timers/s %.0f "
                "stalls %llu\n",
                w == Workload::Stream ? "stream" : "rr", flows, to_string(v), r.ok ? 1 : 0,
                r.error.c_str(), r.goodput_gbps, r.trans_per_s, r.tx_interrupts_per_s, r.tx_reaped_at_rx,
                r.coalesce_timer_fires_per_s, static_cast<unsigned long long>(r.sndbuf_stalls));
    if (r.ok) {
        // Frames in = frames out + drops by reason, hop by hop, after the
        // run. At most a ring's worth is left in flight (tx: the server's
        // queue was full; rx: used, not reaped when the guest stopped).
        const uint64_t ring = c.queue_size;
        EXPECT_EQ(r.guest_tx, r.be_tx + r.be_tx_bad_chain + r.be_tx_port + r.tx_in_flight);
        EXPECT_LE(r.tx_in_flight, ring);
        EXPECT_EQ(r.be_tx, r.srv_requests);
        EXPECT_EQ(r.be_tx_port, r.srv_drop_bad_request);
        EXPECT_EQ(r.be_tx_retry, r.srv_retry);
        EXPECT_EQ(r.srv_requests,
                  r.srv_unanswered + r.srv_responses + r.srv_drop_no_room + r.srv_pending);
        EXPECT_EQ(r.be_rx, r.srv_responses);
        EXPECT_EQ(r.be_rx_no_room, r.srv_drop_no_room);
        const uint64_t used = r.be_rx + r.be_rx_no_room + r.be_rx_bad_chain;
        EXPECT_LE(r.guest_rx, used);
        EXPECT_LE(used - std::min(used, r.guest_rx), ring);
        EXPECT_LE(r.guest_rx_bad_len, r.be_rx_no_room + r.be_rx_bad_chain);
        // A well-formed guest and server: no drop of any reason.
        EXPECT_EQ(r.be_tx_bad_chain + r.be_tx_port + r.srv_drop_no_room + r.be_rx_bad_chain +
                      r.guest_rx_bad_len + r.guest_rx_length_errors,
                  0u);
    }
    return r;
}

StreamRrResult run(Workload w, TxVariant v, uint16_t flows) { return run(config(w, v, flows)); }

void expect_variant_shape(TxVariant v, const StreamRrResult& r) {
    // Orphaned credit is returned at transmit: the sender can never stall.
    if (v == TxVariant::Upstream) {
        EXPECT_EQ(r.sndbuf_stalls, 0u);
    }
    if (at_rx(v)) {
        EXPECT_GT(r.tx_reaped_at_rx, 0.0);
    } else {
        EXPECT_EQ(r.tx_reaped_at_rx, 0.0);
    }
    if (!coalesce(v)) {
        EXPECT_EQ(r.coalesce_timer_fires_per_s, 0.0);
    }
}

TEST(StreamRrBench, StreamEveryVariantMovesFullFrames) {
    for (TxVariant v : kVariants) {
        SCOPED_TRACE(to_string(v));
        const StreamRrResult r = run(Workload::Stream, v, 1);
        ASSERT_TRUE(r.ok) << r.error;
        EXPECT_GT(r.goodput_gbps, 0.0);
        // 1514-byte frames behind the 12-byte virtio_net_hdr, nothing else;
        // goodput is their UDP payload, the frame rate excludes the header.
        EXPECT_DOUBLE_EQ(r.bytes_per_pkt, 1514.0 + port::EchoPort::kHdrBytes);
        EXPECT_NEAR(r.goodput_gbps / r.frame_gbps, (1514.0 - 42) / 1514, 1e-9);
        expect_variant_shape(v, r);
    }
}

TEST(StreamRrBench, RrEveryVariantAnswersRequests) {
    for (TxVariant v : kVariants) {
        SCOPED_TRACE(to_string(v));
        const StreamRrResult r = run(Workload::Rr, v, 1);
        ASSERT_TRUE(r.ok) << r.error;
        EXPECT_GT(r.trans_per_s, 0.0);
        EXPECT_GT(r.p50_us, 0.0);
        EXPECT_GE(r.p99_us, r.p50_us);
        EXPECT_DOUBLE_EQ(r.bytes_per_pkt, 64.0 + port::EchoPort::kHdrBytes);
        expect_variant_shape(v, r);
        // Closed loop: one request per flow at a time, each answered once.
        EXPECT_EQ(r.max_outstanding, 1u);
        EXPECT_EQ(r.rr_unmatched, 0u);
        // One request outstanding never reaches 64 frames: with tx
        // coalescing only the timer can signal its completion.
        if (coalesce(v)) {
            EXPECT_GT(r.coalesce_timer_fires_per_s, 0.0);
        }
    }
}

TEST(StreamRrBench, ManyFlowsShareTheQueue) {
    const StreamRrResult s = run(Workload::Stream, TxVariant::Napi, 10);
    ASSERT_TRUE(s.ok) << s.error;
    EXPECT_GT(s.goodput_gbps, 0.0);
    const StreamRrResult r = run(Workload::Rr, TxVariant::NapiAtRx, 10);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.trans_per_s, 0.0);
}

// The open loop never skips a request because an earlier one is
// outstanding: a server that takes 2 ms per request (500/s) offered 1,000/s
// has several requests of the one flow outstanding at once, and every
// response still finds its request.
TEST(StreamRrBench, OpenLoopKeepsSendingWhileRequestsAreOutstanding) {
    StreamRrConfig c = config(Workload::Rr, TxVariant::Napi, 1);
    c.rr_rate = 1000;
    c.server_ns = 2'000'000;
    c.tx_weight_pkts = 1;  // rx (the responses) served after every request
    const StreamRrResult r = run(c);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GE(r.max_outstanding, 2u);
    EXPECT_GT(r.trans_per_s, 0.0);
    EXPECT_EQ(r.rr_unmatched, 0u);
    EXPECT_EQ(r.rr_abandoned, 0u);
    EXPECT_EQ(r.offered_per_s, 1000.0);
}

// Seed 000's unit: the window closes once the fixed work is done.
TEST(StreamRrBench, FixedWorkClosesTheWindow) {
    StreamRrConfig c = config(Workload::Stream, TxVariant::Upstream, 1);
    c.work = 20'000'000;  // 20 MB of payload
    c.seconds = 30;       // the bound; a healthy run takes milliseconds
    const StreamRrResult r = run(c);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.work_completed);
    EXPECT_GE(r.work, c.work);
    EXPECT_GT(r.gcycles, 0.0);
}

TEST(StreamRrBench, RejectsNoFlows) {
    StreamRrConfig c;
    c.flows = 0;
    const StreamRrResult r = run_stream_rr(c);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, "no flows");
}

}  // namespace
}  // namespace pvnet::bench
