// VIRTIO_F_IN_ORDER over VhostNet's handlers (called directly): the device
// uses every chain in the order the guest made it available, on the paths
// that give chains back or drop them — tx with the port full (Retry: the
// chain is given back and offered again), tx chains with a writable part or
// shorter than the header (used with 0), mergeable rx with a port that peeks
// (too few buffers: all given back) and one that cannot (room for the
// largest frame: the surplus given back), rx chains with a readable part and
// frames too big for the buffers (used with 0). A seeded random mix of all
// of them, checked from the guest side (each used token is the oldest one
// posted) and by the device's own check (no PushOutOfOrder, nothing broken).
#include "pvnet/backend/vhost_net.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>
#include <string>

#include "vhost_net_harness.h"

namespace pvnet::backend {
namespace {

using namespace harness;  // NOLINT(google-build-using-namespace): the test bench

constexpr uint64_t kInOrder = virtio::feature_mask(virtio::VIRTIO_F_IN_ORDER);

struct Mode {
    bool mergeable;
    bool event_idx;
};

class InOrderPaths : public ::testing::TestWithParam<Mode> {};
INSTANTIATE_TEST_SUITE_P(Modes, InOrderPaths,
                         ::testing::Values(Mode{true, false}, Mode{true, true}, Mode{false, false},
                                           Mode{false, true}),
                         [](const ::testing::TestParamInfo<Mode>& p) {
                             return std::string(p.param.mergeable ? "Mergeable" : "OneBuffer") +
                                    (p.param.event_idx ? "EventIdx" : "NoEventIdx");
                         });

/// The guest's side of one ring: tokens in the order posted; each used
/// entry must name the oldest.
struct Fifo {
    std::deque<uint64_t> posted;
    uint64_t used = 0;
    void check(const std::vector<UsedBuf>& got, const char* ring) {
        for (const UsedBuf& u : got) {
            ASSERT_FALSE(posted.empty()) << ring << ": used entry with nothing posted";
            ASSERT_EQ(u.token, posted.front()) << ring << ": used entry " << used << " out of order";
            posted.pop_front();
            ++used;
        }
    }
};

TEST_P(InOrderPaths, EveryChainIsUsedInTheOrderPostedOnEveryPath) {
    Harness h({.size = 64, .event_idx = GetParam().event_idx, .mergeable_rx = GetParam().mergeable,
               .extra_features = kInOrder});
    // Slots: rx tokens in [0, 1024), tx seqs in [1024, 2048) of each 2048 (the
    // data area's slots); at most 64 of each in flight.
    const auto rx_token = [](uint64_t k) { return k % 1024 + 2048 * (k / 1024); };
    const auto tx_seq = [](uint64_t k) { return 1024 + k % 1024 + 2048 * (k / 1024); };
    std::mt19937 rng(24);
    const auto pick = [&rng](uint32_t lo, uint32_t hi) {
        return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    };
    Fifo rx, tx;
    uint64_t nrx = 0, ntx = 0;
    std::vector<uint32_t> lens(64);
    for (uint32_t& l : lens) l = pick(1, 8) == 1 ? pick(2100, 6000) : pick(kSeqBytes, 1600);
    h.port.rx_lens = lens;
    for (int round = 0; round < 3000; ++round) {
        // The guest posts rx buffers: mostly 2 KiB, some small, now and then a
        // chain with a readable part (a defect the device drops).
        for (uint32_t n = pick(0, 8); n != 0 && h.rxd().num_free() >= 2; --n) {
            const uint64_t t = rx_token(nrx);
            const Buf b{Harness::slot_gpa(t), pick(1, 4) == 1 ? pick(64, 512) : Harness::kSlotBytes};
            ring::AddStatus st;
            if (pick(1, 40) == 1) {
                const Buf r{Harness::slot_gpa(t), 16};
                const Buf w{Harness::slot_gpa(t) + 16, 1024};
                st = h.rxd().add(std::span<const Buf>(&r, 1), std::span<const Buf>(&w, 1), t);
            } else {
                st = h.add_rx(t, b.len);
            }
            ASSERT_EQ(st, ring::AddStatus::Ok);
            rx.posted.push_back(t);
            ++nrx;
        }
        h.rxd().publish();
        // ... and tx packets: some too short for the header, some with a writable part.
        for (uint32_t n = pick(0, 8); n != 0 && h.txd().num_free() >= 2; --n) {
            const uint64_t s = tx_seq(ntx);
            ring::AddStatus st;
            const uint32_t kind = pick(1, 30);
            if (kind == 1) {
                st = h.add_tx(s, kHdr - 2);
            } else if (kind == 2) {
                write_packet(h.host(Harness::slot_gpa(s)), s, 64);
                const Buf r{Harness::slot_gpa(s), 64};
                const Buf w{Harness::slot_gpa(s) + 64, 64};
                st = h.txd().add(std::span<const Buf>(&r, 1), std::span<const Buf>(&w, 1), s);
            } else {
                st = h.add_tx(s, pick(kSeqBytes, 1500));
            }
            ASSERT_EQ(st, ring::AddStatus::Ok);
            tx.posted.push_back(s);
            ++ntx;
        }
        h.txd().publish();
        // The world: frames arriving, a port that peeks or not, a full tx port.
        h.port.peek = pick(0, 1) == 1;
        h.port.rx_left += pick(0, 6);
        h.port.tx_retry_left = pick(1, 4) == 1 ? pick(1, 3) : 0;
        if (pick(0, 1) == 1) {
            run_rx(h);
            run_tx(h);
        } else {
            run_tx(h);
            run_rx(h);
        }
        rx.check(Harness::reap(h.rxd()), "rx");
        tx.check(Harness::reap(h.txd()), "tx");
        if (::testing::Test::HasFatalFailure()) return;
        ASSERT_FALSE(h.dev().rx_queue().broken()) << to_string(h.dev().rx_queue().broken_reason());
        ASSERT_FALSE(h.dev().tx_queue().broken()) << to_string(h.dev().tx_queue().broken_reason());
    }
    for (const auto* q : {&h.dev().rx_queue(), &h.dev().tx_queue()}) {
        EXPECT_EQ(q->stats().errors.get(ring::RingError::PushOutOfOrder), 0u);
        EXPECT_EQ(q->stats().errors.get(ring::RingError::PushIdNotInflight), 0u);
    }
    // Every path ran, many times.
    const VhostNetStats& s = h.stats();
    EXPECT_GT(s.tx_retry.get(), 100u);
    EXPECT_GT(s.tx_drop_bad_chain.get(), 100u);
    EXPECT_GT(s.rx_drop_bad_chain.get(), 50u);
    EXPECT_GT(s.rx_drop_no_room.get(), 10u);
    EXPECT_GT(rx.used, 5000u);
    EXPECT_GT(tx.used, 5000u);
    if (GetParam().mergeable) {
        EXPECT_GT(s.rx_merged_pkts.get(), 100u);
        EXPECT_GT(s.rx_ring_short.get(), 10u) << "chains given back for a packet that peeked";
    }
}

}  // namespace
}  // namespace pvnet::backend
