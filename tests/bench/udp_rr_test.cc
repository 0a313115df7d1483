// udp-rr over 127.0.0.1 in the namespace the test runs in (no root, no
// netns): the reuseport server against the open-loop client, and the client
// against scripted servers that stall or answer with hostile datagrams.
#include "pvnet/bench/udp_rr.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <ostream>
#include <thread>
#include <vector>

#include "pvnet/util/clock.h"

namespace pvnet::bench {

// gtest names the steering in the parameterised cases' output.
void PrintTo(UdpRrSteer s, std::ostream* os) { *os << to_string(s); }

namespace {

sockaddr_in loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/// A UDP socket bound to 127.0.0.1 and a port the kernel picked.
int bound_loopback_socket(uint16_t& port) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    return fd;
}

uint64_t sum(const std::vector<uint64_t>& v) {
    return std::accumulate(v.begin(), v.end(), uint64_t{0});
}

/// A one-socket server that hands every request to `answer(fd, request,
/// from)`; stops within 20 ms of destruction.
class ScriptedServer {
public:
    using Answer = std::function<void(int, std::vector<std::byte>&, const sockaddr_in&)>;
    explicit ScriptedServer(Answer answer) : answer_(std::move(answer)) {
        fd_ = bound_loopback_socket(port_);
        // Room for the requests that queue while a script stalls.
        const int rcvbuf = 4 << 20;
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        thread_ = std::thread([this] { loop(); });
    }
    ~ScriptedServer() {
        stop_ = true;
        thread_.join();
        ::close(fd_);
    }
    uint16_t port() const { return port_; }

private:
    void loop() {
        std::vector<std::byte> buf(kUdpRrMaxBytes);
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) != 1) continue;
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n = ::recvfrom(fd_, buf.data(), buf.size(), MSG_DONTWAIT,
                                         reinterpret_cast<sockaddr*>(&from), &len);
            if (n <= 0) continue;
            std::vector<std::byte> req(buf.begin(), buf.begin() + n);
            answer_(fd_, req, from);
        }
    }

    Answer answer_;
    int fd_ = -1;
    uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

void send_to(int fd, const std::vector<std::byte>& d, const sockaddr_in& to) {
    ::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
}

/// What UdpRrServer answers, as thread 0 on CPU 0.
void fill_reply(std::vector<std::byte>& d) {
    UdpRrHeader h;
    ASSERT_TRUE(udp_rr_decode(d, h));
    h.server_thread = 0;
    h.server_cpu = 0;
    h.incoming_cpu = 0;
    udp_rr_encode(h, d);
}

void expect_ordered_latencies(const UdpRrClientResult& r) {
    EXPECT_GT(r.lat_min_us, 0);
    EXPECT_LE(r.lat_min_us, r.lat_p50_us);
    EXPECT_LE(r.lat_p50_us, r.lat_p99_us);
    EXPECT_LE(r.lat_p99_us, r.lat_p999_us);
    EXPECT_LE(r.lat_p999_us, r.lat_max_us);
    EXPECT_LE(r.lat_min_us, r.lat_avg_us);
    EXPECT_LE(r.lat_avg_us, r.lat_max_us);
}

TEST(UdpRrHeader, RoundTripsAndRefusesShortDatagrams) {
    std::vector<std::byte> d(kUdpRrHdrBytes);
    UdpRrHeader h;
    h.flow = 7;
    h.seq = 0x0102030405060708;
    h.server_thread = 3;
    h.server_cpu = 1;
    h.incoming_cpu = -1;
    udp_rr_encode(h, d);
    EXPECT_EQ(d[8], std::byte{0x08}) << "little-endian on the wire";
    UdpRrHeader g;
    ASSERT_TRUE(udp_rr_decode(d, g));
    EXPECT_EQ(g.magic, kUdpRrMagic);
    EXPECT_EQ(g.flow, 7u);
    EXPECT_EQ(g.seq, h.seq);
    EXPECT_EQ(g.server_thread, 3);
    EXPECT_EQ(g.server_cpu, 1);
    EXPECT_EQ(g.incoming_cpu, -1);
    EXPECT_FALSE(udp_rr_decode(std::span(d).first(kUdpRrHdrBytes - 1), g));
}

class UdpRrSteering : public ::testing::TestWithParam<UdpRrSteer> {};

TEST_P(UdpRrSteering, EveryRequestAnsweredOrCountedLost) {
    UdpRrServerConfig scfg;
    scfg.threads = 2;
    scfg.steer = GetParam();
    auto srv = UdpRrServer::start(scfg);
    ASSERT_TRUE(srv) << srv.error();
    UdpRrClientConfig cfg;
    cfg.server_port = (*srv)->port();
    cfg.flows = 8;
    cfg.rate_per_s = 2000;
    cfg.duration_s = 1.0;
    cfg.size_bytes = 100;
    cfg.threads = 2;
    const UdpRrClientResult r = run_udp_rr_client(cfg);
    (*srv)->stop();
    ASSERT_TRUE(r.ok) << r.error;

    EXPECT_EQ(r.planned, 2000u) << "rate x window";
    EXPECT_EQ(r.sent + r.backlog_end + r.tx_error, r.planned);
    EXPECT_GT(r.sent, r.planned / 2);
    EXPECT_EQ(r.received + r.lost, r.sent);
    EXPECT_GT(r.received, r.sent / 2);
    EXPECT_LE(r.abandoned, r.lost);
    EXPECT_EQ(r.rx_bad(), 0u);
    EXPECT_DOUBLE_EQ(r.offered_per_s, 2000);
    EXPECT_GT(r.achieved_per_s, 0);
    EXPECT_LE(r.achieved_per_s, r.offered_per_s * 1.01);
    expect_ordered_latencies(r);
    // Every matched reply names one of the two server threads.
    ASSERT_LE(r.replies_by_server_thread.size(), 2u);
    EXPECT_EQ(sum(r.replies_by_server_thread), r.received);
    EXPECT_EQ(sum(r.replies_by_server_cpu), r.received);

    const auto stats = (*srv)->stats();
    ASSERT_EQ(stats.size(), 2u);
    uint64_t requests = 0, replies = 0;
    for (const auto& s : stats) {
        requests += s.requests;
        replies += s.replies;
        EXPECT_EQ(s.requests, s.replies + s.tx_drop_error) << "thread " << s.thread;
        EXPECT_EQ(s.rx_drop_short + s.rx_drop_bad_magic, 0u);
        EXPECT_EQ(s.cpu >= 0, GetParam() == UdpRrSteer::IncomingCpu);
        if (s.thread < r.replies_by_server_thread.size()) {
            EXPECT_LE(r.replies_by_server_thread[s.thread], s.replies);
        }
    }
    EXPECT_LE(requests, r.sent);
    EXPECT_GE(replies, r.received);
}

INSTANTIATE_TEST_SUITE_P(, UdpRrSteering,
                         ::testing::Values(UdpRrSteer::Hash, UdpRrSteer::IncomingCpu),
                         [](const ::testing::TestParamInfo<UdpRrSteer>& p) {
                             return p.param == UdpRrSteer::Hash ? "Hash" : "IncomingCpu";
                         });

TEST(UdpRrServer, CountsDatagramsThatAreNotRequests) {
    auto srv = UdpRrServer::start({});
    ASSERT_TRUE(srv) << srv.error();
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const sockaddr_in to = loopback((*srv)->port());
    send_to(fd, std::vector<std::byte>(kUdpRrHdrBytes - 1), to);  // short
    send_to(fd, std::vector<std::byte>(64), to);                  // magic 0
    const uint64_t deadline = now_ns() + 2'000'000'000;
    std::vector<UdpRrServerThreadStats> s;
    do {
        s = (*srv)->stats();
    } while (s[0].requests < 2 && now_ns() < deadline);
    (*srv)->stop();
    s = (*srv)->stats();
    ::close(fd);
    EXPECT_EQ(s[0].requests, 2u);
    EXPECT_EQ(s[0].rx_drop_short, 1u);
    EXPECT_EQ(s[0].rx_drop_bad_magic, 1u);
    EXPECT_EQ(s[0].replies, 0u);
}

TEST(UdpRrClient, CountsHostileRepliesWithoutUsingThem) {
    // Each request draws its right reply and six wrong ones.
    ScriptedServer srv([](int fd, std::vector<std::byte>& req, const sockaddr_in& from) {
        fill_reply(req);
        send_to(fd, req, from);
        send_to(fd, req, from);                                                    // a duplicate
        send_to(fd, std::vector<std::byte>(req.begin(), req.begin() + 10), from);  // short
        UdpRrHeader h;
        udp_rr_decode(req, h);
        auto forged = [&](auto change) {
            UdpRrHeader x = h;
            change(x);
            std::vector<std::byte> d = req;
            udp_rr_encode(x, d);
            send_to(fd, d, from);
        };
        forged([](UdpRrHeader& x) { ++x.flow; });
        forged([](UdpRrHeader& x) { x.magic = 0; });
        forged([](UdpRrHeader& x) { x.server_thread = kUdpRrNoThread; });
        forged([](UdpRrHeader& x) { x.seq += 1000; });  // never sent
    });
    UdpRrClientConfig cfg;
    cfg.server_port = srv.port();
    cfg.flows = 2;
    cfg.rate_per_s = 200;
    cfg.duration_s = 0.5;
    cfg.drain_s = 0.3;  // the hostile datagrams of the last requests come after the right replies
    const UdpRrClientResult r = run_udp_rr_client(cfg);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.planned, 100u);
    EXPECT_GT(r.received, 0u);
    EXPECT_EQ(r.received + r.lost, r.sent);
    // Loopback loses nothing at this rate; a lost datagram would only lower a count.
    EXPECT_GT(r.rx_bad_seq, r.received) << "duplicates and unsent sequence numbers";
    EXPECT_GT(r.rx_bad_size, 0u);
    EXPECT_GT(r.rx_bad_flow, 0u);
    EXPECT_GT(r.rx_bad_magic, 0u);
    EXPECT_GT(r.rx_bad_thread, 0u);
    EXPECT_LE(r.rx_bad_size, r.sent);
    EXPECT_EQ(sum(r.replies_by_server_thread), r.received) << "only matched replies counted";
    expect_ordered_latencies(r);
}

TEST(UdpRrClient, NoServerIsCountedRefusedAndLost) {
    // A port just freed: loopback answers each request with ICMP port unreachable.
    UdpRrClientConfig cfg;
    ::close(bound_loopback_socket(cfg.server_port));
    cfg.rate_per_s = 100;
    cfg.duration_s = 0.2;
    cfg.drain_s = 0.1;
    const UdpRrClientResult r = run_udp_rr_client(cfg);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.received, 0u);
    EXPECT_EQ(r.lost, r.sent);
    EXPECT_GT(r.rx_refused + r.tx_error, 0u);
    EXPECT_EQ(r.lat_max_us, 0);
}

TEST(UdpRrClient, LatencyCountsFromThePlannedTimeThroughAServerStall) {
    // The first request stalls the server 200 ms; the requests planned
    // meanwhile still leave on time (open loop) and wait in its queue.
    std::atomic<bool> stalled{false};
    ScriptedServer srv([&](int fd, std::vector<std::byte>& req, const sockaddr_in& from) {
        if (!stalled.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        fill_reply(req);
        send_to(fd, req, from);
    });
    UdpRrClientConfig cfg;
    cfg.server_port = srv.port();
    cfg.flows = 4;
    cfg.rate_per_s = 500;
    cfg.duration_s = 0.5;
    const UdpRrClientResult r = run_udp_rr_client(cfg);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.planned, 250u);
    EXPECT_GT(r.sent, r.planned * 9 / 10) << "the sender does not wait for replies";
    EXPECT_GT(r.received, 0u);
    EXPECT_GE(r.lat_max_us, 150'000) << "the stall is in the latency";
    expect_ordered_latencies(r);
}

}  // namespace
}  // namespace pvnet::bench
