// udp-rr: the server's reuseport threads and the open-loop client (udp_rr.h).
#include "pvnet/bench/udp_rr.h"

#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

#include "pvnet/bench/open_loop.h"
#include "pvnet/bench/percentile.h"
#include "pvnet/util/clock.h"
#include "pvnet/util/thread.h"
#include "pvnet/virtio/le.h"

namespace pvnet::bench {
namespace {

constexpr unsigned kBatch = 32;      // datagrams per recvmmsg/sendmmsg
constexpr int kPollMs = 50;          // how late a server thread sees stop
constexpr unsigned kSendBurst = 64;  // client requests sent before replies are read again

template <typename T>
void put_le(std::span<std::byte> d, std::size_t at, T v) noexcept {
    v = virtio::host_to_le(v);
    std::memcpy(d.data() + at, &v, sizeof v);
}

template <typename T>
T get_le(std::span<const std::byte> d, std::size_t at) noexcept {
    T v;
    std::memcpy(&v, d.data() + at, sizeof v);
    return virtio::le_to_host(v);
}

std::string sys_error(const char* op) { return std::string(op) + ": " + std::strerror(errno); }

sockaddr_in ipv4(const std::array<uint8_t, 4>& ip, uint16_t port) noexcept {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    std::memcpy(&a.sin_addr, ip.data(), ip.size());
    return a;
}

const sockaddr* as_sockaddr(const sockaddr_in* a) noexcept {
    return reinterpret_cast<const sockaddr*>(a);
}

/// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(static_cast<std::size_t>(c), &set)) cpus.push_back(c);
        }
    }
    if (cpus.empty()) cpus.push_back(0);
    return cpus;
}

timespec to_timespec(uint64_t ns) noexcept {
    return timespec{static_cast<time_t>(ns / 1'000'000'000u),
                    static_cast<long>(ns % 1'000'000'000u)};
}

}  // namespace

void udp_rr_encode(const UdpRrHeader& h, std::span<std::byte> dgram) noexcept {
    put_le(dgram, 0, h.magic);
    put_le(dgram, 4, h.flow);
    put_le(dgram, 8, h.seq);
    put_le(dgram, 16, h.server_thread);
    put_le(dgram, 18, h.server_cpu);
    put_le(dgram, 20, static_cast<uint32_t>(h.incoming_cpu));
}

bool udp_rr_decode(std::span<const std::byte> dgram, UdpRrHeader& h) noexcept {
    if (dgram.size() < kUdpRrHdrBytes) return false;
    h.magic = get_le<uint32_t>(dgram, 0);
    h.flow = get_le<uint32_t>(dgram, 4);
    h.seq = get_le<uint64_t>(dgram, 8);
    h.server_thread = get_le<uint16_t>(dgram, 16);
    h.server_cpu = get_le<uint16_t>(dgram, 18);
    h.incoming_cpu = static_cast<int32_t>(get_le<uint32_t>(dgram, 20));
    return true;
}

const char* to_string(UdpRrSteer s) noexcept {
    switch (s) {
        case UdpRrSteer::IncomingCpu:
            return "incoming-cpu";
        case UdpRrSteer::Hash:
            return "hash";
    }
    return "?";
}

// --- Server ---------------------------------------------------------------

struct UdpRrServer::Worker {
    uint16_t index = 0;
    int cpu = -1;
    int fd = -1;
    UdpRrServerThreadCounters c;
    std::thread thread;
};

UdpRrServer::UdpRrServer(uint16_t port) : port_(port) {}

Result<std::unique_ptr<UdpRrServer>, std::string> UdpRrServer::start(
    const UdpRrServerConfig& cfg) noexcept {
    if (cfg.threads == 0 || cfg.threads > kUdpRrMaxThreads) {
        return unexpected(std::string("threads: 1 to ") + std::to_string(kUdpRrMaxThreads));
    }
    // A failure below leaves ~UdpRrServer to join what started and close every fd.
    try {
        std::unique_ptr<UdpRrServer> s(new UdpRrServer(cfg.port));
        const std::vector<int> cpus = allowed_cpus();
        for (uint16_t i = 0; i < cfg.threads; ++i) {
            auto w = std::make_unique<Worker>();
            w->index = i;
            if (cfg.steer == UdpRrSteer::IncomingCpu) w->cpu = cpus[i % cpus.size()];
            w->fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (w->fd < 0) return unexpected(sys_error("socket"));
            s->workers_.push_back(std::move(w));
            const int fd = s->workers_.back()->fd;
            const int one = 1;
            if (::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
                return unexpected(sys_error("SO_REUSEPORT"));
            }
            // Before bind: the reuseport group counts its SO_INCOMING_CPU
            // sockets as they join (reuseport_get_incoming_cpu).
            const int cpu = s->workers_.back()->cpu;
            if (cpu >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, sizeof cpu) != 0) {
                return unexpected(sys_error("SO_INCOMING_CPU"));
            }
            const sockaddr_in a = ipv4(cfg.ip, s->port_);
            if (::bind(fd, as_sockaddr(&a), sizeof a) != 0) return unexpected(sys_error("bind"));
            if (s->port_ == 0) {  // the kernel's pick, for the other sockets to join
                sockaddr_in got{};
                socklen_t len = sizeof got;
                if (::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len) != 0) {
                    return unexpected(sys_error("getsockname"));
                }
                s->port_ = ntohs(got.sin_port);
            }
        }
        for (auto& w : s->workers_) {
            Worker* wp = w.get();
            w->thread = std::thread([srv = s.get(), wp] { srv->run(*wp); });
        }
        return s;
    } catch (const std::system_error& e) {
        return unexpected(std::string("thread: ") + e.what());
    } catch (const std::bad_alloc&) {
        return unexpected(std::string("out of memory"));
    }
}

UdpRrServer::~UdpRrServer() {
    stop();
    for (auto& w : workers_) {
        if (w->fd >= 0) ::close(w->fd);
    }
}

void UdpRrServer::stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& w : workers_) {
        if (w->thread.joinable()) w->thread.join();
    }
}

std::vector<UdpRrServerThreadStats> UdpRrServer::stats() const {
    std::vector<UdpRrServerThreadStats> v;
    for (const auto& w : workers_) {
        const UdpRrServerThreadCounters& c = w->c;
        v.push_back({w->index, w->cpu, c.requests.get(), c.replies.get(), c.rx_drop_short.get(),
                     c.rx_drop_bad_magic.get(), c.tx_drop_error.get(),
                     c.incoming_cpu_mismatch.get(), c.cpu_ns.load(std::memory_order_relaxed)});
    }
    return v;
}

void UdpRrServer::run(Worker& w) noexcept {
    pin_current_thread(w.cpu);
    UdpRrServerThreadCounters& c = w.c;
    // A request of any size up to the IPv4 maximum fits whole.
    std::vector<std::byte> bufs(std::size_t{kBatch} * kUdpRrMaxBytes);
    iovec iov[kBatch];
    sockaddr_in from[kBatch];
    mmsghdr rx[kBatch], tx[kBatch];
    while (!stop_.load(std::memory_order_relaxed)) {
        pollfd p{w.fd, POLLIN, 0};
        if (::poll(&p, 1, kPollMs) != 1) continue;
        for (unsigned i = 0; i < kBatch; ++i) {
            iov[i] = {bufs.data() + std::size_t{i} * kUdpRrMaxBytes, kUdpRrMaxBytes};
            rx[i] = {};
            rx[i].msg_hdr.msg_name = &from[i];
            rx[i].msg_hdr.msg_namelen = sizeof from[i];
            rx[i].msg_hdr.msg_iov = &iov[i];
            rx[i].msg_hdr.msg_iovlen = 1;
        }
        const int n = ::recvmmsg(w.fd, rx, kBatch, MSG_DONTWAIT, nullptr);
        if (n <= 0) continue;
        // The socket remembers the CPU of the last packet queued to it
        // (sk_incoming_cpu_update): one answer per batch.
        int incoming_cpu = -1;
        socklen_t optlen = sizeof incoming_cpu;
        ::getsockopt(w.fd, SOL_SOCKET, SO_INCOMING_CPU, &incoming_cpu, &optlen);
        const int cpu = ::sched_getcpu();
        c.requests.add(static_cast<uint64_t>(n));
        unsigned m = 0;
        for (unsigned i = 0; i < static_cast<unsigned>(n); ++i) {
            const std::span<std::byte> d(static_cast<std::byte*>(iov[i].iov_base), rx[i].msg_len);
            UdpRrHeader h;
            if (!udp_rr_decode(d, h)) {
                c.rx_drop_short.add();
                continue;
            }
            if (h.magic != kUdpRrMagic) {
                c.rx_drop_bad_magic.add();
                continue;
            }
            if (incoming_cpu != cpu) c.incoming_cpu_mismatch.add();
            h.server_thread = w.index;
            h.server_cpu = static_cast<uint16_t>(cpu);
            h.incoming_cpu = incoming_cpu;
            udp_rr_encode(h, d);
            iov[i].iov_len = d.size();  // the reply is the request's size
            tx[m] = {};
            tx[m].msg_hdr.msg_name = &from[i];
            tx[m].msg_hdr.msg_namelen = rx[i].msg_hdr.msg_namelen;
            tx[m].msg_hdr.msg_iov = &iov[i];
            tx[m].msg_hdr.msg_iovlen = 1;
            ++m;
        }
        for (unsigned done = 0; done < m;) {
            const int r = ::sendmmsg(w.fd, tx + done, m - done, MSG_DONTWAIT);
            if (r <= 0) {  // the first one failed: drop it, go on with the rest
                c.tx_drop_error.add();
                ++done;
                continue;
            }
            c.replies.add(static_cast<uint64_t>(r));
            done += static_cast<unsigned>(r);
        }
    }
    c.cpu_ns.store(clock_ns(CLOCK_THREAD_CPUTIME_ID), std::memory_order_relaxed);
}

// --- Client ---------------------------------------------------------------

namespace {

struct ClientFlow {
    uint32_t id;
    int fd;
    OutstandingRequests out;
};

/// One client thread: its flows, its share of the schedule, its tallies.
struct ClientThread {
    std::vector<ClientFlow> flows;
    std::vector<uint64_t> lat_ns;
    std::vector<uint64_t> by_thread = std::vector<uint64_t>(kUdpRrMaxThreads, 0);
    std::vector<uint64_t> by_cpu = std::vector<uint64_t>(UINT16_MAX + 1, 0);
    UdpRrClientCounts c;
    uint64_t last_reply_ns = 0;
};

class ClientRun {
public:
    ClientRun(const UdpRrClientConfig& cfg, ClientThread& st, uint64_t start_ns)
        : cfg_(cfg),
          st_(st),
          sched_(cfg.rate_per_s, start_ns),
          end_ns_(start_ns + static_cast<uint64_t>(cfg.duration_s * 1e9)),
          req_(cfg.size_bytes),
          rx_bufs_(std::size_t{kBatch} * (cfg.size_bytes + 1)) {}

    void run() noexcept;

private:
    /// The global index of this thread's j-th request: flows are dealt to
    /// threads round robin (flow f on thread f % N), requests to flows round
    /// robin, so request k goes to flow k % F in round k / F.
    uint64_t global_index(uint64_t j) const noexcept {
        const uint64_t nf = st_.flows.size();
        return j / nf * cfg_.flows + st_.flows[j % nf].id;
    }
    uint64_t planned(uint64_t j) const noexcept { return sched_.planned(global_index(j)); }
    /// Sends the requests due at `now`, at most kSendBurst; true if more are due.
    bool send_due(uint64_t now) noexcept;
    void receive(ClientFlow& f) noexcept;
    uint64_t outstanding() const noexcept {
        uint64_t n = 0;
        for (const auto& f : st_.flows) n += f.out.count();
        return n;
    }
    /// Waits for replies until `deadline` at the latest, reading what came.
    void wait(std::vector<pollfd>& pfds, uint64_t now, uint64_t deadline) noexcept;

    const UdpRrClientConfig& cfg_;
    ClientThread& st_;
    OpenLoopSchedule sched_;  ///< the whole client's: planned() of a global index
    const uint64_t end_ns_;
    uint64_t j_ = 0;  ///< this thread's next request
    std::vector<std::byte> req_;
    std::vector<std::byte> rx_bufs_;  ///< one byte over the size: a longer reply shows
};

bool ClientRun::send_due(uint64_t now) noexcept {
    for (unsigned b = 0; b < kSendBurst; ++b) {
        const uint64_t p = planned(j_);
        if (p > now || p >= end_ns_) return false;
        ClientFlow& f = st_.flows[j_ % st_.flows.size()];
        const uint64_t seq = j_ / st_.flows.size();
        UdpRrHeader h;
        h.flow = f.id;
        h.seq = seq;
        udp_rr_encode(h, req_);
        if (::send(f.fd, req_.data(), req_.size(), MSG_DONTWAIT) < 0) {
            // No room: the request waits in the backlog, its clock running.
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return false;
            ++st_.c.tx_error;  // e.g. ECONNREFUSED from an earlier reply's ICMP: not sent
        } else {
            f.out.add(seq, p);  // an unanswered request a full table ago is abandoned
            ++st_.c.sent;
        }
        ++j_;
    }
    return true;
}

void ClientRun::receive(ClientFlow& f) noexcept {
    const std::size_t cap = cfg_.size_bytes + 1;
    iovec iov[kBatch];
    mmsghdr msgs[kBatch];
    for (unsigned i = 0; i < kBatch; ++i) {
        iov[i] = {rx_bufs_.data() + i * cap, cap};
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = ::recvmmsg(f.fd, msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n < 0 && errno == ECONNREFUSED) ++st_.c.rx_refused;  // reading it clears the socket error
    if (n <= 0) return;
    const uint64_t now = now_ns();
    for (unsigned i = 0; i < static_cast<unsigned>(n); ++i) {
        // Every reply is the server's (or anyone's) bytes: each rule below
        // refuses and counts, and only a reply passing all of them is used.
        if (msgs[i].msg_len != cfg_.size_bytes || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) {
            ++st_.c.rx_bad_size;
            continue;
        }
        UdpRrHeader h;
        udp_rr_decode({rx_bufs_.data() + i * cap, msgs[i].msg_len}, h);  // size checked above
        if (h.magic != kUdpRrMagic) {
            ++st_.c.rx_bad_magic;
            continue;
        }
        // The socket is connected and the flow's own: another flow's id is forged.
        if (h.flow != f.id) {
            ++st_.c.rx_bad_flow;
            continue;
        }
        if (h.server_thread >= kUdpRrMaxThreads) {
            ++st_.c.rx_bad_thread;
            continue;
        }
        uint64_t planned_ns = 0;
        if (!f.out.complete(h.seq, planned_ns)) {
            ++st_.c.rx_bad_seq;
            continue;
        }
        ++st_.c.received;
        st_.lat_ns.push_back(now > planned_ns ? now - planned_ns : 0);
        ++st_.by_thread[h.server_thread];
        ++st_.by_cpu[h.server_cpu];
        if (h.incoming_cpu != h.server_cpu) ++st_.c.incoming_cpu_mismatch;
        st_.last_reply_ns = now;
    }
}

void ClientRun::wait(std::vector<pollfd>& pfds, uint64_t now, uint64_t deadline) noexcept {
    const timespec ts = to_timespec(deadline > now ? deadline - now : 0);
    if (::ppoll(pfds.data(), static_cast<nfds_t>(pfds.size()), &ts, nullptr) <= 0) return;
    for (std::size_t i = 0; i < pfds.size(); ++i) {
        if (pfds[i].revents) receive(st_.flows[i]);
    }
}

void ClientRun::run() noexcept {
    std::vector<pollfd> pfds;
    for (const auto& f : st_.flows) pfds.push_back({f.fd, POLLIN, 0});
    for (uint64_t now = now_ns(); now < end_ns_; now = now_ns()) {
        const bool more = send_due(now);
        // Until the next planned send (now, if the burst left some due).
        wait(pfds, now, more ? now : std::min(planned(j_), end_ns_));
    }
    st_.c.planned = j_;
    for (uint64_t j = j_; planned(j) < end_ns_; ++j) ++st_.c.backlog_end;
    st_.c.planned += st_.c.backlog_end;
    const uint64_t drain_end = end_ns_ + static_cast<uint64_t>(cfg_.drain_s * 1e9);
    for (uint64_t now = now_ns(); now < drain_end && outstanding() > 0; now = now_ns()) {
        wait(pfds, now, drain_end);
    }
}

}  // namespace

UdpRrClientResult run_udp_rr_client(const UdpRrClientConfig& cfg) noexcept {
    UdpRrClientResult res;
    if (cfg.flows == 0 || cfg.threads == 0 || cfg.rate_per_s == 0 || !(cfg.duration_s > 0) ||
        cfg.size_bytes < kUdpRrHdrBytes || cfg.size_bytes > kUdpRrMaxBytes) {
        res.error = "bad configuration (flows, threads, rate, duration > 0; size " +
                    std::to_string(kUdpRrHdrBytes) + " to " + std::to_string(kUdpRrMaxBytes) + ")";
        return res;
    }
    const uint16_t nthreads = static_cast<uint16_t>(std::min<uint32_t>(cfg.threads, cfg.flows));
    // A second of one flow's requests may be outstanding (a reply later than
    // that finds its slot reused and the request abandoned), within 2^24
    // slots in all (9 bytes each) and at least 64 per flow.
    const uint64_t per_flow = std::clamp<uint64_t>(cfg.rate_per_s / cfg.flows + 1, 64, 1u << 20);
    const uint64_t most = std::max<uint64_t>(64, std::bit_floor((uint64_t{1} << 24) / cfg.flows));
    const auto capacity = static_cast<uint32_t>(std::min(std::bit_ceil(per_flow), most));
    std::vector<ClientThread> st;
    std::vector<std::thread> threads;
    try {
        st.resize(nthreads);
        const sockaddr_in server = ipv4(cfg.server_ip, cfg.server_port);
        for (uint32_t f = 0; f < cfg.flows; ++f) {
            const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) {
                res.error = sys_error("socket");
                break;
            }
            st[f % nthreads].flows.push_back({f, fd, OutstandingRequests(capacity)});
            if (::connect(fd, as_sockaddr(&server), sizeof server) != 0) {
                res.error = sys_error("connect");
                break;
            }
        }
        if (res.error.empty()) {
            const auto expected = static_cast<std::size_t>(static_cast<double>(cfg.rate_per_s) *
                                                           cfg.duration_s / nthreads);
            for (auto& s : st) s.lat_ns.reserve(std::min<std::size_t>(expected + 1, 1u << 22));
            // Time for every thread to be up before the first planned send.
            const uint64_t start_ns = now_ns() + 10'000'000;
            for (uint16_t t = 0; t < nthreads; ++t) {
                threads.emplace_back(
                    [&cfg, &s = st[t], start_ns] { ClientRun(cfg, s, start_ns).run(); });
            }
            for (auto& th : threads) th.join();
            res.ok = true;
            const double window_s = cfg.duration_s;
            std::vector<uint64_t> lat;
            uint64_t last_reply = start_ns + static_cast<uint64_t>(window_s * 1e9);
            res.replies_by_server_thread.assign(kUdpRrMaxThreads, 0);
            res.replies_by_server_cpu.assign(UINT16_MAX + 1, 0);
            for (const auto& s : st) {
                res += s.c;
                for (const auto& f : s.flows) res.abandoned += f.out.abandoned();
                last_reply = std::max(last_reply, s.last_reply_ns);
                lat.insert(lat.end(), s.lat_ns.begin(), s.lat_ns.end());
                for (std::size_t i = 0; i < s.by_thread.size(); ++i) {
                    res.replies_by_server_thread[i] += s.by_thread[i];
                }
                for (std::size_t i = 0; i < s.by_cpu.size(); ++i) {
                    res.replies_by_server_cpu[i] += s.by_cpu[i];
                }
            }
            auto trim = [](std::vector<uint64_t>& v) {
                while (!v.empty() && v.back() == 0) v.pop_back();
            };
            trim(res.replies_by_server_thread);
            trim(res.replies_by_server_cpu);
            res.lost = res.sent - res.received;
            res.offered_per_s = static_cast<double>(cfg.rate_per_s);
            res.sent_per_s = static_cast<double>(res.sent) / window_s;
            res.achieved_per_s = static_cast<double>(res.received) /
                                 (static_cast<double>(last_reply - start_ns) / 1e9);
            if (!lat.empty()) {
                uint64_t sum = 0;
                for (uint64_t v : lat) sum += v;
                res.lat_avg_us = static_cast<double>(sum) / static_cast<double>(lat.size()) / 1e3;
                res.lat_min_us =
                    static_cast<double>(*std::min_element(lat.begin(), lat.end())) / 1e3;
                res.lat_max_us =
                    static_cast<double>(*std::max_element(lat.begin(), lat.end())) / 1e3;
                res.lat_p50_us = percentile(lat, 0.50) / 1e3;
                res.lat_p99_us = percentile(lat, 0.99) / 1e3;
                res.lat_p999_us = percentile(lat, 0.999) / 1e3;
            }
        }
    } catch (const std::system_error& e) {
        res.error = std::string("thread: ") + e.what();
        for (auto& th : threads) {
            if (th.joinable()) th.join();
        }
    } catch (const std::bad_alloc&) {
        res.error = "out of memory";
        for (auto& th : threads) {
            if (th.joinable()) th.join();
        }
    }
    for (const auto& s : st) {
        for (const auto& f : s.flows) ::close(f.fd);
    }
    if (!res.error.empty()) res.ok = false;
    return res;
}

}  // namespace pvnet::bench
