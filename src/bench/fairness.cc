// One fairness run: GenLoopPort's flood on rx, the guest's paced stream on
// tx, latency stamped at the guest's xmit and read where handle_tx hands the
// frame to the port.
#include "pvnet/bench/fairness.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "pvnet/port/gen_loop_port.h"
#include "pvnet/util/thread.h"
#include "pvnet/util/clock.h"
#include "pvnet/bench/open_loop.h"
#include "pvnet/bench/percentile.h"
#include "pvnet/pair/guest_pair.h"

namespace pvnet::bench {
namespace {

/// Send times by sequence number: stored by the guest thread, loaded by the
/// worker. Relaxed atomics, not plain words: the guest's release of
/// avail.idx and the worker's acquire are on two mappings of one memfd
/// (pair::SharedMemoryPair), an edge the C++ model does not define and TSan
/// cannot see (it tracks addresses), so plain words are a data race to both.
/// The ring's order still makes the value visible; a stale read would be
/// 0, never torn, and fall outside the measured window.
using SendTimes = std::vector<std::atomic<uint64_t>>;

// Rx: the flood (GenLoopPort). Tx: the guest's stream, checked by a sink;
// each frame's send time is looked up by its sequence number.
class FairnessPort {
public:
    FairnessPort(const port::FrameFormat& fmt, const SendTimes& send_ns,
                 std::size_t max_samples)
        : flood_(fmt), sink_(fmt), send_ns_(send_ns) {
        samples_.reserve(max_samples);
    }

    bool rx_pending() const noexcept { return flood_.rx_pending(); }
    uint32_t recv(std::span<const iovec> dst) noexcept { return flood_.recv(dst); }

    port::SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        constexpr uint32_t kHdr = port::GenLoopPort::kHdrBytes;
        if (len < kHdr + port::kSeqOffset + 8 || src.empty() || src[0].iov_len < len) {
            tx_bad.add();
            return port::SendResult::Dropped;
        }
        const auto* frame = static_cast<const std::byte*>(src[0].iov_base) + kHdr;
        if (!port::is_valid(sink_.check_frame(frame, len - kHdr))) return port::SendResult::Dropped;
        uint64_t seq_be;
        std::memcpy(&seq_be, frame + port::kSeqOffset, sizeof seq_be);
        const uint64_t seq = __builtin_bswap64(seq_be);
        // ORDER: relaxed; send_ns_[seq] was stored before the guest published
        // the chain (release of avail.idx, acquired by pop), see SendTimes.
        if (samples_.size() < samples_.capacity()) {
            samples_.push_back(
                {send_ns_[seq % send_ns_.size()].load(std::memory_order_relaxed), now_ns()});
        }
        return port::SendResult::Sent;
    }

    Counter tx_bad;  ///< frames too short to carry a sequence number

    void stop() noexcept { flood_.stop(); }
    port::FrameSink& sink() noexcept { return sink_; }
    struct Sample {
        uint64_t sent_ns, seen_ns;
    };
    const std::vector<Sample>& samples() const noexcept { return samples_; }

private:
    port::GenLoopPort flood_;
    port::FrameSink sink_;
    const SendTimes& send_ns_;
    std::vector<Sample> samples_;  ///< worker-owned; read after stop
};

}  // namespace

FairnessResult run_fairness(const FairnessConfig& cfg) noexcept {
    FairnessResult res;
    auto fmt = port::FrameFormat::create(cfg.frame_bytes);
    if (!fmt || cfg.tx_pps == 0) {
        res.error = "bad frame size or rate";
        return res;
    }
    pair::GuestPair tb;
    if (auto err = tb.setup(cfg.queue_size, cfg.event_idx)) {
        res.error = *err;
        return res;
    }
    const double total_s = cfg.warmup_s + cfg.seconds + 1.0;
    const auto max_frames = static_cast<std::size_t>(cfg.tx_pps * total_s) + 1024;
    SendTimes send_ns(max_frames);  // value-initialized: 0
    FairnessPort port(*fmt, send_ns, max_frames);
    backend::VhostNetOptions bc;
    bc.rx_weight = cfg.rx_weight;
    bc.tx_weight = cfg.tx_weight;
    bc.mode = cfg.mode;
    auto be = backend::VhostNet<FairnessPort>::create(tb.device_setup(), bc, port);
    if (!be) {
        res.error = "backend setup";
        return res;
    }
    backend::VhostNet<FairnessPort>& dev = **be;
    frontend::QueuePair& guest = tb.qp();

    std::atomic<bool> stop_tx{false}, stop_guest{false};
    std::atomic<uint64_t> sent{0};
    uint64_t stalls = 0;
    const bool poll_mode = cfg.mode == backend::RunMode::Poll;
    std::thread guest_thread([&] {
        pin_current_thread(cfg.frontend_cpu);
        if (poll_mode) guest.disable_interrupts();
        port::FrameGen stream(*fmt);
        constexpr uint32_t kHdr = port::GenLoopPort::kHdrBytes;
        guest.try_fill_recv();
        uint64_t seq = 0;
        // Open loop: a frame that could not leave at its planned time
        // (no buffer) leaves as soon as one is free, never skipped.
        OpenLoopSchedule sched(cfg.tx_pps, now_ns());
        while (!stop_guest.load(std::memory_order_relaxed)) {
            guest.free_old_xmit();
            // The flood is only consumed: the buffer goes straight back.
            const uint32_t n = guest.poll_rx(frontend::kNapiBudget,
                                             [](uint32_t, std::byte*, uint32_t) { return false; });
            if (n != 0) guest.try_fill_recv();
            uint64_t t = now_ns();
            uint32_t queued = 0;
            while (!stop_tx.load(std::memory_order_relaxed) && sched.due(t) && seq < max_frames &&
                   queued < frontend::kNapiBudget) {
                uint32_t id;
                if (!guest.alloc_buf(id)) {
                    ++stalls;
                    break;
                }
                std::byte* p = guest.buf_host(id);
                std::memset(p, 0, kHdr);
                const uint32_t len = stream.write_frame(seq, p + kHdr, guest.buf_bytes() - kHdr);
                // ORDER: relaxed; published with the chain (see SendTimes).
                send_ns[seq % send_ns.size()].store(t, std::memory_order_relaxed);
                guest.xmit(id, len + kHdr);
                ++seq;
                ++queued;
                sched.take();
            }
            if (queued != 0) {
                guest.tx_flush();
                sent.store(seq, std::memory_order_relaxed);
            }
            if (!poll_mode && n < frontend::kNapiBudget && guest.napi_complete()) {
                t = now_ns();
                const uint64_t next = sched.planned(sched.next());
                const int64_t wait_us = next > t ? static_cast<int64_t>((next - t) / 1000) : 0;
                guest.wait_rx(std::min<int64_t>(wait_us, 1000));
            }
        }
    });

    dev.start(cfg.backend_cpu);
    sleep_s(cfg.warmup_s);
    const uint64_t t0 = now_ns();
    const uint64_t sent0 = sent.load(std::memory_order_relaxed);
    const uint64_t rx0 = guest.stats().rx_pkts.get();
    const uint64_t req0 = dev.stats().rx_weight_requeue.get();
    const uint64_t rxp0 = dev.stats().rx_pkts.get();
    sleep_s(cfg.seconds);
    const uint64_t t1 = now_ns();
    const uint64_t sent1 = sent.load(std::memory_order_relaxed);
    const uint64_t rx1 = guest.stats().rx_pkts.get();
    const uint64_t req1 = dev.stats().rx_weight_requeue.get();
    const uint64_t rxp1 = dev.stats().rx_pkts.get();

    // Drain: stop sending, then the flood, give tx time to finish.
    stop_tx.store(true, std::memory_order_relaxed);
    port.stop();
    const uint64_t deadline = now_ns() + 5'000'000'000u;
    while (port.sink().stats().sink_pkts + guest.stats().tx_drop_ring_full.get() <
               sent.load(std::memory_order_relaxed) &&
           now_ns() < deadline) {
        sleep_s(0.01);
    }
    stop_guest.store(true, std::memory_order_relaxed);
    tb.rx_call().signal();
    guest_thread.join();
    dev.stop();

    std::vector<uint64_t> lat;
    uint64_t in_window = 0;
    for (const auto& s : port.samples()) {
        if (s.sent_ns < t0 || s.sent_ns >= t1) continue;
        ++in_window;
        lat.push_back(s.seen_ns - s.sent_ns);
    }
    res.window_s = static_cast<double>(t1 - t0) / 1e9;
    res.tx_offered_pps = static_cast<double>(sent1 - sent0) / res.window_s;
    res.tx_delivered_pps = static_cast<double>(in_window) / res.window_s;
    res.rx_mpps = static_cast<double>(rx1 - rx0) / res.window_s / 1e6;
    res.lat_p50_us = percentile(lat, 0.50) / 1e3;
    res.lat_p99_us = percentile(lat, 0.99) / 1e3;
    res.lat_max_us = lat.empty() ? 0 : static_cast<double>(*std::max_element(lat.begin(), lat.end())) / 1e3;
    const auto ss = port.sink().stats();
    res.tx_sent = sent.load(std::memory_order_relaxed);
    res.tx_delivered = ss.sink_pkts;
    res.tx_corrupt = ss.sink_drop_corrupt;
    res.tx_stalls = stalls;
    port.sink().finish(res.tx_sent);
    res.tx_lost = port.sink().stats().sink_lost;
    if (rxp1 > rxp0) {
        res.rx_requeue_per_kpkt = static_cast<double>(req1 - req0) * 1000.0 / static_cast<double>(rxp1 - rxp0);
    }
    const uint64_t drops = guest.stats().tx_drop_ring_full.get();
    const bool broken = tb.any_broken(dev);
    res.ok = !broken && res.tx_corrupt == 0 && res.tx_delivered + drops == res.tx_sent;
    if (broken) res.error = "a queue broke";
    else if (!res.ok) res.error = "tx frames unaccounted for";
    return res;
}

}  // namespace pvnet::bench
