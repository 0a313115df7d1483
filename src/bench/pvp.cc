// One PVP run: guest memory, two rings, a VhostNet worker with a
// GenLoopPort, and a guest thread doing io forwarding.
#include "pvnet/bench/pvp.h"

#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <unistd.h>

#include "pvnet/bench/relay_bench.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/lab/child.h"
#include "pvnet/lab/tool_output.h"
#include "pvnet/vhost_user/frontend.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/port/gen_loop_port.h"
#include "pvnet/util/clock.h"
#include "pvnet/pair/guest_pair.h"
#include "pvnet/util/thread.h"

namespace pvnet::bench {
namespace {

// Counters sampled at the edges of the measured window.
struct Sample {
    uint64_t t_ns, delivered, be_cpu, fe_cpu, kicks, irqs, rx_req, tx_req;
};

// The guest: NAPI rx poll, forward each frame to tx, free-on-xmit.
void guest_forward(frontend::QueuePair& guest_dev, const PvpConfig& cfg,
                   const std::atomic<bool>& stop) noexcept {
    const bool poll_mode = cfg.mode == backend::RunMode::Poll;
    pin_current_thread(cfg.frontend_cpu);
    if (poll_mode) guest_dev.disable_interrupts();
    guest_dev.try_fill_recv();
    while (!stop.load(std::memory_order_relaxed)) {
        guest_dev.free_old_xmit();
        const uint32_t budget =
            cfg.backpressure ? std::min<uint32_t>(frontend::kNapiBudget,
                                                  guest_dev.tx_queue().num_free())
                             : frontend::kNapiBudget;
        const uint32_t n = guest_dev.poll_rx(
            budget, [&](uint32_t id, std::byte*, uint32_t len) {
                guest_dev.xmit(id, len);  // frees the buffer itself on a full ring
                return true;
            });
        if (n != 0) {
            guest_dev.tx_flush();
            guest_dev.try_fill_recv();
        }
        if (!poll_mode && n < budget && guest_dev.napi_complete()) {
            guest_dev.wait_rx(10'000);
        }
    }
}

/// The measured window's rates from its edge samples.
void window_rates(PvpResult& res, const Sample& a, const Sample& b) noexcept {
    const double pkts = static_cast<double>(b.delivered - a.delivered);
    res.window_s = static_cast<double>(b.t_ns - a.t_ns) / 1e9;
    res.mpps = pkts / res.window_s / 1e6;
    if (pkts <= 0) return;
    res.backend_cpu_ns_per_pkt = static_cast<double>(b.be_cpu - a.be_cpu) / pkts;
    res.frontend_cpu_ns_per_pkt = static_cast<double>(b.fe_cpu - a.fe_cpu) / pkts;
    res.backend_cycles_per_pkt = res.backend_cpu_ns_per_pkt * tsc_per_ns();
    res.frontend_cycles_per_pkt = res.frontend_cpu_ns_per_pkt * tsc_per_ns();
    res.kicks_per_pkt = static_cast<double>(b.kicks - a.kicks) / pkts;
    res.interrupts_per_pkt = static_cast<double>(b.irqs - a.irqs) / pkts;
    res.rx_requeue_per_kpkt = static_cast<double>(b.rx_req - a.rx_req) * 1000.0 / pkts;
    res.tx_requeue_per_kpkt = static_cast<double>(b.tx_req - a.tx_req) * 1000.0 / pkts;
}

PvpResult run_pvp_vhost_user(const PvpConfig& cfg) noexcept;

}  // namespace

double tsc_per_ns() noexcept {
    static const double rate = [] {
        const uint64_t t0 = now_ns();
        const uint64_t c0 = __rdtsc();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const uint64_t t1 = now_ns();
        const uint64_t c1 = __rdtsc();
        return static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
    }();
    return rate;
}

PvpResult run_pvp(const PvpConfig& cfg) noexcept {
    if (cfg.transport == PvpTransport::VhostUser) return run_pvp_vhost_user(cfg);
    PvpResult res;
    auto fmt = port::FrameFormat::create(cfg.frame_bytes);
    if (!fmt) {
        res.error = std::string(port::to_string(fmt.error()));
        return res;
    }
    pair::GuestPair tb;
    if (auto err = tb.setup(cfg.queue_size, cfg.event_idx)) {
        res.error = *err;
        return res;
    }
    port::GenLoopPort port(*fmt);
    backend::VhostNetOptions bc;
    bc.rx_weight = cfg.weight;
    bc.tx_weight = cfg.tx_weight;
    bc.mode = cfg.mode;
    auto be = backend::VhostNet<port::GenLoopPort>::create(tb.device_setup(), bc, port);
    if (!be) {
        res.error = "backend setup";
        return res;
    }
    frontend::QueuePair& guest_dev = tb.qp();
    backend::VhostNet<port::GenLoopPort>& dev = **be;

    std::atomic<bool> guest_stop{false};
    std::thread guest_thread([&] { guest_forward(guest_dev, cfg, guest_stop); });

    auto sample = [&]() -> Sample {
        const auto& fs = guest_dev.stats();
        const auto& bs = dev.stats();
        return Sample{now_ns(),
                      port.sink().stats().sink_pkts,
                      thread_cpu_ns(dev.native_handle()),
                      thread_cpu_ns(guest_thread.native_handle()),
                      fs.rx_kicks.get() + fs.tx_kicks.get(),
                      bs.rx_calls.get() + bs.tx_calls.get(),
                      bs.rx_weight_requeue.get(),
                      bs.tx_weight_requeue.get()};
    };

    dev.start(cfg.backend_cpu);
    sleep_s(cfg.warmup_s);
    const Sample a = sample();
    if (cfg.frames != 0) {
        // Bounded: give up after 60 s whatever the rate.
        const uint64_t deadline = now_ns() + 60'000'000'000u;
        while (port.sink().stats().sink_pkts < cfg.frames && now_ns() < deadline) sleep_s(0.01);
    } else {
        sleep_s(cfg.seconds);
    }
    const Sample b = sample();

    // Drain: stop the flood, let in-flight frames reach the sink or a drop.
    port.stop();
    auto accounted = [&] {
        const auto& fs = guest_dev.stats();
        const auto& bs = dev.stats();
        return port.sink().stats().sink_pkts + port.sink().stats().sink_drop_corrupt +
               port.sink().stats().sink_drop_bad_len + fs.tx_drop_ring_full.get() +
               fs.rx_drop_bad_len.get() + bs.rx_drop_no_room.get() + bs.tx_drop_bad_chain.get();
    };
    const uint64_t drain_deadline = now_ns() + 5'000'000'000u;
    uint64_t last = 0;
    for (;;) {
        sleep_s(0.02);
        const uint64_t acc = accounted();
        // The flood stopped, so generated() no longer moves once the worker
        // left handle_rx; wait until two samples agree and all is accounted.
        if ((acc == last && acc >= port.gen().stats().gen_pkts) || now_ns() > drain_deadline) break;
        last = acc;
    }
    guest_stop.store(true, std::memory_order_relaxed);
    tb.rx_call().signal();
    guest_thread.join();
    dev.stop();

    const auto ss = port.sink().stats();
    const auto& fs = guest_dev.stats();
    const auto& bs = dev.stats();
    port.sink().finish(port.generated());
    const auto fin = port.sink().stats();
    res.generated = port.generated();
    res.delivered = ss.sink_pkts;
    res.drop_tx_full = fs.tx_drop_ring_full.get();
    res.drop_other = fs.rx_drop_bad_len.get() + bs.rx_drop_no_room.get() +
                     bs.tx_drop_bad_chain.get() + ss.sink_drop_corrupt + ss.sink_drop_bad_len;
    res.be_rx = bs.rx_pkts.get();
    res.be_rx_no_room = bs.rx_drop_no_room.get();
    res.be_rx_bad_chain = bs.rx_drop_bad_chain.get();
    res.guest_rx = fs.rx_pkts.get();
    res.guest_rx_bad_len = fs.rx_drop_bad_len.get();
    res.guest_rx_multi_buf = fs.rx_drop_multi_buf.get();
    res.guest_tx = fs.tx_pkts.get();
    res.be_tx = bs.tx_pkts.get();
    res.be_tx_bad_chain = bs.tx_drop_bad_chain.get();
    res.be_tx_port = bs.tx_drop_port.get();
    res.be_tx_retry = bs.tx_retry.get();
    res.corrupt = ss.sink_drop_corrupt;
    res.reordered = ss.sink_reordered;
    res.duplicates = ss.sink_duplicates;
    // Frames never seen by the sink: exactly the counted drops if nothing was lost silently.
    res.lost = fin.sink_lost;

    window_rates(res, a, b);
    res.rx_max_run_pkts = bs.rx_max_run_pkts.get();
    res.tx_max_run_pkts = bs.tx_max_run_pkts.get();

    const bool broken = tb.any_broken(dev);
    // sent = delivered + drops, and the sink's own view agrees.
    const bool balanced = res.delivered + res.drop_tx_full + res.drop_other == res.generated &&
                          res.delivered + res.lost - res.reordered == res.generated;
    res.ok = !broken && balanced && res.corrupt == 0;
    if (broken) res.error = "a queue broke";
    else if (!balanced) res.error = "frames unaccounted for";
    else if (res.corrupt != 0) res.error = "corrupt frames";
    return res;
}


/// run_pvp with the backend in a `pvnet serve --gen-loop` process: the guest
/// forwards as in process; the rate is what it forwarded (the sink is
/// serve's), the books are closed from serve's final counters.
namespace {
PvpResult run_pvp_vhost_user(const PvpConfig& cfg) noexcept {
    PvpResult res;
    const std::string sock = "/tmp/pvnet-pvp-" + std::to_string(::getpid()) + ".sock";
    const auto u = [](uint64_t v) { return std::to_string(v); };
    const std::vector<std::string> argv = {
        cfg.pvnet_exe, "serve", "--vhost-user", sock, "--gen-loop", u(cfg.frame_bytes),
        "--mode", cfg.mode == backend::RunMode::Poll ? "poll" : "event",
        "--rx-weight", u(cfg.weight.pkts), "--rx-weight-bytes", u(cfg.weight.bytes),
        "--tx-weight", u(cfg.tx_weight.pkts), "--tx-weight-bytes", u(cfg.tx_weight.bytes),
        "--backend-cpu", std::to_string(cfg.backend_cpu)};
    auto child = lab::Child::spawn(argv);
    if (!child) {
        res.error = child.error();
        return res;
    }
    if (!child->wait_for_line("ready", std::chrono::seconds(10))) {
        res.error = "pvnet serve not ready: " + child->output_tail(1000);
        return res;
    }
    vhost_user::FrontendConfig fc;
    fc.path = sock;
    auto fe = vhost_user::Frontend::create(fc);
    if (!fe) {
        res.error = fe.error();
        return res;
    }
    using namespace virtio;
    const uint64_t wanted = feature_mask(VIRTIO_F_VERSION_1) |
                            (cfg.event_idx ? feature_mask(VIRTIO_RING_F_EVENT_IDX) : 0);
    auto f = (*fe)->connect(wanted);
    pair::GuestPair tb;
    if (!f) {
        res.error = f.error().text;
        return res;
    }
    if (auto err = tb.setup(cfg.queue_size, cfg.event_idx)) {
        res.error = *err;
        return res;
    }
    const mem::MemoryRegion& g = tb.guest_region();
    if (auto st = (*fe)->start(tb.device_setup(), {g.fd(), pair::kGuestBase, g.size(), g.host()});
        !st) {
        res.error = st.error().text;
        return res;
    }
    frontend::QueuePair& guest_dev = tb.qp();
    std::atomic<bool> guest_stop{false};
    std::thread guest_thread([&] { guest_forward(guest_dev, cfg, guest_stop); });
    const pid_t be_pid = child->pid();
    auto sample = [&]() -> Sample {
        const auto& fs = guest_dev.stats();
        return Sample{now_ns(),
                      fs.tx_pkts.get(),
                      [&] {
                          auto c = process_cpu_ns(be_pid);
                          return c ? *c : 0;
                      }(),
                      thread_cpu_ns(guest_thread.native_handle()),
                      fs.rx_kicks.get() + fs.tx_kicks.get(),
                      0,
                      0,
                      0};
    };
    sleep_s(cfg.warmup_s);
    const Sample a = sample();
    if (cfg.frames != 0) {
        const uint64_t deadline = now_ns() + 60'000'000'000u;
        while (guest_dev.stats().tx_pkts.get() < cfg.frames && now_ns() < deadline) sleep_s(0.01);
    } else {
        sleep_s(cfg.seconds);
    }
    const Sample b = sample();

    // GET_VRING_BASE: serve stops both rings with every popped buffer used.
    const auto stopped = (*fe)->stop();
    guest_stop.store(true, std::memory_order_relaxed);
    tb.rx_call().signal();
    guest_thread.join();
    // What the stop left in the rings: frames on rx the guest never forwarded,
    // frames on tx serve never took.
    guest_dev.free_old_xmit();
    uint64_t left = guest_dev.tx_queue().in_flight();
    while (const uint32_t n = guest_dev.poll_rx(frontend::kNapiBudget,
                                                [&](uint32_t id, std::byte*, uint32_t) {
                                                    guest_dev.free_buf(id);
                                                    return true;
                                                })) {
        left += n;
    }
    const auto ex = child->stop(std::chrono::seconds(5));
    const std::string line = lab::serve_queue_line(child->output(), "final").value_or("");
    const auto get = [&](const char* k) { return lab::key_value(line, k).value_or(0); };
    const auto& fs = guest_dev.stats();
    res.generated = get("port_gen_pkts");
    res.delivered = get("port_sink_pkts");
    res.drop_tx_full = fs.tx_drop_ring_full.get();
    res.drop_other = fs.rx_drop_bad_len.get() + get("rx_drop_no_room") +
                     get("tx_drop_bad_chain") + get("port_sink_drop_corrupt") +
                     get("port_sink_drop_bad_len");
    res.be_rx = get("rx_pkts");
    res.be_rx_no_room = get("rx_drop_no_room");
    res.be_rx_bad_chain = get("rx_drop_bad_chain");
    res.guest_rx = fs.rx_pkts.get();
    res.guest_rx_bad_len = fs.rx_drop_bad_len.get();
    res.guest_tx = fs.tx_pkts.get();
    res.be_tx = get("tx_pkts");
    res.be_tx_bad_chain = get("tx_drop_bad_chain");
    res.be_tx_port = get("tx_drop_port");
    res.corrupt = get("port_sink_drop_corrupt");
    res.reordered = get("port_sink_reordered");
    res.duplicates = get("port_sink_duplicates");
    res.lost = get("port_sink_lost");
    res.rx_max_run_pkts = get("rx_max_run_pkts");
    res.tx_max_run_pkts = get("tx_max_run_pkts");

    window_rates(res, a, b);
    // generated = delivered + counted drops + what the stop left in the rings.
    const bool balanced = res.delivered + res.drop_tx_full + res.drop_other + left == res.generated;
    const bool broken = guest_dev.rx_queue().broken() || guest_dev.tx_queue().broken();
    if (line.empty()) res.error = "no final counters from pvnet serve (" + ex.to_string() + ")";
    else if (!stopped) res.error = "GET_VRING_BASE: " + stopped.error().text;
    else if (broken) res.error = "a queue broke";
    else if (!balanced) res.error = "frames unaccounted for";
    else if (res.corrupt != 0) res.error = "corrupt frames";
    res.ok = res.error.empty();
    return res;
}
}  // namespace

}  // namespace pvnet::bench
