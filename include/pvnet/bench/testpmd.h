// DPDK testpmd's PVP pair as a baseline for `pvnet bench pvp --mode poll`:
// a vhost-user backend (`net_vhost`, macswap forwarding, `start tx_first 32`)
// and a virtio-user frontend (`net_virtio_user`, io forwarding) on one
// socket, one polling lcore each, in a closed loop of the packets the first
// 32 bursts put in flight. Both testpmd processes are driven through their
// interactive prompt on stdin; the counters are read from each process's
// DPDK telemetry socket (`/ethdev/stats,0`) at the edges of the window.
#pragma once

#include <cstdint>
#include <string>

namespace pvnet::bench {

struct TestpmdConfig {
    uint16_t queue_size = 256;             ///< virtio_user queue_size and --txd/--rxd on both sides
    double warmup_s = 1.0;                 ///< after `start tx_first 32`, before the window
    double seconds = 1.0;                  ///< measured window
    int vhost_cpu = 0;                     ///< both lcores of the vhost process: --lcores=0@c,1@c
    int virtio_cpu = 1;                    ///< both lcores of the virtio-user process
    std::string testpmd = "dpdk-testpmd";  ///< a name looked up in PATH, or a path
    std::string workdir = "/tmp";          ///< where the vhost-user socket goes
};

struct TestpmdResult {
    bool ok = false;
    std::string error;            ///< why not ok, with the tail of testpmd's output
    double mpps = 0;              ///< the loop's throughput: virtio_side_mpps
    double vhost_side_mpps = 0;   ///< packets net_vhost transmitted (macswap) per second / 1e6
    double virtio_side_mpps = 0;  ///< packets net_virtio_user transmitted (io fwd) per second / 1e6
};

/// True if `testpmd` (a name in PATH, or a path) is an executable file.
bool testpmd_available(const std::string& testpmd = "dpdk-testpmd") noexcept;

/// Sets up hugepages if needed (root: mounts hugetlbfs at /dev/hugepages and
/// raises the 2 MiB pool; both undone after the run, lab/hugepages.h), starts the pair, measures,
/// stops both processes (always: quit, then SIGTERM, then SIGKILL, each wait
/// bounded; the children also get SIGKILL if the calling thread dies), and
/// removes the socket, the hugepage files and the DPDK runtime directories.
/// Run it in the same boosted autogroup as the pvnet run it is compared with:
/// the testpmd processes inherit the caller's. Never throws.
TestpmdResult run_testpmd_pvp(const TestpmdConfig& cfg) noexcept;

}  // namespace pvnet::bench
