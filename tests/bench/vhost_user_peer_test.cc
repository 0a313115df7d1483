// DPDK's virtio-user (dpdk-testpmd, io forwarding, `start tx_first 32`) as
// the guest of a vhost-user backend: testpmd's own net_vhost (macswap), and
// `pvnet serve --macswap` once the built pvnet has it. Both DPDK processes
// run with --no-huge (memfd), so no root or hugepages are needed. Each run
// is bounded by run_virtio_user_peer's own timeouts.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "pvnet/bench/testpmd.h"
#include "pvnet/lab/child.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::bench {
namespace {

VirtioUserPeerConfig no_huge_config() {
    VirtioUserPeerConfig c;
    c.hugepages = false;
    c.warmup_s = 0.5;
    c.seconds = 1.0;
    c.queue_size = 256;
    return c;
}

// Frames went both ways, and the two ends agree: once the guest stopped and
// the backend drained, the backend took exactly what the guest sent, and it
// put in the guest's rx ring what the guest read plus at most one ring left
// unread there.
void expect_counts_agree(const VirtioUserPeerResult& r, uint16_t qsize) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.client_tx, 0u);
    EXPECT_GT(r.client_rx, 0u);
    EXPECT_GT(r.backend_rx, 0u);
    EXPECT_GT(r.backend_tx, 0u);
    EXPECT_LE(r.backend_rx, r.client_tx);
    EXPECT_GE(r.backend_rx + qsize, r.client_tx);
    EXPECT_GE(r.backend_tx, r.client_rx);
    EXPECT_LE(r.backend_tx, r.client_rx + qsize);
    EXPECT_GT(r.window_rx_pkts, 0u);
}

constexpr uint64_t kInOrder = virtio::feature_mask(virtio::VIRTIO_F_IN_ORDER);

// The client's record of the features: offered and negotiated IN_ORDER (and
// its in-order paths) with in_order=1, neither with in_order=0.
void expect_in_order(const VirtioUserPeerResult& r, bool in_order) {
    ASSERT_TRUE(r.ok) << r.error;
    ASSERT_NE(r.features, 0u) << "the client logged no negotiated features";
    EXPECT_NE(r.features & virtio::feature_mask(virtio::VIRTIO_F_VERSION_1), 0u);
    EXPECT_EQ((r.features & kInOrder) != 0, in_order) << std::hex << r.features;
    EXPECT_EQ((r.offered_features & kInOrder) != 0, in_order) << std::hex << r.offered_features;
    EXPECT_EQ(r.rx_path == "inorder", in_order) << r.rx_path;
    EXPECT_EQ(r.tx_path == "inorder", in_order) << r.tx_path;
}

TEST(VirtioUserPeer, DpdkVhostBackendNoHugepages) {
    ASSERT_TRUE(testpmd_available()) << "dpdk-testpmd not installed (Debian: dpdk; make deps installs it)";
    const auto cfg = no_huge_config();
    const auto r = run_virtio_user_peer(cfg);
    expect_counts_agree(r, cfg.queue_size);
    expect_in_order(r, true);
}

TEST(VirtioUserPeer, BackendThatNeverListensFailsBounded) {
    ASSERT_TRUE(testpmd_available()) << "dpdk-testpmd not installed (Debian: dpdk; make deps installs it)";
    auto cfg = no_huge_config();
    cfg.backend_command = {"sleep", "30"};  // never prints ready
    cfg.ready_timeout_s = 2;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = run_virtio_user_peer(cfg);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("ready"), std::string::npos) << r.error;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(25));
}

struct ServeCase {
    const char* mode;
    bool in_order;  ///< the client's in_order devarg
};

class PvnetServePeer : public ::testing::TestWithParam<ServeCase> {};

// The client's default (in_order=1) negotiates IN_ORDER with pvnet serve and
// runs its in-order paths, which take used entries by position: every frame
// back and the counts agree only if pvnet used them in order.
TEST_P(PvnetServePeer, MacswapCountsAgree) {
    ASSERT_TRUE(testpmd_available()) << "dpdk-testpmd not installed (Debian: dpdk; make deps installs it)";
    auto cfg = no_huge_config();
    cfg.in_order = GetParam().in_order;
    cfg.backend_command = {PVNET_EXE, "serve", "--vhost-user", "{sock}", "--macswap",
                           "--mode", GetParam().mode, "--backend-cpu", "0"};
    const auto r = run_virtio_user_peer(cfg);
    expect_counts_agree(r, cfg.queue_size);
    EXPECT_FALSE(r.backend_final.empty());
    expect_in_order(r, cfg.in_order);
}

INSTANTIATE_TEST_SUITE_P(Modes, PvnetServePeer,
                         ::testing::Values(ServeCase{"event", true}, ServeCase{"poll", true},
                                           ServeCase{"poll", false}),
                         [](const ::testing::TestParamInfo<ServeCase>& p) {
                             return std::string(p.param.mode) +
                                    (p.param.in_order ? "InOrder" : "NotInOrder");
                         });

// DPDK's memory in 2 MiB hugepages (hugetlbfs fds in SET_MEM_TABLE, as `pvnet
// bench vhost-user` runs it): pvnet maps whole huge pages. Root: the run
// reserves the hugepages.
TEST(VirtioUserPeer, PvnetServeMapsHugepageMemory) {
    ASSERT_TRUE(testpmd_available()) << "dpdk-testpmd not installed (Debian: dpdk; make deps installs it)";
    auto cfg = no_huge_config();
    cfg.hugepages = true;
    cfg.backend_command = {PVNET_EXE, "serve", "--vhost-user", "{sock}", "--macswap", "--backend-cpu", "0"};
    const auto r = run_virtio_user_peer(cfg);
    expect_counts_agree(r, cfg.queue_size);
}

}  // namespace
}  // namespace pvnet::bench
