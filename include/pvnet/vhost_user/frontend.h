// vhost_user::Frontend: QEMU's side of the vhost-user protocol (DESIGN.md
// layer 9). pvnet's own driver (frontend::VirtioNet) keeps its guest memory,
// rings and doorbells in this process; the Frontend hands them to a back-end
// in another process — `pvnet serve`, DPDK's net_vhost — as QEMU does:
// features, protocol features, SET_MEM_TABLE with the memfd, then per vring
// NUM, BASE, ADDR, KICK, CALL and ENABLE.
//
// The back-end is hostile like everything read from a socket: each reply is
// checked (version, REPLY flag, request code, exact size, fd count) under a
// deadline, and any defect ends the connection with a FrontendError naming
// it and a counter, never a crash or a wait without end.
//
// Restarts (vhost-user.rst "Inflight I/O tracking"; QEMU's vhost_dev_start
// after a lost back-end): the rings live here, so a back-end that dies loses
// only what it held. reconnect() connects again (a client retries the path,
// a server accepts the next back-end) and replays the setup from where each
// ring stands: the bases GET_VRING_BASE returned after a stop(), else the
// rings' used.idx, since what a dead back-end popped and never used is
// unknown to the driver. With INFLIGHT_SHMFD the back-end records those
// descriptors in a buffer the Frontend keeps across restarts of one device
// (GET_INFLIGHT_FD at start(), SET_INFLIGHT_FD on every start and reconnect):
// the next back-end completes them as dropped instead of using them a second
// time. The buffer belongs to the rings it logged: start() (new rings, maybe
// another layout) and a reconnect() after a clean stop() (nothing in flight)
// get a fresh one; only a reconnect() after a lost back-end replays it. The
// spec's one queue_size describes every queue's log, so with INFLIGHT_SHMFD
// start() refuses data vrings of different sizes (FrontendFail::Layout). Without
// it, a transmit buffer the dead back-end had sent but not yet marked used
// is sent again (docs/vhost-user.md, "Restarting the backend").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pvnet/backend/device_setup.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"
#include "pvnet/vhost_user/protocol.h"

namespace pvnet::vhost_user {

/// Why the Frontend gave up on a connection. Every reason but Nack (which
/// the back-end answered properly) leaves the connection closed.
enum class FrontendFail : uint8_t {
    Connect,       ///< nothing accepted the connection before the deadline
    Closed,        ///< the back-end closed the connection (or reset it)
    Timeout,       ///< no whole reply within reply_timeout_ms
    BadVersion,    ///< a reply's version is not 1
    NotReply,      ///< a reply without the REPLY flag
    WrongRequest,  ///< a reply to another request
    BadSize,       ///< a reply's payload size is not its request's
    BadFds,        ///< fds with a reply that carries none, the wrong count, or truncated
    BadPayload,    ///< a reply's content is impossible (an inflight buffer of the wrong size)
    Nack,          ///< REPLY_ACK non-zero: the back-end refused the request
    Layout,        ///< the device's rings cannot be handed over as they are (sizes differ
                   ///< with INFLIGHT_SHMFD: one queue_size describes every log)
    Unexpected,    ///< a message nothing asked for
    Features,      ///< a feature the device needs is not offered (or no longer, after a restart)
    Io,            ///< sending failed
    Count
};
std::string_view to_string(FrontendFail f) noexcept;

struct FrontendError {
    FrontendFail fail = FrontendFail::Io;
    std::string text;  ///< a sentence naming the request and what was wrong
};

struct FrontendConfig {
    std::string path;
    /// Listen on `path` and wait for the back-end to connect (QEMU's
    /// server=on; the back-end runs `serve --client`).
    bool server = false;
    /// DPDK's net_vhost answers its first request up to ~1 s late (its event thread
    /// polls new sockets once a second).
    uint32_t reply_timeout_ms = 5000;
    /// connect()/reconnect(): how long to retry (client) or wait (server).
    uint32_t connect_timeout_ms = 5000;
    uint32_t retry_ms = 20;  ///< client: between connection attempts
    /// Offer VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD (used only if the back-end offers it).
    bool inflight = true;
};

struct FrontendStats {
    Counter connects;      ///< connections set up (first and later)
    Counter losses;        ///< connections the back-end ended (closed, or broke the protocol)
    Counter reconnects;    ///< set up again after a loss or a stop
    Counter requests;      ///< messages sent
    Counter replies;       ///< replies accepted
    Counter base_from_used;  ///< vrings restarted at their used.idx (the back-end was lost)
    CounterArray<FrontendFail> fails;
};

/// Guest memory as the Frontend shares it: one memfd, at guest-physical
/// `gpa`, mapped here at `host` (whose address is the user address QEMU
/// would send: the back-end translates vring addresses with it).
struct GuestMemory {
    int fd = -1;
    uint64_t gpa = 0;
    uint64_t size = 0;
    std::byte* host = nullptr;
};

class Frontend {
public:
    /// A server binds and listens now (a stale socket file is replaced, a
    /// live one refused); a client only records the path. Error: a sentence.
    static Result<std::unique_ptr<Frontend>, std::string> create(const FrontendConfig& cfg);
    ~Frontend();
    Frontend(const Frontend&) = delete;
    Frontend& operator=(const Frontend&) = delete;

    /// Connects (bounded by connect_timeout_ms) and negotiates: `wanted`
    /// virtio features, of which the back-end's offer is kept (VERSION_1
    /// and PROTOCOL_FEATURES are required), then REPLY_ACK, MQ and
    /// INFLIGHT_SHMFD where both offer them, GET_QUEUE_NUM, SET_OWNER.
    /// Returns the negotiated virtio features (without PROTOCOL_FEATURES).
    /// Each call negotiates afresh (reconnect() is the one that holds a back-end
    /// to the features of before); if they differ from an earlier connect()'s,
    /// the device must be start()ed again before a reconnect().
    /// Of `all_or_none` (a subset of `wanted`) the driver takes all offered or none
    /// (CTRL_VQ with NOTF_COAL: DPDK offers the first alone).
    Result<uint64_t, FrontendError> connect(uint64_t wanted, uint64_t all_or_none = 0) noexcept;

    /// Hands the device to the back-end: the memory table, a fresh inflight
    /// buffer, then every vring of `dev` (features: what connect returned;
    /// fds and memory must outlive the connection). The back-end runs after it.
    /// With INFLIGHT_SHMFD every data vring must have the same size (Layout).
    Status<FrontendError> start(const backend::DeviceSetup& dev, const GuestMemory& mem) noexcept;

    /// GET_VRING_BASE on every vring: the back-end stops each at a
    /// consistent point; the bases are kept for the next start.
    Status<FrontendError> stop() noexcept;

    /// Waits up to `timeout_ms` on the connection: false once the back-end
    /// is gone (closed it, or sent a message nothing asked for: counted).
    bool alive(int timeout_ms = 0) noexcept;
    bool connected() const noexcept;

    /// After a loss (or a stop): connects again, checks the back-end still
    /// offers the negotiated features, and starts the same device from
    /// where its rings stand. Bounded by connect_timeout_ms.
    Status<FrontendError> reconnect() noexcept;

    uint64_t features() const noexcept;
    uint64_t protocol_features() const noexcept;
    /// GET_QUEUE_NUM's answer (1 without MQ).
    uint16_t queue_num() const noexcept;
    /// An inflight buffer is held (INFLIGHT_SHMFD negotiated, GET_INFLIGHT_FD answered).
    bool has_inflight() const noexcept;
    const FrontendStats& stats() const noexcept;
    const std::string& path() const noexcept;

private:
    struct Impl;
    explicit Frontend(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

/// Keeps a started Frontend connected: a thread watches the connection and,
/// when the back-end goes away, reconnects until it succeeds or `give_up_s`
/// passes. The datapath runs on meanwhile: its frames wait in the rings.
/// The Frontend is the Reconnector's alone while it runs.
class Reconnector {
public:
    struct Hooks {
        std::function<void()> lost;  ///< the back-end is gone (the reconnect starts)
        /// The reconnect ended: ok, or gave up with the last error's text.
        std::function<void(bool ok, const std::string& why)> done;
    };
    Reconnector(Frontend& fe, double give_up_s, Hooks hooks);
    ~Reconnector();
    Reconnector(const Reconnector&) = delete;
    Reconnector& operator=(const Reconnector&) = delete;
    /// Ends the thread (a reconnect in progress gives up at its next try).
    void stop() noexcept;

private:
    void run() noexcept;
    Frontend& fe_;
    double give_up_s_;
    Hooks hooks_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace pvnet::vhost_user
