// PVP end to end (bench::run_pvp): a flood generator behind VhostNet's
// handle_rx, a guest thread doing io forwarding through VirtioNet, a sink
// behind handle_tx. Checked by accounting only, never by time (STYLE.md
// §11): with backpressure every frame arrives once, in order and intact;
// without it (testpmd io forwarding) every frame is delivered or counted
// as a drop, and what the sink never saw is exactly the counted drops.
// Waits are bounded by run_pvp's own deadlines (60 s per run, 5 s drain).
#include "pvnet/bench/pvp.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "pvnet/backend/vhost_net.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PVNET_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PVNET_TEST_SANITIZED 1
#endif
#endif

namespace pvnet::bench {
namespace {

#ifdef PVNET_TEST_SANITIZED
// Sanitized builds run several times slower; the Release build keeps the
// full counts.
constexpr uint64_t kManyFrames = 200'000;
constexpr uint64_t kSomeFrames = 50'000;
#else
constexpr uint64_t kManyFrames = 1'000'000;
constexpr uint64_t kSomeFrames = 200'000;
#endif

/// A test config: unpinned threads, a short warm-up, stop after `frames`.
PvpConfig config(uint32_t frame_bytes, uint64_t frames) {
    PvpConfig c;
    c.frame_bytes = frame_bytes;
    c.queue_size = 256;
    c.frames = frames;
    c.backpressure = true;
    c.warmup_s = 0.05;
    c.backend_cpu = -1;
    c.frontend_cpu = -1;
    return c;
}

void print(const char* name, const PvpConfig& c, const PvpResult& r) {
    std::printf(
        "[pvp] %s: frame %u B, queue %u, %s, event_idx %d, backpressure %d: generated %llu "
        "delivered %llu drop_tx_full %llu drop_other %llu lost %llu corrupt %llu reordered %llu "
        "duplicates %llu | %.3f Mpps, rx/tx max run %llu/%llu pkts, ok %d%s%s\n",
        name, c.frame_bytes, c.queue_size, c.mode == backend::RunMode::Poll ? "poll" : "event",
        c.event_idx ? 1 : 0, c.backpressure ? 1 : 0, static_cast<unsigned long long>(r.generated),
        static_cast<unsigned long long>(r.delivered),
        static_cast<unsigned long long>(r.drop_tx_full),
        static_cast<unsigned long long>(r.drop_other), static_cast<unsigned long long>(r.lost),
        static_cast<unsigned long long>(r.corrupt), static_cast<unsigned long long>(r.reordered),
        static_cast<unsigned long long>(r.duplicates), r.mpps,
        static_cast<unsigned long long>(r.rx_max_run_pkts),
        static_cast<unsigned long long>(r.tx_max_run_pkts), r.ok ? 1 : 0,
        r.error.empty() ? "" : ": ", r.error.c_str());
    std::fflush(stdout);
}

/// Every hop after the drain: frames in = frames out + drops by reason.
void expect_hops_balance(const PvpResult& r) {
    // Generator → rx ring: each frame into guest buffers, or taken and dropped.
    EXPECT_EQ(r.generated, r.be_rx + r.be_rx_no_room);
    // Rx ring → guest: a used entry per frame delivered, and a 0-length one
    // per no-room drop or bad chain, which the guest drops as too short.
    EXPECT_EQ(r.guest_rx, r.be_rx + r.be_rx_no_room + r.be_rx_bad_chain);
    EXPECT_EQ(r.guest_rx_bad_len, r.be_rx_no_room + r.be_rx_bad_chain);
    // Guest → tx ring: forwarded, or dropped on a full ring.
    EXPECT_EQ(r.guest_rx - r.guest_rx_bad_len - r.guest_rx_multi_buf,
              r.guest_tx + r.drop_tx_full);
    // Tx ring → sink: every chain consumed (the worker stopped after the drain).
    EXPECT_EQ(r.guest_tx, r.be_tx + r.be_tx_bad_chain + r.be_tx_port);
    EXPECT_EQ(r.be_tx, r.delivered);
}

/// With backpressure nothing may be dropped: each frame arrives once, in order.
void expect_lossless(const PvpResult& r, uint64_t frames) {
    expect_hops_balance(r);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_GE(r.generated, frames);
    EXPECT_EQ(r.delivered, r.generated);
    EXPECT_EQ(r.lost, 0u);
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.reordered, 0u);
    EXPECT_EQ(r.duplicates, 0u);
    EXPECT_EQ(r.drop_tx_full, 0u);
    EXPECT_EQ(r.drop_other, 0u);
}

TEST(Pvp, BackpressureDeliversEverySmallFrameInOrder) {
    const PvpConfig c = config(64, kManyFrames);
    const PvpResult r = run_pvp(c);
    print("64B event", c, r);
    expect_lossless(r, kManyFrames);
}

TEST(Pvp, BackpressureDeliversEveryLargeFrameInOrder) {
    const PvpConfig c = config(1518, kSomeFrames);
    const PvpResult r = run_pvp(c);
    print("1518B event", c, r);
    expect_lossless(r, kSomeFrames);
}

TEST(Pvp, BackpressureInPollMode) {
    PvpConfig c = config(64, kSomeFrames);
    c.mode = backend::RunMode::Poll;
    const PvpResult r = run_pvp(c);
    print("64B poll", c, r);
    expect_lossless(r, kSomeFrames);
}

TEST(Pvp, BackpressureWithoutEventIdx) {
    PvpConfig c = config(64, kSomeFrames);
    c.event_idx = false;
    const PvpResult r = run_pvp(c);
    print("64B event, no EVENT_IDX", c, r);
    expect_lossless(r, kSomeFrames);
}

TEST(Pvp, BackpressureWithWeightOfTwiceTheQueueSizeAndNoLimit) {
    // Seed 001's "baseline" (tx: 2 x queue size, rx: bytes only) and "none".
    PvpConfig c = config(64, kSomeFrames);
    c.tx_weight = {2u * c.queue_size, backend::kByteWeight};
    c.weight = {0, backend::kByteWeight};
    PvpResult r = run_pvp(c);
    print("64B event, baseline weights", c, r);
    expect_lossless(r, kSomeFrames);

    c.tx_weight = c.weight = {0, 0};
    r = run_pvp(c);
    print("64B event, no limit", c, r);
    expect_lossless(r, kSomeFrames);
}

/// Without backpressure (testpmd io forwarding) the guest drops what its tx
/// ring cannot take: every frame is delivered or a counted drop, and the
/// frames the sink never saw are exactly those drops.
void expect_accounted(const PvpResult& r) {
    expect_hops_balance(r);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.generated, 0u);
    EXPECT_GT(r.delivered, 0u);
    EXPECT_EQ(r.delivered + r.drop_tx_full + r.drop_other, r.generated);
    EXPECT_EQ(r.lost, r.drop_tx_full + r.drop_other);
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.duplicates, 0u);
    // A drop is a gap, never a late arrival: the rings keep order.
    EXPECT_EQ(r.reordered, 0u);
}

TEST(Pvp, FloodWithoutBackpressureAccountsForEveryFrame) {
    PvpConfig c = config(64, 0);
    c.backpressure = false;
    c.seconds = 0.3;
    const PvpResult r = run_pvp(c);
    print("64B flood, io-forward", c, r);
    expect_accounted(r);
}

TEST(Pvp, FloodWithoutBackpressureInPollModeWithoutEventIdx) {
    PvpConfig c = config(1518, 0);
    c.backpressure = false;
    c.seconds = 0.3;
    c.mode = backend::RunMode::Poll;
    c.event_idx = false;
    const PvpResult r = run_pvp(c);
    print("1518B flood, io-forward, poll, no EVENT_IDX", c, r);
    expect_accounted(r);
}

TEST(Pvp, RejectsAFrameSizeOutOfRange) {
    const PvpResult r = run_pvp(config(63, 1000));
    EXPECT_FALSE(r.ok);
    EXPECT_FALSE(r.error.empty());
    EXPECT_EQ(r.generated, 0u);
}

}  // namespace
}  // namespace pvnet::bench
