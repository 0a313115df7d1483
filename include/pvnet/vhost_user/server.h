// vhost_user::Server: one vhost-user socket serving one backend::NetDevice
// (DESIGN.md layer 9), on its own thread. It listens on a path (or, as a
// client, connects to a front-end that listens: QEMU's server=on, retrying
// until it answers), serves one front-end at a time, and turns the
// front-end's messages into the device's control plane (device_setup.h):
// SET_MEM_TABLE maps the regions, SET_VRING_* fill a VringSetup, a ring
// runs once it has its addresses, a kick fd and (with PROTOCOL_FEATURES)
// SET_VRING_ENABLE; GET_VRING_BASE stops it. A disconnect stops and resets
// the device and unmaps its memory; the next front-end starts afresh.
//
// Every message is hostile until checked (backend_session.h lists the
// rules): a bad one is answered with a REPLY_ACK failure when the front-end
// asked for one, otherwise the connection is closed; either way a counter
// says why and the device's other state is untouched.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "pvnet/backend/net_device.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::vhost_user {

/// What one socket's sessions did, over the server's life.
struct SessionStats {
    Counter connections;        ///< front-ends accepted (or connected to)
    Counter disconnects;        ///< sessions ended (EOF, error or stop)
    Counter busy_rejected;      ///< a second front-end while one is served: closed at once
    Counter messages;           ///< requests read whole
    Counter replies;            ///< answers sent (GET_* and REPLY_ACK)
    Counter rejected;           ///< requests refused (REPLY_ACK failure or close)
    Counter bad_header;         ///< version, flags or size wrong: connection closed
    Counter bad_payload;        ///< payload size or content wrong for the request
    Counter bad_fds;            ///< wrong fd count (extra fds closed)
    /// an fd of the wrong kind: a kick/call/err that is no eventfd (or a
    /// semaphore kick), memory or inflight that is no writable memfd/hugetlbfs file
    Counter bad_fd_type;
    Counter bad_state;          ///< request not allowed now (e.g. ring address before a memory table)
    Counter unsupported;        ///< a request or feature pvnet does not implement
    Counter stalled;            ///< a message not completed in time, or a reply not taken: closed
    Counter mem_tables;         ///< memory tables mapped
    Counter mem_table_same;     ///< SET_MEM_TABLE identical to the current one: nothing remapped
    Counter rings_started;      ///< vrings the device started
    Counter rings_stopped;      ///< vrings stopped (GET_VRING_BASE, disable, disconnect)
    Counter inflight_fds;       ///< inflight buffers created (GET_INFLIGHT_FD) or mapped (SET_)
    Counter inflight_bad_log;   ///< vrings refused: their inflight log does not fit the ring
};

struct ServerConfig {
    std::string path;
    bool client = false;          ///< connect to a listening front-end instead of listening
    uint32_t stall_ms = 2000;     ///< a half-sent message or an unread reply: closed after this
    uint32_t retry_ms = 100;      ///< --client: delay between connection attempts
    /// NET_SET_MTU accepted up to this MTU (NET_MTU offered when non-zero).
    uint16_t max_mtu = 0;
    /// Offer the control queue (CTRL_VQ with NOTF_COAL, RSS, HASH_REPORT and MQ):
    /// the device serves vring 2N itself, for a front-end that drives it (pvnet's;
    /// QEMU emulates its own control queue and ignores the offer).
    bool ctrl_vq = false;
};

class Server {
public:
    /// Binds (removing a stale socket file, refusing a path that is not a
    /// socket) or, for a client, only records the path. The device must
    /// outlive the server; its offered features and max_pairs() are what
    /// GET_FEATURES and GET_QUEUE_NUM answer. Error: a sentence naming the path.
    static Result<std::unique_ptr<Server>, std::string> create(const ServerConfig& cfg,
                                                               backend::NetDevice& dev);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    /// Starts the thread: accept (or connect) and serve.
    void start();
    /// Ends the session (every running vring stopped, as GET_VRING_BASE),
    /// joins the thread, removes the socket file it created.
    void stop() noexcept;

    const SessionStats& stats() const noexcept;
    bool connected() const noexcept;
    /// The MTU the front-end set with NET_SET_MTU (0: none).
    uint16_t mtu() const noexcept;
    const std::string& path() const noexcept;

private:
    struct Impl;
    explicit Server(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace pvnet::vhost_user
