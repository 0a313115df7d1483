// UDP request/answer flows across a RelayBed (the relay queue tests): one
// socket in the server's namespace echoes every datagram to its sender;
// `flows` connected sockets in the client's namespace, each its own source
// port (a flow), run `rounds` round trips each. Bounded by `deadline`.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/port/netns.h"
#include "pvnet/util/result.h"

namespace pvnet::bench {

/// Round trips each flow completed; an error text if a socket failed.
inline Result<std::vector<uint32_t>, std::string> run_udp_round_trips(
    const std::string& server_ns, std::array<uint8_t, 4> server_ip, uint16_t port,
    const std::string& client_ns, unsigned flows, uint32_t rounds,
    std::chrono::steady_clock::time_point deadline) {
    /// A datagram of a flow: its index and sequence number, padded to 64 bytes.
    struct Probe {
        uint32_t flow = 0, seq = 0;
        std::array<std::byte, 56> pad{};
    };
    const auto set_timeout = [](int fd, long usecs) {
        const timeval tv{usecs / 1'000'000, usecs % 1'000'000};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    };
    auto srv = port::udp_socket_in(server_ns, server_ip, port, port::UdpEnd::Bind);
    if (!srv) return unexpected("server socket: " + port::to_string(srv.error()));
    const int sfd = *srv;
    set_timeout(sfd, 100'000);
    std::vector<int> cfds;
    const auto close_all = [&] {
        for (const int fd : cfds) ::close(fd);
        ::close(sfd);
    };
    for (unsigned i = 0; i < flows; ++i) {
        auto c = port::udp_socket_in(client_ns, server_ip, port, port::UdpEnd::Connect);
        if (!c) {
            close_all();
            return unexpected("client socket: " + port::to_string(c.error()));
        }
        set_timeout(*c, 500'000);
        cfds.push_back(*c);
    }
    std::atomic<bool> done{false};
    std::thread echo([&] {
        while (!done.load() && std::chrono::steady_clock::now() < deadline) {
            Probe p;
            sockaddr_storage from{};
            socklen_t len = sizeof from;
            const ssize_t n =
                ::recvfrom(sfd, &p, sizeof p, 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n > 0) {
                (void)::sendto(sfd, &p, static_cast<std::size_t>(n), 0,
                               reinterpret_cast<const sockaddr*>(&from), len);
            }
        }
    });
    std::vector<uint32_t> answered(flows, 0);
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < flows; ++i) {
        threads.emplace_back([&, i] {
            for (uint32_t seq = 0; seq < rounds && std::chrono::steady_clock::now() < deadline;
                 ++seq) {
                Probe p;
                p.flow = i;
                p.seq = seq;
                if (::send(cfds[i], &p, sizeof p, 0) != static_cast<ssize_t>(sizeof p)) continue;
                // A late answer to an earlier round is skipped; a timeout ends the round.
                for (;;) {
                    Probe r;
                    if (::recv(cfds[i], &r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) break;
                    if (r.flow == i && r.seq == seq) {
                        ++answered[i];
                        break;
                    }
                }
            }
        });
    }
    for (auto& t : threads) t.join();
    done.store(true);
    echo.join();
    close_all();
    return answered;
}

/// run_udp_round_trips, 30 s at most, expecting every flow to complete all
/// its rounds; call it inside ASSERT_NO_FATAL_FAILURE.
inline void expect_udp_round_trips(const std::string& server_ns, std::array<uint8_t, 4> server_ip,
                                   uint16_t port, const std::string& client_ns, unsigned flows,
                                   uint32_t rounds) {
    const auto answered =
        run_udp_round_trips(server_ns, server_ip, port, client_ns, flows, rounds,
                            std::chrono::steady_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(answered.has_value()) << answered.error();
    for (unsigned i = 0; i < flows; ++i) {
        EXPECT_EQ((*answered)[i], rounds) << "flow " << i << ": round trips answered";
    }
}

}  // namespace pvnet::bench
