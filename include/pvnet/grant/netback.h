// Netback: the grant backend of issue 13 (seed 004's xen-netback). One
// process serves many frontend processes ("guests"): each connects to the
// unix socket, sends its memfds and eventfds (wire.h), and agrees on a mode
// through the store (handshake.h); the backend then runs a VhostNet device
// over a GenLoopPort (sink for the guest's tx, generator for its rx) whose
// rings reach the guest's pages only through grants: map, copy or
// persistent (mem/grant_access.h), one BufferAccess per vring. The device,
// its rings and its handlers are the same code in every mode.
//
// With process_vm copies the guest is the process at the other end of its
// socket: the hello's pid and remote_base must be that process's and its
// mapping of the data memfd (mem/grant_peer.h), and the guest ends when
// that process exits, so no copy can reach whoever gets its pid next.
//
// When a guest hangs up, its device stops, every grant is unmapped and
// released, and one report line is printed:
//   guest domid=<d> mode=<m> <key>=<value> ...
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pvnet/backend/net_device.h"
#include "pvnet/grant/xenbus.h"
#include "pvnet/mem/grant_access.h"
#include "pvnet/util/result.h"

namespace pvnet::grant {

struct NetbackConfig {
    std::string socket_path;
    std::string store_dir;
    GrantMode fallback = GrantMode::Map;  ///< Map or Copy: when persistent is not agreed
    bool offer_persistent = true;         ///< publishes feature-persistent-grants = 1
    mem::CopyVia copy_via = mem::CopyVia::Pread;
    backend::VhostNetOptions device;      ///< run mode, weights, coalescing
    int handshake_ms = 5000;              ///< hello and xenbus handshake, each
};

class Netback {
public:
    /// Guests served at once; a connection beyond it is refused (counted).
    static constexpr std::size_t kMaxGuests = 64;

    /// Binds and listens (an existing socket file is replaced).
    static Result<std::unique_ptr<Netback>, std::string> create(const NetbackConfig& cfg);
    ~Netback();
    Netback(const Netback&) = delete;
    Netback& operator=(const Netback&) = delete;

    /// Serves guests until `stop`; each guest in its own thread. Returns once
    /// every guest's device is torn down. `report` gets each guest's line
    /// (and each refused guest's error line), from the guest's thread.
    void run(const std::atomic<bool>& stop, const std::function<void(const std::string&)>& report);

    /// Connections refused (a bad hello, fds, or handshake; with process-vm
    /// copies a pid or remote_base that is not the peer's; no memory, thread
    /// or mapping left to serve it).
    uint64_t refused() const noexcept { return refused_.load(); }
    /// Guests served, then dropped for want of memory (their device stopped).
    uint64_t guest_errors() const noexcept { return guest_errors_.load(); }

private:
    explicit Netback(const NetbackConfig& cfg, int listen_fd) : cfg_(cfg), listen_fd_(listen_fd) {}
    /// serve() for one connection; what it throws (std::bad_alloc, a thread
    /// that cannot start) is a refusal or a guest error, never std::terminate.
    void serve_guest(int conn, const std::atomic<bool>& stop,
                     const std::function<void(const std::string&)>& report) noexcept;
    /// Checks the hello, runs the device until the guest goes, reports.
    /// `fds`: the hello's, closed by the caller; `acked` once the ack is sent.
    void serve(int conn, std::vector<int>& fds, bool& acked, const std::atomic<bool>& stop,
               const std::function<void(const std::string&)>& report);

    NetbackConfig cfg_;
    int listen_fd_;
    std::atomic<uint64_t> refused_{0};
    std::atomic<uint64_t> guest_errors_{0};
};

}  // namespace pvnet::grant
