// One run of the XPS experiment (xps_bench.h): the client and its port on
// the backend side, NAPI and server threads in the guest.
#include "pvnet/bench/xps_bench.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/bench/open_loop.h"
#include "pvnet/bench/percentile.h"
#include "pvnet/bench/pvp.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/net/rss.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/port/port.h"
#include "pvnet/port/reply_queue.h"
#include "pvnet/util/clock.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/cpu.h"
#include "pvnet/util/iov.h"
#include "pvnet/util/thread.h"

namespace pvnet::bench {
namespace {

constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
constexpr uint32_t kParseBytes = port::kSeqOffset + 8;
constexpr uint32_t kMaxOutstanding = 1024;
constexpr uint32_t kBatch = 32;

// Microsoft's RSS verification key ("Verifying the RSS Hash Calculation"):
// a fixed key keeps the flows' queues the same from run to run (Linux fills
// a random one, netdev_rss_key_fill).
constexpr std::array<uint8_t, 40> kRssKey{
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

/// A single-producer / single-consumer ring of small records.
template <typename T>
class SpscRing {
public:
    explicit SpscRing(uint32_t capacity) : mask_(capacity - 1), slots_(capacity) {}
    bool push(const T& v) noexcept {
        const uint64_t t = tail_.load(std::memory_order_relaxed);
        if (t - head_.load(std::memory_order_acquire) > mask_) return false;
        slots_[t & mask_] = v;
        tail_.store(t + 1, std::memory_order_release);
        return true;
    }
    bool pop(T& v) noexcept {
        const uint64_t h = head_.load(std::memory_order_relaxed);
        if (h == tail_.load(std::memory_order_acquire)) return false;
        v = slots_[h & mask_];
        head_.store(h + 1, std::memory_order_release);
        return true;
    }
    bool empty() const noexcept {
        return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
    }

private:
    const uint64_t mask_;
    std::vector<T> slots_;
    alignas(64) std::atomic<uint64_t> tail_{0};
    alignas(64) std::atomic<uint64_t> head_{0};
};

struct Request {
    uint16_t flow = 0;
    uint16_t rxq = 0;
    uint64_t seq = 0;
};

struct Reply {
    uint16_t flow = 0;
    uint16_t txq = 0;
    uint64_t seq = 0;
};

/// The client's end of queue pair `q`: the requests RSS steered to rx queue
/// q come out of recv(); a reply the guest sent on tx queue q goes into the
/// client's reply ring, tagged with q.
class ClientPort {
public:
    ClientPort(port::ReplyQueue& in, SpscRing<Reply>& out, uint16_t q) noexcept
        : in_(in), out_(out), q_(q) {}
    bool rx_pending() noexcept { return in_.pending(); }
    uint32_t peek_len() noexcept { return in_.peek_len(); }
    uint32_t recv(std::span<const iovec> dst) noexcept { return in_.pop(dst); }
    int rx_fd() const noexcept { return in_.rx_fd(); }
    port::SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        std::array<std::byte, kHdr + kParseBytes> b{};
        if (len < b.size() || !copy_from_iov(src, 0, b)) {
            bad.add();
            return port::SendResult::Dropped;
        }
        const Reply r{port::frame_flow_id(b.data() + kHdr), q_, port::frame_seq(b.data() + kHdr)};
        return out_.push(r) ? port::SendResult::Sent : port::SendResult::Retry;
    }
    Counter bad;

private:
    port::ReplyQueue& in_;
    SpscRing<Reply>& out_;
    uint16_t q_;
};

/// The flow hash skb_tx_hash would use (skb_get_hash: a software hash of
/// the 4-tuple; here of the flow number, splitmix64's finaliser).
uint32_t flow_hash(uint16_t f) noexcept {
    uint64_t z = uint64_t{f} + 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return static_cast<uint32_t>(z ^ (z >> 31));
}

void spin_ns(uint32_t ns) noexcept {
    if (ns == 0) return;
    const uint64_t end = now_ns() + ns;
    while (now_ns() < end) cpu_relax();
}

uint64_t ctx_switches() noexcept {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<uint64_t>(ru.ru_nvcsw + ru.ru_nivcsw);
}

/// A server thread's socket: one request ring per rx queue (each filled by
/// that queue's NAPI thread), and the wakeup a sleeping thread waits on.
struct ServerSocket {
    ServerSocket(uint16_t pairs, notify::EventFd ev) : wake(std::move(ev)) {
        for (uint16_t q = 0; q < pairs; ++q) rings.push_back(std::make_unique<SpscRing<Request>>(4096));
    }
    std::vector<std::unique_ptr<SpscRing<Request>>> rings;
    notify::EventFd wake;
    std::atomic<bool> sleeping{false};
    bool any() const noexcept {
        return std::any_of(rings.begin(), rings.end(), [](const auto& r) { return !r->empty(); });
    }
};

}  // namespace

const char* to_string(XpsVariant v) noexcept {
    return v == XpsVariant::Symmetric ? "symmetric" : "default";
}

XpsBenchResult run_xps_bench(const XpsBenchConfig& cfg) noexcept {
    XpsBenchResult res;
    const uint16_t pairs = cfg.queue_pairs;
    if (pairs < 1 || cfg.threads < 1 || cfg.flows < 1 || cfg.rate == 0) {
        res.error = "queue pairs, threads, flows and rate must be positive";
        return res;
    }
    const uint32_t len = kHdr + cfg.frame_bytes;

    frontend::VirtioNetConfig fc;
    fc.queue_pairs = pairs;
    fc.rx_size = fc.tx_size = cfg.queue_size;
    fc.tx_mode = frontend::TxMode::FreeOnXmit;
    fc.ctrl_vq = true;
    pair::GuestPair tb;
    if (auto err = tb.setup(fc)) {
        res.error = *err;
        return res;
    }
    frontend::VirtioNet& fe = tb.fe();

    std::vector<std::unique_ptr<port::ReplyQueue>> inbound;
    std::vector<std::unique_ptr<SpscRing<Reply>>> replies;
    std::vector<std::unique_ptr<ClientPort>> ports;
    std::vector<ClientPort*> port_ptrs;
    for (uint16_t q = 0; q < pairs; ++q) {
        auto rq = port::ReplyQueue::create(1024, kHdr + port::kMaxFrameBytes);
        if (!rq) {
            res.error = "client queue";
            return res;
        }
        inbound.push_back(std::move(*rq));
        replies.push_back(std::make_unique<SpscRing<Reply>>(8192));
        ports.push_back(std::make_unique<ClientPort>(*inbound.back(), *replies.back(), q));
        port_ptrs.push_back(ports.back().get());
    }
    auto be = backend::VhostNet<ClientPort>::create(backend::VhostNetOptions{},
                                                    std::span<ClientPort* const>(port_ptrs));
    if (!be || !(*be)->configure(tb.device_setup())) {
        res.error = "backend setup";
        return res;
    }
    backend::VhostNet<ClientPort>& dev = **be;
    dev.start();

    // The guest's probe: every pair in use, RSS over them (Linux's default
    // table, ethtool_rxfh_indir_default: entry i → queue i % pairs), XPS.
    net::RssConfig rss;
    rss.hash_types = net::kRssSupportedHashTypes;
    std::copy(kRssKey.begin(), kRssKey.end(), rss.key.begin());
    rss.key_len = static_cast<uint8_t>(kRssKey.size());
    rss.table_len = 128;
    for (uint16_t i = 0; i < rss.table_len; ++i) rss.table[i] = static_cast<uint16_t>(i % pairs);
    rss.max_tx_vq = pairs;
    if (auto st = fe.set_rss(rss); !st) {
        res.error = "guest RSS_CONFIG refused";
        return res;
    }
    const std::vector<unsigned> irq_cpu = fe.xps().virtnet_set_affinity(pairs);
    if (cfg.variant == XpsVariant::Symmetric) fe.xps().symmetric(pairs);
    for (uint16_t q = 0; q < pairs; ++q) fe.queue_pair(q).try_fill_recv();

    const auto ncpu = static_cast<unsigned>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    std::vector<std::unique_ptr<std::mutex>> pair_mu;
    for (uint16_t q = 0; q < pairs; ++q) pair_mu.push_back(std::make_unique<std::mutex>());
    std::vector<std::unique_ptr<ServerSocket>> socks;
    for (uint16_t t = 0; t < cfg.threads; ++t) {
        auto ev = notify::EventFd::create();
        if (!ev) {
            res.error = "eventfd";
            return res;
        }
        socks.push_back(std::make_unique<ServerSocket>(pairs, std::move(*ev)));
    }
    std::vector<std::unique_ptr<frontend::Flow>> flows;
    std::vector<std::unique_ptr<port::FrameGen>> gens;
    for (uint16_t f = 0; f < cfg.flows; ++f) {
        auto fmt = port::FrameFormat::create(cfg.frame_bytes, f);
        if (!fmt) {
            res.error = "frame format (flows or frame size out of range)";
            return res;
        }
        flows.push_back(std::make_unique<frontend::Flow>(1u << 30));
        gens.push_back(std::make_unique<port::FrameGen>(*fmt));
    }
    std::vector<std::unique_ptr<frontend::XpsThreadStats>> tstats;
    for (uint16_t t = 0; t < cfg.threads; ++t)
        tstats.push_back(std::make_unique<frontend::XpsThreadStats>(pairs));
    std::vector<std::unique_ptr<Counter>> sock_full(pairs), no_buf(cfg.threads);
    for (auto& c : sock_full) c = std::make_unique<Counter>();
    for (auto& c : no_buf) c = std::make_unique<Counter>();
    std::atomic<bool> stop{false};
    // Set when the window closes: the client sends no more and keeps taking
    // replies, so what is still in flight at the end does not depend on how
    // the threads happened to be scheduled.
    std::atomic<bool> quiesce{false}, quiet{false};

    // The seed's modified memcached: a connection goes to a thread chosen by
    // its incoming rx queue (SO_INCOMING_NAPI_ID), threads q, q + pairs, ...
    // serving queue q, and among them by flow.
    const uint16_t per_queue = std::max<uint16_t>(1, cfg.threads / pairs);
    auto owner = [&](uint16_t f, uint16_t q) {
        return static_cast<uint16_t>((q + pairs * (f % per_queue)) % cfg.threads);
    };

    // NAPI: rx queue q's poll, on the CPU its interrupt goes to.
    std::vector<std::thread> napi;
    for (uint16_t q = 0; q < pairs; ++q) {
        napi.emplace_back([&, q] {
            pin_current_thread(static_cast<int>(irq_cpu[q] % ncpu));
            frontend::QueuePair& qp = fe.queue_pair(q);
            std::vector<uint8_t> wake(cfg.threads, 0);
            while (!stop.load(std::memory_order_relaxed)) {
                uint32_t n;
                bool idle = false;
                {
                    std::lock_guard lock(*pair_mu[q]);
                    n = qp.poll_rx(frontend::kNapiBudget, [&](uint32_t, std::byte* p, uint32_t l) {
                        if (l < kHdr + kParseBytes) return false;
                        const uint16_t f = port::frame_flow_id(p + kHdr);
                        if (f >= cfg.flows) return false;
                        const uint16_t t = owner(f, q);
                        if (socks[t]->rings[q]->push({f, q, port::frame_seq(p + kHdr)})) {
                            wake[t] = 1;
                        } else {
                            sock_full[q]->add();
                        }
                        return false;  // copied out: the buffer goes back to the pool
                    });
                    if (n != 0) qp.try_fill_recv();
                    if (n == 0) idle = qp.napi_complete();
                }
                // sk_data_ready: wake the owners that sleep (the fence pairs
                // with the server's between `sleeping` and its recheck).
                std::atomic_thread_fence(std::memory_order_seq_cst);
                for (uint16_t t = 0; t < cfg.threads; ++t) {
                    if (wake[t] && socks[t]->sleeping.exchange(false)) socks[t]->wake.signal();
                    wake[t] = 0;
                }
                if (idle) qp.wait_rx(10'000);
            }
        });
    }

    std::vector<std::thread> servers;
    for (uint16_t t = 0; t < cfg.threads; ++t) {
        servers.emplace_back([&, t] {
            if (cfg.pin_threads) pin_current_thread(static_cast<int>(t % ncpu));
            ServerSocket& s = *socks[t];
            std::vector<std::vector<Request>> by_txq(pairs);
            std::array<Request, kBatch> batch;
            while (!stop.load(std::memory_order_relaxed)) {
                uint32_t n = 0;
                for (auto& r : s.rings) {
                    while (n < kBatch && r->pop(batch[n])) ++n;
                }
                if (n == 0) {
                    s.sleeping.store(true, std::memory_order_relaxed);
                    std::atomic_thread_fence(std::memory_order_seq_cst);
                    if (!s.any() && s.wake.wait(10'000)) s.wake.consume();
                    s.sleeping.store(false, std::memory_order_relaxed);
                    continue;
                }
                for (uint32_t i = 0; i < n; ++i) {
                    const Request& r = batch[i];
                    frontend::Flow& flow = *flows[r.flow];
                    flow.record_rx_queue(r.rxq);
                    spin_ns(cfg.server_ns);
                    const frontend::XpsPick pick = fe.pick_tx(flow, flow_hash(r.flow));
                    tstats[t]->record(pick, flow.rx_queue());
                    by_txq[pick.txq].push_back(r);
                }
                for (uint16_t q = 0; q < pairs; ++q) {
                    if (by_txq[q].empty()) continue;
                    frontend::QueuePair& qp = fe.queue_pair(q);
                    std::lock_guard lock(*pair_mu[q]);
                    qp.free_old_xmit();  // start_xmit's reap (free-on-xmit)
                    for (const Request& r : by_txq[q]) {
                        uint32_t id;
                        if (!qp.alloc_buf(id)) {
                            no_buf[t]->add();
                            continue;
                        }
                        std::byte* p = qp.buf_host(id);
                        std::memset(p, 0, kHdr);
                        gens[r.flow]->write_frame(r.seq, p + kHdr, qp.buf_bytes() - kHdr);
                        if (!qp.xmit(id, len)) no_buf[t]->add();  // ring full: xmit freed it
                    }
                    qp.tx_flush();
                    by_txq[q].clear();
                }
            }
        });
    }

    // The client: open loop over the flows, round robin; each request goes to
    // the rx queue the device's RSS picks for it.
    const double total_s = cfg.warmup_s + cfg.seconds + 0.5;
    std::vector<uint64_t> rtt_ns, rtt_at;
    rtt_ns.reserve(static_cast<std::size_t>(cfg.rate * total_s) + 1024);
    rtt_at.reserve(rtt_ns.capacity());
    std::vector<uint64_t> steered(pairs, 0);
    std::vector<uint16_t> req_queue(cfg.flows, 0);
    std::vector<uint64_t> seq(cfg.flows, 0);
    std::vector<OutstandingRequests> outstanding(cfg.flows, OutstandingRequests(kMaxOutstanding));
    std::atomic<uint64_t> answered{0}, sent{0}, backlog{0};
    uint64_t unmatched = 0, same_queue = 0;  // client-owned; read after join
    std::thread client([&] {
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        OpenLoopSchedule sched(cfg.rate, now_ns());
        std::array<std::byte, port::kMaxFrameBytes> frame{};
        while (!stop.load(std::memory_order_relaxed)) {
            // Every request sent before this point is in `sent` already.
            const bool sending = !quiesce.load(std::memory_order_acquire);
            if (!sending) quiet.store(true, std::memory_order_release);
            uint64_t got = 0;
            for (auto& ring : replies) {
                Reply r;
                while (ring->pop(r)) {
                    uint64_t planned;
                    if (r.flow < cfg.flows && outstanding[r.flow].complete(r.seq, planned)) {
                        const uint64_t t = now_ns();
                        if (rtt_ns.size() < rtt_ns.capacity()) {
                            rtt_ns.push_back(t - std::min(t, planned));
                            rtt_at.push_back(t);
                        }
                        same_queue += r.txq == req_queue[r.flow];
                        ++got;
                    } else {
                        ++unmatched;
                    }
                }
            }
            if (got) answered.fetch_add(got, std::memory_order_relaxed);
            const uint64_t t = now_ns();
            uint64_t queued = 0;
            while (sending && sched.due(t)) {
                const auto f = static_cast<uint16_t>(sched.next() % cfg.flows);
                if (outstanding[f].full()) break;
                gens[f]->write_frame(seq[f], frame.data(), cfg.frame_bytes);
                const net::RxSteering st = dev.rx_steer().steer(
                    std::span(reinterpret_cast<const uint8_t*>(frame.data()), cfg.frame_bytes));
                std::byte* slot = inbound[st.queue]->reserve();
                if (slot == nullptr) break;
                std::memset(slot, 0, kHdr);
                std::memcpy(slot + kHdr, frame.data(), cfg.frame_bytes);
                inbound[st.queue]->commit(len);
                outstanding[f].add(seq[f]++, sched.take());
                req_queue[f] = st.queue;
                ++steered[st.queue];
                ++queued;
            }
            if (queued) sent.fetch_add(queued, std::memory_order_relaxed);
            backlog.store(sched.backlog(t), std::memory_order_relaxed);
            if (got == 0 && queued == 0) {
                // Until the next planned request, at most 20 µs: replies
                // are looked for at least that often.
                const uint64_t next = sched.planned(sched.next());
                const uint64_t wait = std::min<uint64_t>(next > t ? next - t : 0, 20'000);
                const timespec ts{0, static_cast<long>(wait)};
                if (wait) nanosleep(&ts, nullptr);
            }
        }
    });

    std::vector<std::thread::native_handle_type> measured;
    measured.push_back(dev.native_handle());
    for (auto& th : napi) measured.push_back(th.native_handle());
    for (auto& th : servers) measured.push_back(th.native_handle());
    auto cpu_ns = [&] {
        uint64_t s = 0;
        for (auto h : measured) s += thread_cpu_ns(h);
        return s;
    };
    auto irqs = [&] {
        uint64_t s = 0;
        for (uint16_t q = 0; q < pairs; ++q) s += dev.stats(q).rx_calls.get() + dev.stats(q).tx_calls.get();
        return s;
    };
    struct Snap {
        uint64_t t, cpu, resp, irq, csw;
    };
    auto snap = [&] {
        return Snap{now_ns(), cpu_ns(), answered.load(std::memory_order_relaxed), irqs(),
                    ctx_switches()};
    };
    sleep_s(cfg.warmup_s);
    const Snap a = snap();
    sleep_s(cfg.seconds);
    const Snap b = snap();
    res.backlog_end = backlog.load(std::memory_order_relaxed);
    std::vector<double> thread_cpu;
    for (auto& th : servers) thread_cpu.push_back(static_cast<double>(thread_cpu_ns(th.native_handle())) / 1e9);
    quiesce.store(true, std::memory_order_release);
    auto dropped = [&] {
        uint64_t n = 0;
        for (const auto& c : sock_full) n += c->get();
        for (const auto& c : no_buf) n += c->get();
        return n;
    };
    for (const uint64_t until = now_ns() + 1'000'000'000u;
         (!quiet.load(std::memory_order_acquire) ||
          answered.load(std::memory_order_relaxed) + dropped() < sent.load(std::memory_order_relaxed)) &&
         now_ns() < until;) {
        sleep_s(0.001);
    }
    stop.store(true);
    client.join();
    for (auto& th : napi) th.join();
    for (auto& th : servers) th.join();
    dev.stop();

    const double w = static_cast<double>(b.t - a.t) / 1e9;
    const double resp = static_cast<double>(b.resp - a.resp);
    res.window_s = w;
    res.offered_per_s = cfg.rate;
    res.achieved_per_s = resp / w;
    res.interrupts_per_s = static_cast<double>(b.irq - a.irq) / w;
    res.ctx_switches_per_s = static_cast<double>(b.csw - a.csw) / w;
    if (resp > 0) res.cycles_per_req = static_cast<double>(b.cpu - a.cpu) * tsc_per_ns() / resp;
    std::vector<uint64_t> win;
    for (std::size_t i = 0; i < rtt_ns.size(); ++i) {
        if (rtt_at[i] >= a.t && rtt_at[i] < b.t) win.push_back(rtt_ns[i]);
    }
    if (!win.empty()) {
        uint64_t sum = 0;
        for (uint64_t v : win) sum += v;
        res.rtt_min_us = static_cast<double>(*std::min_element(win.begin(), win.end())) / 1e3;
        res.rtt_max_us = static_cast<double>(*std::max_element(win.begin(), win.end())) / 1e3;
        res.rtt_avg_us = static_cast<double>(sum) / static_cast<double>(win.size()) / 1e3;
        res.p50_us = percentile(win, 0.50) / 1e3;
        res.p99_us = percentile(win, 0.99) / 1e3;
    }
    res.sent = sent.load();
    res.answered = answered.load();
    res.unmatched = unmatched;
    for (const auto& o : outstanding) res.abandoned += o.abandoned();
    res.same_queue_share = res.answered ? static_cast<double>(same_queue) / static_cast<double>(res.answered) : 0;
    for (const auto& c : sock_full) res.drop_sock_full += c->get();
    for (const auto& c : no_buf) res.drop_no_buf += c->get();
    for (const auto& p : ports) res.drop_bad_reply += p->bad.get();
    for (uint16_t q = 0; q < pairs; ++q) {
        const auto& st = fe.queue_pair(q).stats();
        res.queues.push_back({steered[q], st.rx_pkts.get(), st.tx_pkts.get(), st.rx_interrupts.get(),
                              st.napi_polls.get(), st.tx_completions.get()});
    }
    for (uint16_t t = 0; t < cfg.threads; ++t) {
        XpsThreadResult tr;
        for (const auto& c : tstats[t]->txq_used) tr.txq_used.push_back(c.get());
        tr.rxq_mismatch = tstats[t]->rxq_mismatch.get();
        for (std::size_t k = 0; k < tr.by_rule.size(); ++k) tr.by_rule[k] = tstats[t]->by_rule[k].get();
        tr.cpu_s = thread_cpu[t];
        res.threads.push_back(std::move(tr));
    }
    res.ok = !tb.any_broken(dev);
    if (!res.ok) res.error = "a ring broke";
    return res;
}

}  // namespace pvnet::bench
