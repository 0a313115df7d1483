// One stream or RR run: a guest thread with N Flows over one queue pair, a
// VhostNet worker with an EchoPort server.
#include "pvnet/bench/stream_rr.h"

#include <poll.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "pvnet/bench/open_loop.h"
#include "pvnet/bench/percentile.h"
#include "pvnet/bench/pvp.h"
#include "pvnet/frontend/flow.h"
#include "pvnet/port/echo_port.h"
#include "pvnet/util/thread.h"
#include "pvnet/util/clock.h"
#include "pvnet/pair/guest_pair.h"

namespace pvnet::bench {
namespace {

constexpr uint32_t kHdr = port::EchoPort::kHdrBytes;
constexpr uint32_t kStreamFrame = 1514;  // MTU 1500 + Ethernet
constexpr uint32_t kRrFrame = 64;        // a 1-byte request or response, padded
constexpr uint32_t kMessageBytes = 65536;

// Requests one flow may have outstanding in the open loop: far above what
// a run at any offered rate this bench reaches keeps in flight, and below
// the server's response queue.
constexpr uint32_t kMaxOutstanding = 256;

}  // namespace

const char* to_string(TxVariant v) noexcept {
    switch (v) {
        case TxVariant::Upstream: return "upstream";
        case TxVariant::Napi: return "napi";
        case TxVariant::NapiCoalesce: return "napi+coalesce";
        case TxVariant::NapiAtRx: return "napi+at-rx";
        case TxVariant::NapiCoalesceAtRx: return "napi+both";
    }
    return "?";
}

StreamRrResult run_stream_rr(const StreamRrConfig& cfg) noexcept {
    StreamRrResult res;
    const bool stream = cfg.workload == Workload::Stream;
    const bool napi = cfg.variant != TxVariant::Upstream;
    const bool coalesce =
        cfg.variant == TxVariant::NapiCoalesce || cfg.variant == TxVariant::NapiCoalesceAtRx;
    const bool at_rx =
        cfg.variant == TxVariant::NapiAtRx || cfg.variant == TxVariant::NapiCoalesceAtRx;
    if (cfg.flows == 0) {
        res.error = "no flows";
        return res;
    }

    frontend::VirtioNetConfig fc;
    fc.rx_size = fc.tx_size = cfg.queue_size;
    fc.tx_mode = napi ? frontend::TxMode::Napi : frontend::TxMode::FreeOnXmit;
    fc.clean_tx_at_rx = at_rx;
    fc.busy_poll_usecs = cfg.busy_poll_usecs;
    fc.ctrl_vq = true;
    pair::GuestPair tb;
    if (auto err = tb.setup(fc)) {
        res.error = *err;
        return res;
    }
    auto server = port::EchoPort::create(kRrFrame, cfg.flows, stream ? 2 : 1);
    if (!server) {
        res.error = "server port";
        return res;
    }
    port::EchoPort& srv = **server;
    srv.set_work_ns(cfg.server_ns);
    backend::VhostNetOptions bc;
    bc.busyloop_usecs = cfg.busyloop_usecs;
    bc.tx_weight.pkts = cfg.tx_weight_pkts;
    auto be = backend::VhostNet<port::EchoPort>::create(tb.device_setup(), bc, srv);
    if (!be) {
        res.error = "backend setup";
        return res;
    }
    backend::VhostNet<port::EchoPort>& dev = **be;
    frontend::QueuePair& guest = tb.qp();

    // Per flow: credit, a frame generator, and (RR) the send time of the
    // outstanding request.
    const auto release = napi ? frontend::SndbufRelease::OnCompletion
                              : frontend::SndbufRelease::Orphan;
    std::vector<std::unique_ptr<frontend::Flow>> flows;
    std::vector<std::unique_ptr<port::FrameGen>> gens;
    for (uint16_t f = 0; f < cfg.flows; ++f) {
        auto fmt = port::FrameFormat::create(stream ? kStreamFrame : kRrFrame, f);
        if (!fmt) {
            res.error = "frame format";
            return res;
        }
        flows.push_back(std::make_unique<frontend::Flow>(cfg.sndbuf_bytes, release));
        gens.push_back(std::make_unique<port::FrameGen>(*fmt));
    }
    std::vector<uint64_t> seq(cfg.flows, 0);
    std::vector<OutstandingRequests> outstanding(cfg.flows, OutstandingRequests(kMaxOutstanding));
    const double total_s = cfg.warmup_s + cfg.seconds + 1.0;
    std::vector<uint64_t> rtt_ns;  // guest-owned; read after join
    std::vector<uint64_t> rtt_at;  // when each sample completed
    if (!stream) {
        rtt_ns.reserve(static_cast<std::size_t>(2'000'000 * total_s));
        rtt_at.reserve(rtt_ns.capacity());
    }
    std::atomic<uint64_t> responses{0}, frames_sent{0};
    // Open loop: requests due but not sent (read by the window's snapshots).
    std::atomic<uint64_t> backlog{0};
    uint64_t unmatched = 0;        // guest-owned; read after join
    uint32_t max_outstanding = 0;  // guest-owned; read after join
    // Open loop: how late each request left after its planned time.
    std::vector<uint64_t> send_lag_ns, send_lag_at;  // guest-owned; read after join
    std::atomic<bool> stop{false};
    const bool paced = !stream && cfg.rr_rate != 0;
    if (paced) {
        send_lag_ns.reserve(static_cast<std::size_t>(cfg.rr_rate * total_s) + 1);
        send_lag_at.reserve(send_lag_ns.capacity());
    }

    std::thread guest_thread([&] {
        pin_current_thread(cfg.frontend_cpu);
        // The open loop sleeps until each planned time: without this the
        // kernel's default 50 us timer slack would be in every latency.
        if (paced) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        guest.try_fill_recv();
        OpenLoopSchedule sched(paced ? cfg.rr_rate : 1, now_ns());
        const uint32_t len = (stream ? kStreamFrame : kRrFrame) + kHdr;
        while (!stop.load(std::memory_order_relaxed)) {
            // Rx NAPI: ACKs and responses (and, with at-rx, tx completions).
            uint64_t got = 0;
            const uint32_t n = guest.busy_poll_rx(frontend::kNapiBudget,
                                                  [&](uint32_t, std::byte* p, uint32_t l) {
                if (!stream && l >= kHdr + port::kSeqOffset + 8) {
                    const uint16_t f = port::frame_flow_id(p + kHdr);
                    uint64_t sent_at;
                    if (f < cfg.flows && outstanding[f].complete(port::frame_seq(p + kHdr), sent_at)) {
                        const uint64_t t = now_ns();
                        if (rtt_ns.size() < rtt_ns.capacity()) {
                            rtt_ns.push_back(t - sent_at);
                            rtt_at.push_back(t);
                        }
                        ++got;
                    } else {
                        ++unmatched;
                    }
                }
                return false;  // consumed: buffer back to the pool
            });
            if (n != 0) guest.try_fill_recv();
            if (got) responses.fetch_add(got, std::memory_order_relaxed);
            guest.tx_interrupt();  // tx NAPI (or skb_xmit_done) if the tx call fired

            // Transmit.
            uint32_t queued = 0;
            // planned_ns: the open loop's planned time; 0: now (closed loop).
            auto send_one = [&](uint16_t f, uint64_t planned_ns) -> bool {
                if (!flows[f]->can_send(len)) return false;
                uint32_t id;
                if (!guest.alloc_buf(id)) return false;
                std::byte* p = guest.buf_host(id);
                std::memset(p, 0, kHdr);
                gens[f]->write_frame(seq[f]++, p + kHdr, guest.buf_bytes() - kHdr);
                const uint64_t t = now_ns();
                if (guest.xmit(*flows[f], id, len) != frontend::XmitStatus::Ok) {
                    guest.free_buf(id);
                    --seq[f];
                    return false;
                }
                if (!stream) {
                    outstanding[f].add(seq[f] - 1, planned_ns ? planned_ns : t);
                    if (planned_ns && send_lag_ns.size() < send_lag_ns.capacity()) {
                        send_lag_ns.push_back(t - std::min(t, planned_ns));
                        send_lag_at.push_back(t);
                    }
                    max_outstanding = std::max(max_outstanding, outstanding[f].count());
                }
                ++queued;
                return true;
            };
            if (stream) {
                // Round robin, one message's worth of frames per flow per turn.
                const uint32_t per_turn = (kMessageBytes + kStreamFrame - 1) / kStreamFrame;
                for (uint16_t f = 0; f < cfg.flows; ++f) {
                    for (uint32_t k = 0; k < per_turn && send_one(f, 0); ++k) {
                    }
                }
            } else if (!paced) {
                for (uint16_t f = 0; f < cfg.flows; ++f) {
                    if (outstanding[f].count() == 0) send_one(f, 0);
                }
            } else {
                // Every due request leaves in order, flows round robin; one
                // that cannot leave now (outstanding slots, credit, buffers)
                // holds back the later ones and keeps its planned time.
                const uint64_t t = now_ns();
                while (sched.due(t)) {
                    const auto f = static_cast<uint16_t>(sched.next() % cfg.flows);
                    if (outstanding[f].full() || !send_one(f, sched.planned(sched.next()))) break;
                    sched.take();
                }
                backlog.store(sched.backlog(t), std::memory_order_relaxed);
            }
            if (queued) {
                guest.tx_flush();
                frames_sent.fetch_add(queued, std::memory_order_relaxed);
            }
            if (n == 0 && queued == 0 && guest.napi_complete()) {
                // Idle: sleep on either interrupt, bounded (and until the
                // next paced request).
                pollfd p[2] = {{tb.rx_call().fd(), POLLIN, 0}, {tb.tx_call().fd(), POLLIN, 0}};
                // ppoll: the light load's gaps are below a millisecond, and
                // poll()'s ms timeout would turn them into a spin.
                uint64_t timeout_ns = 10'000'000;
                if (paced) {
                    const uint64_t t = now_ns(), next = sched.planned(sched.next());
                    timeout_ns = std::min(timeout_ns, next > t ? next - t : 0);
                }
                const timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000u),
                                  static_cast<long>(timeout_ns % 1'000'000'000u)};
                if (ppoll(p, 2, &ts, nullptr) > 0 && (p[0].revents & POLLIN)) {
                    tb.rx_call().consume();
                }
            }
        }
    });

    auto cpu_ns = [&] {
        return thread_cpu_ns(dev.native_handle()) + thread_cpu_ns(guest_thread.native_handle());
    };
    struct Snap {
        uint64_t t, cpu, sent, resp, bytes_rx, pkts_rx, irqs, kicks, tx_irqs, timers, busy, done,
            done_at_rx, stalls;
    };
    auto stall_count = [&] {
        uint64_t n = 0;
        for (const auto& f : flows) n += f->stats().sndbuf_stalls.get();
        return n;
    };
    auto snap = [&]() -> Snap {
        const auto& bs = dev.stats();
        const auto& fs = guest.stats();
        return Snap{now_ns(),
                    cpu_ns(),
                    frames_sent.load(std::memory_order_relaxed),
                    responses.load(std::memory_order_relaxed),
                    bs.tx_bytes.get(),
                    bs.tx_pkts.get(),
                    bs.rx_calls.get() + bs.tx_calls.get(),
                    fs.rx_kicks.get() + fs.tx_kicks.get(),
                    fs.tx_interrupts.get(),
                    bs.rx_coalesce_timer_fires.get() + bs.tx_coalesce_timer_fires.get(),
                    dev.device_stats().busy_poll_hits.get() + fs.busy_poll_hits.get(),
                    fs.tx_completions.get(),
                    fs.tx_completions_at_rx.get(),
                    stall_count()};
    };
    dev.start(cfg.backend_cpu);
    // The guest asks for coalescing as ethtool -C does, over the control
    // queue (VIRTIO_NET_CTRL_NOTF_COAL). As in the seed's vhost patch the
    // +coalesce columns set the tx queue (64 frames / 64 us); rx-* is 0/0
    // (immediate) unless asked for.
    if (coalesce) {
        if (!tb.fe().set_coalesce(notify::CoalesceParams{cfg.rx_frames, cfg.rx_usecs},
                                 notify::CoalesceParams{cfg.tx_frames, cfg.tx_usecs})) {
            res.error = "NOTF_COAL control request failed";
        }
    }
    sleep_s(cfg.warmup_s);
    const Snap a = snap();
    // A fixed amount of work (seed 000's cycles per run) or a fixed time.
    const uint32_t frame_payload = (stream ? kStreamFrame : kRrFrame) - port::kHdrBytes;
    auto work_done = [&](const Snap& s) {
        return stream ? (s.pkts_rx - a.pkts_rx) * frame_payload : s.resp - a.resp;
    };
    Snap b;
    if (cfg.work == 0) {
        sleep_s(cfg.seconds);
        b = snap();
    } else {
        const uint64_t until = a.t + static_cast<uint64_t>(cfg.seconds * 1e9);
        do {
            sleep_s(0.0005);
            b = snap();
        } while (work_done(b) < cfg.work && b.t < until);
        res.work_completed = work_done(b) >= cfg.work;
    }
    const uint64_t backlog_end = backlog.load(std::memory_order_relaxed);
    stop.store(true, std::memory_order_relaxed);
    tb.rx_call().signal();
    guest_thread.join();
    // Drain (bounded): the worker consumes what the guest queued, unless the
    // server's response queue is full (then it stays in flight, reported).
    const auto consumed = [&] {
        const auto& bs = dev.stats();
        return bs.tx_pkts.get() + bs.tx_drop_bad_chain.get() + bs.tx_drop_port.get();
    };
    for (const uint64_t until = now_ns() + 1'000'000'000u;
         consumed() < guest.stats().tx_pkts.get() && now_ns() < until;) {
        sleep_s(0.001);
    }
    dev.stop();
    {
        const auto& bs = dev.stats();
        const auto& fs = guest.stats();
        res.guest_tx = fs.tx_pkts.get();
        res.tx_in_flight = res.guest_tx - std::min(res.guest_tx, consumed());
        res.be_tx = bs.tx_pkts.get();
        res.be_tx_bad_chain = bs.tx_drop_bad_chain.get();
        res.be_tx_port = bs.tx_drop_port.get();
        res.be_tx_retry = bs.tx_retry.get();
        res.srv_requests = srv.requests.get();
        res.srv_drop_bad_request = srv.drop_bad_request.get();
        res.srv_retry = srv.retry_queue_full.get();
        res.srv_unanswered = srv.unanswered.get();
        res.srv_responses = srv.responses.get();
        res.srv_drop_no_room = srv.drop_no_room.get();
        res.srv_pending = srv.pending();
        res.be_rx = bs.rx_pkts.get();
        res.be_rx_no_room = bs.rx_drop_no_room.get();
        res.be_rx_bad_chain = bs.rx_drop_bad_chain.get();
        res.guest_rx = fs.rx_pkts.get();
        res.guest_rx_bad_len = fs.rx_drop_bad_len.get();
        res.guest_rx_length_errors = fs.rx_length_errors.get();
    }

    res.window_s = static_cast<double>(b.t - a.t) / 1e9;
    const double pkts = static_cast<double>(b.sent - a.sent);
    res.pkts_per_s = pkts / res.window_s;
    const uint64_t pkts_rx = b.pkts_rx - a.pkts_rx, bytes_rx = b.bytes_rx - a.bytes_rx;
    res.frame_gbps = static_cast<double>(bytes_rx - pkts_rx * kHdr) * 8 / res.window_s / 1e9;
    res.goodput_gbps = static_cast<double>(pkts_rx * frame_payload) * 8 / res.window_s / 1e9;
    res.work = work_done(b);
    res.gcycles = static_cast<double>(b.cpu - a.cpu) * tsc_per_ns() / 1e9;
    res.offered_per_s = paced ? cfg.rr_rate : 0;
    res.backlog_end = backlog_end;
    res.rr_unmatched = unmatched;
    res.max_outstanding = max_outstanding;
    for (const auto& o : outstanding) res.rr_abandoned += o.abandoned();
    res.sndbuf_stalls_per_s = static_cast<double>(b.stalls - a.stalls) / res.window_s;
    res.trans_per_s = static_cast<double>(b.resp - a.resp) / res.window_s;
    if (pkts > 0) {
        res.cycles_per_pkt = static_cast<double>(b.cpu - a.cpu) * tsc_per_ns() / pkts;
    }
    // Over the whole run, after the join: two counters read while the guest
    // thread runs are never from the same instant.
    if (const uint64_t n = guest.stats().tx_pkts.get(); n != 0) {
        res.bytes_per_pkt = static_cast<double>(guest.stats().tx_bytes.get()) / static_cast<double>(n);
    }
    res.interrupts_per_s = static_cast<double>(b.irqs - a.irqs) / res.window_s;
    res.kicks_per_s = static_cast<double>(b.kicks - a.kicks) / res.window_s;
    res.tx_interrupts_per_s = static_cast<double>(b.tx_irqs - a.tx_irqs) / res.window_s;
    if (b.done > a.done) {
        res.tx_reaped_at_rx = static_cast<double>(b.done_at_rx - a.done_at_rx) /
                              static_cast<double>(b.done - a.done);
    }
    res.coalesce_timer_fires_per_s = static_cast<double>(b.timers - a.timers) / res.window_s;
    res.busy_poll_hits_per_s = static_cast<double>(b.busy - a.busy) / res.window_s;
    std::vector<uint64_t> w;
    for (std::size_t i = 0; i < rtt_ns.size(); ++i) {
        if (rtt_at[i] >= a.t && rtt_at[i] < b.t) w.push_back(rtt_ns[i]);
    }
    res.p50_us = percentile(w, 0.50) / 1e3;
    res.p99_us = percentile(w, 0.99) / 1e3;
    w.clear();
    for (std::size_t i = 0; i < send_lag_ns.size(); ++i) {
        if (send_lag_at[i] >= a.t && send_lag_at[i] < b.t) w.push_back(send_lag_ns[i]);
    }
    res.send_lag_p50_us = percentile(w, 0.50) / 1e3;
    res.send_lag_p99_us = percentile(w, 0.99) / 1e3;
    for (const auto& f : flows) {
        res.sndbuf_stalls += f->stats().sndbuf_stalls.get();
        res.sndbuf_stall_ms += static_cast<double>(f->stats().sndbuf_stall_ns.get()) / 1e6;
    }
    const bool broken = tb.any_broken(dev);
    res.ok = !broken && pkts > 0 && res.error.empty();
    if (broken) res.error = "a queue broke";
    else if (!res.ok && res.error.empty()) res.error = "nothing was sent";
    return res;
}

}  // namespace pvnet::bench
