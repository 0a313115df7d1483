// pvnet-tapbench: which way of moving frames through a TAP costs least on
// this kernel (issue 5: a tap has no readv/writev of several frames and no
// sendmmsg, so what is left to batch?). Needs root: it makes a namespace
// pvnet-tapbench-<pid> with taps in it, deleted on exit.
//
// Write direction (our side -> kernel): 64-byte GenPort UDP frames behind a
// zero virtio_net_hdr, to 198.51.100.1:9 on the tap, where a bound socket
// that is never read drops them (the kernel's full receive path, no reply):
//   writev        TapPort::send, one writev per frame
//   writev-napi   the same on an IFF_NAPI tap (frames go through NAPI/GRO)
//   uring-N       TapPort::send_batch: N WRITEV SQEs, one io_uring_enter for all N
//   uring-N-napi  the same on the IFF_NAPI tap
// Read direction (kernel -> our side): a UDP socket in the namespace, on
// another CPU, sends 18-byte datagrams (60-byte frames) with sendmmsg to
// 192.0.2.1, a permanent neighbour behind the tap; we read:
//   poll+read     TapPort's path: rx_pending() (poll, no timeout), then recv
//   read-EAGAIN   recv until it finds nothing, then sleep in poll
//   uring-N       N READV SQEs in flight; reap what completed, re-arm those
//
// Per run: frames/s (wall), CPU ns per frame of the measuring thread
// (CLOCK_THREAD_CPUTIME_ID) and of the process less the sender thread (adds
// io_uring's io-wq workers, if any). Variants interleaved A B C A B C..., medians of
// --repeat runs with min/max. Run it as `setsid -w pvnet-tapbench`: the
// program moves its new session's autogroup to nice -20.
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/port/gen_port.h"
#include "pvnet/port/netns.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/util/clock.h"
#include "pvnet/util/thread.h"

namespace {

using namespace pvnet;
using namespace pvnet::port;

constexpr uint32_t kHdr = TapPort::kHdrBytes;
constexpr uint32_t kFrameBytes = 64;
constexpr uint32_t kSendBatch = 64;  ///< sendmmsg batch of the kernel-side sender
constexpr std::size_t kRxBufBytes = 2048;
constexpr uint64_t kDrainFrames = 50'000;  ///< queued before a drain run (< txqueuelen)

struct Options {
    double seconds = 1.0;
    int repeat = 5;
    std::vector<unsigned> batches{8, 32};  ///< io_uring batch sizes to try
};

struct Sample {
    double pps = 0;
    double thread_ns = 0;    ///< per frame
    double proc_ns = 0;      ///< per frame, process less the sender
    double offered_pps = 0;  ///< read direction: what the sender handed the kernel
    uint64_t errors = 0;
};

/// Times fn(deadline, errors) -> frames moved, on the calling thread.
template <typename Fn>
Sample measure(double seconds, const std::function<uint64_t()>& other_cpu_ns, Fn&& fn) {
    const uint64_t w0 = clock_ns(CLOCK_MONOTONIC), t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    const uint64_t p0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID), o0 = other_cpu_ns();
    Sample s;
    const uint64_t frames = fn(w0 + static_cast<uint64_t>(seconds * 1e9), s.errors);
    const uint64_t w1 = clock_ns(CLOCK_MONOTONIC), t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    const uint64_t p1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID), o1 = other_cpu_ns();
    if (frames == 0) return s;
    const auto f = static_cast<double>(frames);
    s.pps = f / (static_cast<double>(w1 - w0) / 1e9);
    s.thread_ns = static_cast<double>(t1 - t0) / f;
    s.proc_ns = static_cast<double>((p1 - p0) - (o1 - o0)) / f;
    return s;
}

// ---- write direction -------------------------------------------------------

/// hdr + frame, ready to write; one per in-flight io_uring slot.
struct OwnedFrame {
    std::array<std::byte, kHdr + kFrameBytes> bytes{};
    std::array<iovec, 2> iov{};
};

std::vector<OwnedFrame> make_tx_frames(std::size_t n) {
    auto fmt = FrameFormat::create(kFrameBytes);
    FrameGen gen(*fmt);
    std::vector<OwnedFrame> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        gen.write_frame(i, v[i].bytes.data() + kHdr, kFrameBytes);
        v[i].iov = {iovec{v[i].bytes.data(), kHdr}, iovec{v[i].bytes.data() + kHdr, kFrameBytes}};
    }
    return v;
}

uint64_t write_loop(TapPort& tap, uint64_t deadline, uint64_t& errors) {
    auto frames = make_tx_frames(1);
    uint64_t n = 0;
    do {
        for (int i = 0; i < 256; ++i) {
            if (tap.send(frames[0].iov, kHdr + kFrameBytes) == SendResult::Sent)
                ++n;
            else
                ++errors;
        }
    } while (clock_ns(CLOCK_MONOTONIC) < deadline);
    return n;
}

/// TapPort::send_batch: N writes per io_uring_enter, all reaped before the next.
uint64_t batch_write_loop(TapPort& tap, unsigned batch, uint64_t deadline, uint64_t& errors) {
    auto frames = make_tx_frames(batch);
    std::vector<port::TxFrame> refs(batch);
    for (unsigned i = 0; i < batch; ++i) refs[i] = {frames[i].iov, kHdr + kFrameBytes};
    uint64_t n = 0;
    do {
        const uint32_t sent = tap.send_batch(refs).sent;
        n += sent;
        errors += batch - sent;
    } while (clock_ns(CLOCK_MONOTONIC) < deadline);
    return n;
}

// ---- read direction --------------------------------------------------------

/// Waits up to 10 ms for the tap to become readable (bounded: the loop's
/// deadline is checked in between).
void wait_readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    (void)::poll(&p, 1, 10);
}

// The read loops stop at the deadline or after `limit` frames (a drain run).
// poll_first: TapPort's path, rx_pending() (a poll) before each recv;
// otherwise recv until it finds nothing, then sleep in poll.
uint64_t read_loop(TapPort& tap, bool poll_first, uint64_t deadline, uint64_t limit) {
    std::vector<std::byte> buf(kRxBufBytes);
    const iovec iov{buf.data(), buf.size()};
    uint64_t n = 0;
    while (n < limit && clock_ns(CLOCK_MONOTONIC) < deadline) {
        for (int i = 0; i < 256 && n < limit; ++i) {
            if ((poll_first && !tap.rx_pending()) || tap.recv({&iov, 1}) == 0) {
                wait_readable(tap.rx_fd());
            } else {
                ++n;
            }
        }
    }
    return n;
}

/// `batch` reads in flight; each enter submits the re-armed ones and waits for one.
uint64_t uring_read_loop(int fd, unsigned batch, uint64_t deadline, uint64_t limit,
                         uint64_t& errors) {
    io_uring ring{};
    if (io_uring_queue_init(batch, &ring, 0) != 0) return 0;
    std::vector<std::byte> bufs(std::size_t{batch} * kRxBufBytes);
    std::vector<iovec> iov(batch);
    auto arm = [&](unsigned i) {
        iov[i] = iovec{bufs.data() + std::size_t{i} * kRxBufBytes, kRxBufBytes};
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        io_uring_prep_readv(sqe, fd, &iov[i], 1, 0);
        io_uring_sqe_set_data64(sqe, i);
    };
    for (unsigned i = 0; i < batch; ++i) arm(i);
    uint64_t n = 0;
    while (n < limit && clock_ns(CLOCK_MONOTONIC) < deadline) {
        __kernel_timespec ts{0, 10'000'000};
        io_uring_cqe* first = nullptr;
        if (io_uring_submit_and_wait_timeout(&ring, &first, 1, &ts, nullptr) < 0) continue;
        io_uring_cqe* cqe = nullptr;
        unsigned head = 0, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            if (cqe->res >= static_cast<int>(kHdr))
                ++n;
            else if (cqe->res != -EAGAIN)
                ++errors;
            arm(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)));
        }
        io_uring_cq_advance(&ring, seen);
    }
    // Pending reads are cancelled with the ring; their buffers outlive it.
    io_uring_queue_exit(&ring);
    return n;
}

/// The kernel side of the read direction: sendmmsg from a socket in the namespace.
class Sender {
public:
    bool start(const std::string& netns) {
        auto r = udp_socket_in(netns, kSrcIp, kUdpDstPort, UdpEnd::Connect);
        if (!r) {
            std::fprintf(stderr, "tapbench: sender: %s\n", to_string(r.error()).c_str());
            return false;
        }
        fd_ = *r;
        thread_ = std::thread([this] { run(); });
        return true;
    }
    void go(bool on) { on_.store(on); }
    uint64_t cpu_ns() const { return cpu_ns_.load(); }
    uint64_t sent() const { return sent_.load(); }
    ~Sender() {
        stop_.store(true);
        if (thread_.joinable()) thread_.join();
        if (fd_ >= 0) ::close(fd_);
    }

private:
    void run() {
        pin_current_thread(0);
        std::array<char, 18> payload{};
        std::array<iovec, kSendBatch> iov{};
        std::array<mmsghdr, kSendBatch> msgs{};
        for (uint32_t i = 0; i < kSendBatch; ++i) {
            iov[i] = iovec{payload.data(), payload.size()};
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        while (!stop_.load(std::memory_order_relaxed)) {
            if (on_.load(std::memory_order_relaxed)) {
                const int n = ::sendmmsg(fd_, msgs.data(), kSendBatch, 0);
                if (n > 0)
                    sent_.store(sent_.load(std::memory_order_relaxed) + static_cast<uint64_t>(n),
                                std::memory_order_relaxed);
            } else {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            cpu_ns_.store(clock_ns(CLOCK_THREAD_CPUTIME_ID), std::memory_order_relaxed);
        }
    }

    int fd_ = -1;
    std::atomic<bool> on_{false}, stop_{false};
    std::atomic<uint64_t> cpu_ns_{0}, sent_{0};
    std::thread thread_;
};

// ---- setup and report ------------------------------------------------------

bool configure(const ScopedNetns& ns, const std::string& tap) {
    return ns.ip({"link", "set", "dev", tap, "address", "02:00:00:00:00:02"}) == 0 &&
           ns.ip({"addr", "add", "198.51.100.1/24", "dev", tap}) == 0;
}

struct Variant {
    std::string name;
    std::function<Sample()> run;
    std::vector<Sample> samples;
};

void report(const char* title, std::vector<Variant>& vs) {
    std::printf("\n%s\n%-14s %28s %28s %12s %12s %7s\n", title, "variant",
                "kframes/s med (min-max)", "thread ns/frame med (min-max)", "proc ns/fr",
                "offered kf/s", "errors");
    auto med = [](std::vector<double> x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
    };
    for (auto& v : vs) {
        std::vector<double> pps, tns, pns, off;
        uint64_t errors = 0;
        for (const auto& s : v.samples) {
            pps.push_back(s.pps / 1e3);
            tns.push_back(s.thread_ns);
            pns.push_back(s.proc_ns);
            off.push_back(s.offered_pps / 1e3);
            errors += s.errors;
        }
        char a[64], b[64];
        std::snprintf(a, sizeof a, "%.0f (%.0f-%.0f)", med(pps),
                      *std::min_element(pps.begin(), pps.end()),
                      *std::max_element(pps.begin(), pps.end()));
        std::snprintf(b, sizeof b, "%.0f (%.0f-%.0f)", med(tns),
                      *std::min_element(tns.begin(), tns.end()),
                      *std::max_element(tns.begin(), tns.end()));
        std::printf("%-14s %28s %28s %12.0f %12.0f %7llu\n", v.name.c_str(), a, b, med(pns),
                    med(off), static_cast<unsigned long long>(errors));
    }
}

int run(const Options& o) {
    if (geteuid() != 0) {
        std::fprintf(stderr, "tapbench: needs root (namespaces, taps)\n");
        return 1;
    }
    if (FILE* f = std::fopen("/proc/self/autogroup", "w")) {
        std::fputs("-20", f);
        std::fclose(f);
    }
    auto ns = ScopedNetns::create("pvnet-tapbench-" + std::to_string(getpid()));
    if (!ns) {
        std::fprintf(stderr, "tapbench: %s\n", to_string(ns.error()).c_str());
        return 1;
    }
    TapConfig c;
    c.netns = ns->name();
    c.link_up = true;
    c.tx_batch = *std::max_element(o.batches.begin(), o.batches.end());
    c.name = "tb0";
    auto tap = TapPort::open(c);
    c.name = "tb1";
    c.napi = true;
    auto napi = TapPort::open(c);
    if (!tap || !napi) {
        std::fprintf(stderr, "tapbench: %s\n",
                     to_string(!tap ? tap.error() : napi.error()).c_str());
        return 1;
    }
    if (!(*tap)->tx_batch_uring() || !(*napi)->tx_batch_uring()) {
        std::fprintf(stderr, "tapbench: no io_uring here; uring-N rows write one by one\n");
    }
    // The read direction leaves through tb0 only; both taps take 198.51.100.1.
    if (!configure(*ns, "tb0") || !configure(*ns, "tb1") ||
        ns->ip({"link", "set", "dev", "tb0", "txqueuelen", "65536"}) != 0 ||
        ns->ip({"route", "add", "192.0.2.0/24", "dev", "tb0"}) != 0 ||
        ns->ip({"neigh", "add", "192.0.2.1", "lladdr", "02:00:00:00:00:01", "dev", "tb0", "nud",
                "permanent"}) != 0) {
        std::fprintf(stderr, "tapbench: ip configuration failed\n");
        return 1;
    }
    // The write direction's frames end here, dropped once its buffer is full.
    auto sink = udp_socket_in(ns->name(), kDstIp, kUdpDstPort, UdpEnd::Bind);
    if (!sink) {
        std::fprintf(stderr, "tapbench: sink: %s\n", to_string(sink.error()).c_str());
        return 1;
    }
    Sender sender;
    if (!sender.start(ns->name())) return 1;
    pin_current_thread(1);

    TapPort& t0 = **tap;
    TapPort& t1 = **napi;
    const auto no_other = [] { return uint64_t{0}; };
    const auto sender_cpu = [&] { return sender.cpu_ns(); };
    std::vector<Variant> wr = {
        {"writev",
         [&] {
             return measure(o.seconds, no_other,
                            [&](uint64_t d, uint64_t& e) { return write_loop(t0, d, e); });
         },
         {}},
        {"writev-napi",
         [&] {
             return measure(o.seconds, no_other,
                            [&](uint64_t d, uint64_t& e) { return write_loop(t1, d, e); });
         },
         {}},
    };
    for (const unsigned b : o.batches) {
        const std::string un = "uring-" + std::to_string(b);
        wr.push_back({un,
                      [&, b] {
                          return measure(o.seconds, no_other, [&](uint64_t d, uint64_t& e) {
                              return batch_write_loop(t0, b, d, e);
                          });
                      },
                      {}});
        wr.push_back({un + "-napi",
                      [&, b] {
                          return measure(o.seconds, no_other, [&](uint64_t d, uint64_t& e) {
                              return batch_write_loop(t1, b, d, e);
                          });
                      },
                      {}});
    }
    // Each read run starts with the tap's queue drained. Stream: the sender
    // runs during the measurement. Drain: it first queues kDrainFrames in the
    // tap (txqueuelen is raised so none is dropped) and stops; the reader then
    // empties the queue alone, so the figure is the read path's own cost.
    using ReadLoop = std::function<uint64_t(uint64_t, uint64_t, uint64_t&)>;
    auto read_run = [&](bool drain, const ReadLoop& loop) {
        std::vector<std::byte> buf(kRxBufBytes);
        const iovec iov{buf.data(), buf.size()};
        while (t0.recv({&iov, 1}) != 0) {
        }
        uint64_t limit = UINT64_MAX;
        if (drain) {
            const uint64_t sent0 = sender.sent();
            const uint64_t until = clock_ns(CLOCK_MONOTONIC) + 5'000'000'000u;
            sender.go(true);
            while (sender.sent() - sent0 < kDrainFrames && clock_ns(CLOCK_MONOTONIC) < until) {
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
            sender.go(false);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));  // last batch lands
            limit = sender.sent() - sent0;
        }
        const uint64_t sent0 = sender.sent(), w0 = clock_ns(CLOCK_MONOTONIC);
        if (!drain) sender.go(true);
        Sample s = measure(o.seconds, sender_cpu,
                           [&](uint64_t d, uint64_t& e) { return loop(d, limit, e); });
        sender.go(false);
        s.offered_pps = static_cast<double>(sender.sent() - sent0) /
                        (static_cast<double>(clock_ns(CLOCK_MONOTONIC) - w0) / 1e9);
        return s;
    };
    std::vector<Variant> rd, dr;
    for (const bool drain : {false, true}) {
        auto& list = drain ? dr : rd;
        list.push_back({"poll+read",
                        [&, drain] {
                            return read_run(drain, [&](uint64_t d, uint64_t l, uint64_t&) {
                                return read_loop(t0, true, d, l);
                            });
                        },
                        {}});
        list.push_back({"read-EAGAIN",
                        [&, drain] {
                            return read_run(drain, [&](uint64_t d, uint64_t l, uint64_t&) {
                                return read_loop(t0, false, d, l);
                            });
                        },
                        {}});
        for (const unsigned b : o.batches) {
            list.push_back({"uring-" + std::to_string(b),
                            [&, drain, b] {
                                return read_run(drain, [&](uint64_t d, uint64_t l, uint64_t& e) {
                                    return uring_read_loop(t0.rx_fd(), b, d, l, e);
                                });
                            },
                            {}});
        }
    }
    for (int r = 0; r < o.repeat; ++r) {
        for (auto& v : wr) v.samples.push_back(v.run());
        for (auto& v : rd) v.samples.push_back(v.run());
        for (auto& v : dr) v.samples.push_back(v.run());
    }
    std::printf(
        "tapbench: kernel %s, %d runs x %.1f s per variant, interleaved\n",
        [] {
            static char rel[128] = "?";
            if (FILE* f = std::fopen("/proc/sys/kernel/osrelease", "r")) {
                if (std::fgets(rel, sizeof rel, f)) rel[std::strcspn(rel, "\n")] = 0;
                std::fclose(f);
            }
            return rel;
        }(),
        o.repeat, o.seconds);
    report("write: 64-byte UDP frames into the tap (the kernel receives them)", wr);
    report("read, stream: 60-byte UDP frames the kernel sends out of the tap meanwhile", rd);
    report("read, drain: 50000 queued 60-byte frames read out, no sender meanwhile", dr);
    std::printf(
        "\nTapPort counters: tb0 tx %llu rx %llu rx_empty %llu tx_drop %llu; "
        "tb1 tx %llu tx_drop %llu\n",
        static_cast<unsigned long long>(t0.tx_pkts.get()),
        static_cast<unsigned long long>(t0.rx_pkts.get()),
        static_cast<unsigned long long>(t0.rx_empty.get()),
        static_cast<unsigned long long>(t0.tx_drop_errno.total()),
        static_cast<unsigned long long>(t1.tx_pkts.get()),
        static_cast<unsigned long long>(t1.tx_drop_errno.total()));
    ::close(*sink);
    return 0;
}

/// "8,32" -> {8, 32}; a bad item gives 0, which the range check rejects.
std::vector<unsigned> parse_list(const std::string& s) {
    std::vector<unsigned> v;
    std::size_t pos = 0;
    while (pos <= s.size()) {
        const std::size_t end = std::min(s.find(',', pos), s.size());
        v.push_back(
            static_cast<unsigned>(std::strtoul(s.substr(pos, end - pos).c_str(), nullptr, 10)));
        pos = end + 1;
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--seconds")
            o.seconds = std::atof(argv[i + 1]);
        else if (k == "--repeat")
            o.repeat = std::atoi(argv[i + 1]);
        else if (k == "--batch")
            o.batches = parse_list(argv[i + 1]);
        else {
            std::fprintf(stderr,
                         "usage: pvnet-tapbench [--seconds S] [--repeat N] [--batch N[,N...]]\n");
            return 2;
        }
    }
    const bool batches_ok =
        !o.batches.empty() && std::all_of(o.batches.begin(), o.batches.end(),
                                          [](unsigned b) { return b >= 1 && b <= 1024; });
    if (o.seconds <= 0 || o.seconds > 60 || o.repeat < 1 || o.repeat > 100 || !batches_ok) {
        std::fprintf(stderr, "tapbench: seconds in (0, 60], repeat 1..100, batches 1..1024\n");
        return 2;
    }
    return run(o);
}
