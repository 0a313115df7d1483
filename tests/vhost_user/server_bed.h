// The in-process bed of the vhost_user::Server tests: a VhostNet on one
// PeerPort pair served by a Server on a unix socket, and the checks that
// packets flow through it (server_test.cc, server_inflight_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/port/peer_port.h"
#include "pvnet/vhost_user/server.h"
#include "test_frontend.h"

namespace pvnet::vhost_user::test {

/// Device, port pair and server.
struct Bed {
    std::unique_ptr<port::PeerPort> dev_port, far;
    std::unique_ptr<backend::VhostNet<port::PeerPort>> dev;
    std::unique_ptr<Server> server;
    ServerConfig cfg;

    explicit Bed(const char* tag, uint32_t stall_ms = 200, uint16_t max_mtu = 9000) {
        auto pp = port::PeerPort::create_pair({}, {});
        dev_port = std::move(pp->first);
        far = std::move(pp->second);
        port::PeerPort* ports[] = {dev_port.get()};
        dev = std::move(backend::VhostNet<port::PeerPort>::create(
                            backend::VhostNetOptions{}, std::span<port::PeerPort* const>(ports))
                            .value());
        dev->start();
        cfg.path = socket_path(tag);
        cfg.stall_ms = stall_ms;
        cfg.max_mtu = max_mtu;
        auto s = Server::create(cfg, *dev);
        EXPECT_TRUE(s) << (s ? "" : s.error());
        server = std::move(s.value());
        server->start();
    }
    ~Bed() {
        server->stop();
        dev->stop();
    }
    const SessionStats& st() const { return server->stats(); }
};

/// One frame each way through the device: guest tx → far end, far end → guest rx.
inline void packets_flow(Bed& b, Guest& g, uint64_t seq) {
    std::vector<std::byte> frame(60);
    std::memcpy(frame.data(), &seq, sizeof seq);
    const uint32_t len = kHdr + static_cast<uint32_t>(frame.size());
    g.transmit(seq, frame);
    std::vector<std::byte> got(4096);
    uint32_t n = 0;
    ASSERT_TRUE(wait_until([&] {
        if (!b.far->rx_pending()) return false;
        const iovec v{got.data(), got.size()};
        n = b.far->recv(std::span(&v, 1));
        return true;
    }));
    ASSERT_EQ(n, len);
    uint64_t back = 0;
    std::memcpy(&back, got.data() + kHdr, sizeof back);
    EXPECT_EQ(back, seq);
    ring::UsedBuf u;
    ASSERT_TRUE(wait_until([&] { return g.q[1]->get_used(u); }));
    EXPECT_EQ(u.token, seq);

    g.post_rx(seq);
    const iovec v{got.data(), len};
    ASSERT_EQ(b.far->send(std::span(&v, 1), len), port::SendResult::Sent);
    ASSERT_TRUE(wait_until([&] { return g.q[0]->get_used(u); }));
    EXPECT_EQ(u.token, seq);
    EXPECT_EQ(u.len, len);
    std::memcpy(&back, g.host(Guest::rx_gpa(seq)) + kHdr, sizeof back);
    EXPECT_EQ(back, seq);
}

/// A new front-end with new rings gets a working device after whatever the last one did.
inline void fresh_setup_works(Bed& b) {
    ASSERT_TRUE(wait_until([&] { return !b.server->connected(); }));
    const uint64_t conns = b.st().connections.get();
    FrontEnd fe(b.cfg.path);
    ASSERT_TRUE(fe.connected());
    Guest g;
    full_setup(fe, g);
    EXPECT_EQ(b.st().connections.get(), conns + 1);
    packets_flow(b, g, 1);
    packets_flow(b, g, 2);
}

}  // namespace pvnet::vhost_user::test
