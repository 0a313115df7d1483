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
#include <vector>

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


// ---- a vhost-user backend under test, DPDK's virtio-user as its guest ------
//
// The client is dpdk-testpmd with net_virtio_user (io forwarding, one
// forwarding lcore; `start tx_first 32` puts 32 bursts in flight), the
// backend either testpmd's net_vhost in macswap mode or a command speaking
// pvnet serve's contract: it prints a line "ready" once its socket listens,
// and on SIGTERM a line "final k=v ..." with at least rx_pkts (frames taken
// from the guest's tx ring) and tx_pkts (frames put in its rx ring), then
// exits. DPDK 19.02 and later back --no-huge with memfd, which is what a
// vhost-user backend needs to map guest memory, so `hugepages = false`
// runs both DPDK processes without hugepages (-m 256).

struct VirtioUserPeerConfig {
    /// Empty: testpmd net_vhost (macswap). Otherwise the backend's argv;
    /// every argument equal to "{sock}" is replaced by the socket path.
    std::vector<std::string> backend_command;
    int backend_cpu = 0;                   ///< testpmd backend's lcores (a command places itself)
    int client_cpu = 1;                    ///< both lcores of the client: --lcores=0@c,1@c
    uint16_t queue_size = 256;             ///< virtio_user queue_size, --txd/--rxd
    uint16_t frame_bytes = 64;             ///< client `set txpkts N`
    /// virtio_user's in_order devarg: true (DPDK's default) asks for
    /// VIRTIO_F_IN_ORDER and, negotiated, takes the client's in-order rx/tx paths.
    bool in_order = true;
    double warmup_s = 1.0;
    double seconds = 1.0;                  ///< measured window
    double ready_timeout_s = 10.0;         ///< a command backend's wait for its "ready" line
    bool hugepages = true;                 ///< false: --no-huge -m 256 (memfd)
    std::string testpmd = "dpdk-testpmd";
    std::string workdir = "/tmp";          ///< the socket
};

struct VirtioUserPeerResult {
    bool ok = false;
    std::string error;
    double rx_mpps = 0;            ///< client rx rate in the window: the loop's throughput
    double tx_mpps = 0;            ///< client tx rate in the window
    uint64_t window_rx_pkts = 0;   ///< client rx in the window
    double backend_cpu_s = 0;      ///< backend process utime+stime in the window
    /// Totals once the client stopped and the backend drained: the client's
    /// port counters, and the backend's (testpmd telemetry, or its final line).
    uint64_t client_rx = 0, client_tx = 0, backend_rx = 0, backend_tx = 0;
    std::string backend_final;     ///< a command backend's final line
    /// From the client's virtio init log (pmd.net.virtio.init at debug): the
    /// backend's offer as the client's device presents it (devargs such as
    /// in_order=0 mask it), what the client negotiated (0: not logged), and
    /// the rx and tx paths it chose ("inorder", "mergeable buffer", ...).
    uint64_t offered_features = 0, features = 0;
    std::string rx_path, tx_path;
};

/// Starts backend then client, measures, stops the client's forwarding,
/// reads every counter, stops both (bounded; SIGTERM for a command backend)
/// and removes the socket and DPDK files. Never throws.
VirtioUserPeerResult run_virtio_user_peer(const VirtioUserPeerConfig& cfg) noexcept;

}  // namespace pvnet::bench
