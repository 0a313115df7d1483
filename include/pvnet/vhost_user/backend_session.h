// BackendSession: one front-end's vhost-user session, without the socket
// (DESIGN.md layer 9). The server (or a fuzz target) hands it each request
// whole — header, payload, the fds that came with it — and sends the reply
// it returns. The session turns requests into the device's control plane
// (backend::NetDevice) and owns what the front-end gave it: the mapped
// memory regions and the kick/call/err eventfds.
//
// Rules (everything is hostile until checked):
// - Framing (header_ok): version 1, no REPLY flag, size <= kMaxPayload; a
//   bad header always closes the connection.
// - Per request: the exact payload size and fd count, the vring index
//   against the device's 2 * max_pairs data vrings (the control queue is
//   QEMU's own: CTRL_VQ, NOTF_COAL and RSS are never offered), contents checked
//   before anything changes. Every fd not kept is closed, on every path.
// - A refused request is answered with a REPLY_ACK failure when REPLY_ACK
//   was negotiated and NEED_REPLY set (the connection stays), else closes
//   the connection. Unknown requests follow the same rule. It changes
//   nothing, except when the device refuses to start the ring a valid
//   setting completed (the setting stays recorded, the ring stopped).
// - Requests of a protocol feature are unsupported unless it was
//   negotiated: GET/SET_INFLIGHT_FD (INFLIGHT_SHMFD), GET/SET_STATUS
//   (STATUS), NET_SET_MTU (NET_MTU, offered only with a max_mtu).
// - A vring runs once it has a size, addresses, a memory table, a kick fd
//   (or the no-fd flag) and is enabled (with PROTOCOL_FEATURES only after
//   SET_VRING_ENABLE 1). GET_VRING_BASE and disabling stop it; a new kick
//   restarts it from its base. Except a running tx vring: disabled, it is
//   "started but disabled" (vhost-user.rst "Ring states") and goes on
//   consuming its frames, discarding them (tx_discarded), until enabled
//   again. A vring not yet enabled waits (no discard between the kick and
//   the enable QEMU sends). Every popped chain is used or given back
//   before a stop, so a stopped ring's used.idx equals its base.
// - Inflight I/O tracking (INFLIGHT_SHMFD negotiated, else unsupported):
//   GET_INFLIGHT_FD (num_queues <= the data vrings, queue_size a power of two
//   <= 32768, at most kMaxInflightBytes) creates a sealed memfd of one log per
//   queue and answers with it; SET_INFLIGHT_FD (exactly one fd, sealed
//   against shrinking, offset + size overflow-checked and inside the file,
//   size >= what num_queues and queue_size need) maps the one a front-end
//   kept across a back-end restart. Either replaces the session's log only
//   while no vring runs. Vring i < num_queues then runs with log i (its size
//   must be queue_size, and the log must fit the ring: inflight_bad_log
//   otherwise) and resumes where the log says, not at SET_VRING_BASE's value,
//   returning what a dead predecessor left in flight used with length 0.
//   The log is unmapped at disconnect, like the memory table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pvnet/backend/net_device.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/vhost_user/protocol.h"
#include "pvnet/vhost_user/server.h"

namespace pvnet::vhost_user {

/// What the server does after a request: send `reply` (when reply_len is
/// non-zero) with `reply_fd` (when >= 0) in SCM_RIGHTS, then keep reading or
/// close the connection.
struct Outcome {
    bool close = false;
    std::size_t reply_len = 0;
    std::array<std::byte, sizeof(MsgHeader) + sizeof(InflightInfo)> reply{};
    /// Borrowed from the session (GET_INFLIGHT_FD's memfd): valid until its
    /// next request; the socket layer sends it, never closes it.
    int reply_fd = -1;
};

/// The virtio features offered to a front-end: the device's, without the
/// control-queue features QEMU emulates itself, plus PROTOCOL_FEATURES.
/// With `ctrl_vq` (ServerConfig::ctrl_vq) the device's own control-queue features stay.
uint64_t session_features(const backend::NetDevice& dev, bool ctrl_vq = false) noexcept;

class BackendSession {
public:
    BackendSession(backend::NetDevice& dev, const ServerConfig& cfg, SessionStats& stats) noexcept;
    /// Stops every running vring, resets the device, then unmaps and closes.
    ~BackendSession();
    BackendSession(const BackendSession&) = delete;
    BackendSession& operator=(const BackendSession&) = delete;

    /// Framing: version 1, REPLY clear, size <= kMaxPayload (counts bad_header).
    bool header_ok(const MsgHeader& h) noexcept;

    /// One request. Takes ownership of every fd in `fds` (kept or closed).
    /// `payload` must hold h.size bytes.
    Outcome handle(const MsgHeader& h, std::span<const std::byte> payload,
                   std::span<const int> fds) noexcept;

    uint16_t mtu() const noexcept { return mtu_; }

    /// What requests change: the negotiated words, each vring's setup and state
    /// (its fds by number), the memory table and inflight buffer by identity.
    /// For checks that a refused request changed nothing (the fuzz target).
    struct VringView {
        uint16_t num, base;
        bool has_addr, kick_set, enabled, started;
        uint64_t desc, avail, used;
        int kick, call, err;
        bool operator==(const VringView&) const = default;
    };
    struct Snapshot {
        uint64_t features, protocol_features, status;
        bool features_set;
        uint16_t mtu;
        std::vector<VringView> vrings;
        const void* mem;
        const void* inflight;
        bool operator==(const Snapshot&) const = default;
    };
    Snapshot snapshot() const;

private:
    /// The fds of one request: handlers take what they keep; the rest are
    /// closed when it goes out of scope.
    class Fds;
    struct Vring {
        uint16_t num = 0;
        bool has_addr = false;
        ring::SplitRingAddrs addrs;  ///< guest-physical
        uint16_t base = 0;
        bool kick_set = false;  ///< a kick fd, or the no-fd flag
        bool enabled = false;   ///< SET_VRING_ENABLE (with PROTOCOL_FEATURES)
        bool started = false;
        // Stable addresses: the device holds pointers to them while running.
        std::unique_ptr<notify::EventFd> kick, call, err;
    };
    struct Memory {
        std::vector<MemRegion> wire;  ///< as the front-end described them
        std::vector<mem::MemoryRegion> maps;
        std::vector<std::byte*> hosts;  ///< each region's first byte (offset applied)
        mem::MemoryTable table;
    };
    /// The inflight buffer: one log per queue, queue i at i * queue_bytes.
    struct Inflight {
        mem::MemoryRegion map;
        uint16_t num_queues = 0;
        uint16_t queue_size = 0;
        uint64_t queue_bytes = 0;
    };
    enum class Fail : uint8_t { None, Payload, Fds, FdType, State, Unsupported };

    Fail dispatch(Request r, std::span<const std::byte> p, Fds& fds, uint64_t& reply,
                  bool& has_reply) noexcept;
    Fail set_features(uint64_t f) noexcept;
    Fail set_mem_table(std::span<const std::byte> p, Fds& fds) noexcept;
    Fail set_vring_addr(const VringAddr& a) noexcept;
    Fail set_vring_fd(Request r, uint64_t v, Fds& fds) noexcept;
    Fail get_inflight_fd(const InflightInfo& req) noexcept;
    Fail set_inflight_fd(const InflightInfo& info, Fds& fds) noexcept;
    /// num_queues and queue_size a log may have.
    bool inflight_shape_ok(const InflightInfo& i) const noexcept;
    /// Starts vring i if it is complete and enabled; false if the device refused it.
    bool maybe_start(uint16_t i) noexcept;
    void stop(uint16_t i) noexcept;
    void stop_all_and_reset() noexcept;
    bool ring_enabled(const Vring& v) const noexcept;
    /// A data vring the guest transmits on (odd index).
    bool is_tx(uint16_t i) const noexcept;
    bool any_started() const noexcept;
    bool user_to_guest(uint64_t uva, uint64_t& gpa) const noexcept;

    backend::NetDevice& dev_;
    const ServerConfig& cfg_;
    SessionStats& stats_;
    std::vector<Vring> vrings_;  ///< 2 * max_pairs data vrings
    std::unique_ptr<Memory> mem_;
    std::unique_ptr<Inflight> inflight_;
    InflightInfo inflight_reply_;  ///< GET_INFLIGHT_FD's answer, while handle() builds it
    uint64_t features_ = 0;
    bool features_set_ = false;
    uint64_t protocol_features_ = 0;
    uint64_t status_ = 0;
    uint16_t mtu_ = 0;
};

}  // namespace pvnet::vhost_user
