// Netfront: the grant frontend of issue 13 (seed 004's xen-netfront), a
// process of its own. Its memory is two memfds: the shared one (grant table
// and rings, which the backend maps whole) and the data one, whose pages it
// grants one at a time. It connects to a Netback, agrees on a mode through
// the store, then streams GenPort frames to the backend's sink (tx) or
// checks the backend's generated frames (rx).
//
// Without persistent grants every packet's page is granted afresh and
// revoked when the backend is done with it (gnttab_grant_foreign_access /
// gnttab_end_foreign_access; a revoke the backend still holds is retried
// later, the page untouched meanwhile). With them, as the seed's netfront
// does, a pool of ring-size pages per direction is granted once, and packet
// data is copied into (tx) or out of (rx) those pages: the whole page, or
// only the packet's bytes (copy_whole_page).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pvnet/grant/wire.h"
#include "pvnet/grant/xenbus.h"
#include "pvnet/util/result.h"

namespace pvnet::grant {

struct NetfrontConfig {
    std::string socket_path;
    std::string store_dir;
    uint16_t domid = 1;
    bool offer_persistent = true;
    uint16_t ring_size = 256;
    uint16_t frame_bytes = 1514;
    bool copy_whole_page = false;
    int handshake_ms = 5000;
    /// Changes the hello before it is sent (tests play a hostile frontend).
    std::function<void(GrantHello&)> edit_hello;
};

enum class Direction : uint8_t { Tx, Rx };

/// One phase's outcome.
struct PhaseResult {
    uint64_t frames = 0;  ///< tx: completed by the backend; rx: received and valid
    uint64_t bytes = 0;   ///< their Ethernet bytes
    double seconds = 0;
    uint64_t cpu_ns = 0;      ///< this thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
    uint64_t grants = 0;      ///< grant entries written (per packet without persistence)
    uint64_t revokes = 0;     ///< end_access that succeeded
    uint64_t revoke_busy = 0;  ///< end_access refused (backend held it): retried later
    uint64_t copy_bytes = 0;  ///< bytes memcpy'd to or from the persistent pool
    uint64_t sink_lost = 0;   ///< rx: sequence gaps
    uint64_t sink_bad = 0;    ///< rx: corrupt, wrong length or duplicate frames
    double mbit_s() const noexcept { return seconds > 0 ? double(bytes) * 8 / seconds / 1e6 : 0; }
};

class Netfront {
public:
    /// Creates its memory, connects, sends the hello and runs the handshake.
    static Result<std::unique_ptr<Netfront>, std::string> connect(const NetfrontConfig& cfg);
    ~Netfront();
    Netfront(const Netfront&) = delete;
    Netfront& operator=(const Netfront&) = delete;

    GrantMode mode() const noexcept;
    /// Streams until `max_frames` are done or `duration` has passed. tx ends
    /// with every frame completed (bounded wait); an error if a ring broke
    /// or the backend stopped answering.
    Result<PhaseResult, std::string> run(Direction dir, uint64_t max_frames,
                                         std::chrono::milliseconds duration);
    /// Closing, hang up, Closed.
    void close();

    struct Impl;

private:
    explicit Netfront(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace pvnet::grant
