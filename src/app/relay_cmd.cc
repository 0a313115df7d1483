// `pvnet relay`: join tap A (the guest's side) and tap B (the host's side),
// each in its own namespace if asked (DESIGN.md, "Data flow"). The whole
// command-line contract of issue 5 is parsed here; `--plain` runs the plain
// tun relay (include/pvnet/relay/plain_relay.h), otherwise the ring relay
// (include/pvnet/relay/ring_relay.h).
//
// Output contract (scripts and `pvnet bench relay` read it): one line
// "ready" on stdout once both taps are open and the datapath runs, a "stats"
// line per --stats-interval, a "final" line on SIGINT/SIGTERM, exit 0.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "app_commands.h"
#include "backend_options.h"
#include "cli_checks.h"
#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/xps.h"
#include "pvnet/relay/plain_relay.h"
#include "pvnet/relay/ring_relay.h"
#include "pvnet/virtio/virtio_ring.h"
#include "stop_signals.h"

namespace pvnet::app {
namespace {

struct RelayOptions {
    std::string guest_tap, host_tap, guest_netns, host_netns;
    bool plain = false;
    std::string tx_mode = "napi";
    bool at_rx = false;
    BackendKnobs backend;
    uint32_t busy_poll_usecs = 0;
    bool direct = true;
    std::string vhost_user;          ///< two processes: the backend behind this socket
    bool vhost_user_server = false;
    uint32_t direct_max = 4;
    uint32_t direct_spin_usecs = 0;
    uint16_t queue_size = 256;
    uint16_t queues = 1;
    std::string offloads = "on";
    int guest_cpu = -1, backend_cpu = -1;
    double stats_interval = 1.0;
    bool xps = false, symmetric = false;
    std::vector<std::string> xps_cpus, xps_rxqs;  ///< "TXQ=MASK", sysfs mask syntax
};

/// "TXQ=MASK" of --xps-cpus / --xps-rxqs (and of their run-time commands):
/// tx queue TXQ < `queues`, MASK in sysfs syntax over `nbits` bits. The
/// error text names the bad part.
Result<std::pair<uint16_t, std::string>, std::string> parse_xps_setting(const std::string& s,
                                                                        uint16_t queues,
                                                                        unsigned nbits) {
    const std::size_t eq = s.find('=');
    uint16_t txq = 0;
    if (eq == std::string::npos || !CLI::detail::lexical_cast(s.substr(0, eq), txq) ||
        txq >= queues) {
        return unexpected(checks::must_be(
            s, "TXQ=MASK with TXQ a tx queue from 0 to " + std::to_string(queues - 1)));
    }
    std::string mask = s.substr(eq + 1);
    frontend::XpsMask parsed;
    if (auto err = frontend::XpsMask::parse(mask, nbits, parsed)) {
        return unexpected(checks::must_be(s, "TXQ=MASK with MASK a mask in sysfs syntax (" +
                                                 *err + ")"));
    }
    return std::pair{txq, std::move(mask)};
}

/// The CPUs XPS masks cover (the kernel's nr_cpu_ids, here the online CPUs).
unsigned xps_cpu_bits() {
    return static_cast<unsigned>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

/// One run-time command read from stdin, as a sysfs write would be:
/// "xps_cpus TXQ=MASK" or "xps_rxqs TXQ=MASK". The reply line names the
/// command: "<command>: ok" or "<command>: error: <why>".
std::string relay_command(relay::RingRelay& r, uint16_t queues, bool xps, const std::string& line) {
    const std::size_t sp = line.find(' ');
    const std::string name = line.substr(0, sp);
    const bool rxqs = name == "xps_rxqs";
    std::string err;
    if (!rxqs && name != "xps_cpus") {
        err = "unknown command (xps_cpus TXQ=MASK, xps_rxqs TXQ=MASK)";
    } else if (!xps) {
        err = "XPS is off (start the relay with --xps or --symmetric)";
    } else if (sp == std::string::npos) {
        err = "TXQ=MASK missing";
    } else if (auto set = parse_xps_setting(line.substr(sp + 1), queues,
                                            rxqs ? queues : xps_cpu_bits());
               !set) {
        err = set.error();
    } else if (auto e = r.set_xps_mask(rxqs, set->first, set->second)) {
        err = *e;
    }
    return line + (err.empty() ? ": ok" : ": error: " + err);
}

/// TUN_F_* for --offloads: what lets 64 KiB GSO frames and partial checksums through.
unsigned offload_flags(const RelayOptions& o) {
    return o.offloads == "on" ? port::kTunFGso : 0;
}

std::string dir_counters(const char* name, const relay::PlainDirStats& d) {
    std::string s = std::string(name) + "_frames=" + std::to_string(d.frames.get()) + " " + name +
                    "_reads=" + std::to_string(d.reads.get()) + " " + name +
                    "_bytes=" + std::to_string(d.bytes.get()) + " " + name +
                    "_write_eagain=" + std::to_string(d.write_eagain.get()) + " " + name +
                    "_write_errors=" + std::to_string(d.write_errors()) + " " + name +
                    "_write_short=" + std::to_string(d.write_short.get()) + " " + name +
                    "_read_eagain=" + std::to_string(d.read_eagain.get()) + " " + name +
                    "_read_errors=" + std::to_string(d.read_errors.get()) + " " + name +
                    "_read_truncated=" + std::to_string(d.read_truncated.get());
    for (std::size_t e = 0; e < d.write_errno.size(); ++e) {
        if (const uint64_t n = d.write_errno[e].get(); n != 0) {
            const char* ename = e + 1 < d.write_errno.size() ? strerrorname_np(static_cast<int>(e))
                                                              : "other";
            s += " " + std::string(name) + "_write_errno_" + (ename ? ename : std::to_string(e)) +
                 "=" + std::to_string(n);
        }
    }
    return s;
}

void print_counters(const char* tag, const relay::PlainRelayStats& st) {
    std::printf("%s %s %s polls=%llu\n", tag, dir_counters("g2h", st.guest_to_host).c_str(),
                dir_counters("h2g", st.host_to_guest).c_str(),
                static_cast<unsigned long long>(st.polls.get()));
    std::fflush(stdout);
}

/// Prints "ready", then a `print("stats")` line per --stats-interval until
/// SIGINT/SIGTERM arrive on `sfd` or `ended()` says the datapath stopped.
/// With `command`, each line read from stdin gets its reply printed, until
/// stdin ends.
void serve(int sfd, const RelayOptions& o, const std::function<void(const char*)>& print,
           const std::function<bool()>& ended,
           const std::function<std::string(const std::string&)>& command = {}) {
    std::printf("ready\n");
    std::fflush(stdout);
    using Clock = std::chrono::steady_clock;
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(o.stats_interval));
    auto next_stats = Clock::now() + interval;
    bool stdin_open = static_cast<bool>(command);
    std::string pending;  // stdin bytes after the last newline
    // Short waits: the datapath's own end (a tap gone) is noticed within 100 ms.
    while (!ended()) {
        pollfd p[2] = {{sfd, POLLIN, 0}, {stdin_open ? STDIN_FILENO : -1, POLLIN, 0}};
        if (::poll(p, 2, 100) > 0) {
            signalfd_siginfo si;
            if ((p[0].revents & POLLIN) != 0 &&
                ::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                break;
            }
            if (p[1].revents != 0) {
                char buf[512];
                const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
                // EOF or an error: no more commands (stdin is /dev/null when nobody talks).
                if (n <= 0) stdin_open = false;
                if (n > 0) pending.append(buf, static_cast<std::size_t>(n));
                // A line too long to be a command is dropped, not kept growing.
                if (pending.size() > 4096 && pending.find('\n') == std::string::npos) {
                    pending.clear();
                }
                for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
                    const std::string line = pending.substr(0, nl);
                    pending.erase(0, nl + 1);
                    if (line.empty()) continue;
                    std::printf("%s\n", command(line).c_str());
                    std::fflush(stdout);
                }
            }
        }
        if (o.stats_interval > 0 && Clock::now() >= next_stats) {
            print("stats");
            next_stats += interval;
        }
    }
}

void run_plain(const RelayOptions& o) {
    const int sfd = block_stop_signals();
    relay::PlainRelayConfig cfg;
    cfg.guest.name = o.guest_tap;
    cfg.guest.netns = o.guest_netns;
    cfg.guest.offloads = offload_flags(o);
    cfg.host.name = o.host_tap;
    cfg.host.netns = o.host_netns;
    cfg.host.offloads = offload_flags(o);
    cfg.cpu = o.backend_cpu;
    auto r = relay::PlainRelay::open(cfg);
    if (!r) {
        ::close(sfd);
        throw std::runtime_error("opening the taps: " + port::to_string(r.error()));
    }
    relay::PlainRelay& relay = **r;

    std::atomic<bool> stop{false}, ended{false};
    Status<port::SysError> result;
    std::thread worker([&] {
        result = relay.run(stop);
        ended.store(true);
    });
    serve(sfd, o, [&](const char* tag) { print_counters(tag, relay.stats()); },
          [&] { return ended.load(); });
    stop.store(true);
    worker.join();
    ::close(sfd);
    print_counters("final", relay.stats());
    if (!result) throw std::runtime_error("relay stopped: " + port::to_string(result.error()));
}

/// The ring relay's counters as one line, the same key=value shape as the plain relay's.
void print_ring_counters(const char* tag, const relay::RingRelay& r) {
    const relay::RingRelayCounters c = r.counters();
    std::printf(
        "%s g2h_frames=%llu g2h_bytes=%llu h2g_frames=%llu h2g_bytes=%llu gso_g2h=%llu "
        "gso_h2g=%llu max_g2h_frame=%llu kicks=%llu interrupts=%llu direct_runs=%llu "
        "direct_busy=%llu tap_a_drops=%llu tap_a_einval=%llu tap_b_drops=%llu tap_b_einval=%llu "
        "ring_drops=%llu broken=%d",
        tag, static_cast<unsigned long long>(c.a_to_b_pkts),
        static_cast<unsigned long long>(c.a_to_b_bytes),
        static_cast<unsigned long long>(c.b_to_a_pkts),
        static_cast<unsigned long long>(c.b_to_a_bytes),
        static_cast<unsigned long long>(c.gso_frames_tx),
        static_cast<unsigned long long>(c.gso_frames_rx),
        static_cast<unsigned long long>(c.max_tx_frame), static_cast<unsigned long long>(c.kicks),
        static_cast<unsigned long long>(c.interrupts),
        static_cast<unsigned long long>(c.direct_runs),
        static_cast<unsigned long long>(c.direct_busy),
        static_cast<unsigned long long>(c.tap_a_drops),
        static_cast<unsigned long long>(c.tap_a_einval),
        static_cast<unsigned long long>(c.tap_b_drops),
        static_cast<unsigned long long>(c.tap_b_einval),
        static_cast<unsigned long long>(c.ring_drops), c.broken ? 1 : 0);
    // Accounting: each direction's frames in, out and dropped by reason.
    const std::pair<const char*, uint64_t> acct[] = {
        {"a_read", c.a_read},
        {"a_read_drops", c.a_read_drops},
        {"g2h_queued", c.g2h_queued},
        {"g2h_ring_full", c.g2h_ring_full},
        {"g2h_lost", c.g2h_lost},
        {"g2h_bad_chain", c.g2h_bad_chain},
        {"g2h_port_drops", c.g2h_port_drops},
        {"g2h_in_flight", c.g2h_in_flight},
        {"g2h_retry", c.g2h_retry},
        {"b_written", c.b_written},
        {"b_write_drops", c.b_write_drops},
        {"b_write_retry", c.b_write_retry},
        {"b_read", c.b_read},
        {"b_read_drops", c.b_read_drops},
        {"h2g_delivered", c.h2g_delivered},
        {"h2g_no_room", c.h2g_no_room},
        {"h2g_bad_chain", c.h2g_bad_chain},
        {"h2g_in_flight", c.h2g_in_flight},
        {"h2g_bad_len", c.h2g_bad_len},
        {"h2g_length_errors", c.h2g_length_errors},
        {"h2g_lost", c.h2g_lost},
        {"a_written", c.a_written},
        {"a_write_drops", c.a_write_drops},
        {"a_full", c.a_full},
    };
    for (const auto& [k, v] : acct) std::printf(" %s=%llu", k, static_cast<unsigned long long>(v));
    // Each guest thread's XPS outcomes (with --xps), t<i>_ before the name.
    for (std::size_t i = 0; i < c.threads.size(); ++i) {
        const relay::RingRelayThreadCounters& t = c.threads[i];
        for (std::size_t k = 0; k < t.txq_used.size(); ++k) {
            std::printf(" t%zu_txq%zu=%llu", i, k, static_cast<unsigned long long>(t.txq_used[k]));
        }
        const std::pair<const char*, uint64_t> per_thread[] = {
            {"xps_rxqs", t.by_rxqs},         {"xps_cpus", t.by_cpus}, {"xps_hash", t.by_hash},
            {"rxq_mismatch", t.rxq_mismatch}, {"xps_copied", t.copied},
        };
        for (const auto& [k, v] : per_thread) {
            std::printf(" t%zu_%s=%llu", i, k, static_cast<unsigned long long>(v));
        }
    }
    // Each queue pair's share, q<i>_ before the total's name.
    for (std::size_t i = 0; i < c.queues.size(); ++i) {
        const relay::RingRelayQueueCounters& q = c.queues[i];
        const std::pair<const char*, uint64_t> per_queue[] = {
            {"g2h_frames", q.a_to_b_pkts}, {"g2h_bytes", q.a_to_b_bytes},
            {"h2g_frames", q.b_to_a_pkts}, {"h2g_bytes", q.b_to_a_bytes},
            {"kicks", q.kicks},            {"interrupts", q.interrupts},
            {"a_read", q.a_read},          {"b_read", q.b_read},
            {"napi_polls", q.napi_polls},  {"tx_completions", q.tx_completions},
        };
        for (const auto& [k, v] : per_queue) {
            std::printf(" q%zu_%s=%llu", i, k, static_cast<unsigned long long>(v));
        }
    }
    if (c.remote_backend) {
        std::printf(" backend=remote backend_losses=%llu backend_reconnects=%llu",
                    static_cast<unsigned long long>(c.backend_losses),
                    static_cast<unsigned long long>(c.backend_reconnects));
    }
    std::printf("\n");
    std::fflush(stdout);
}

void run_ring(const RelayOptions& o) {
    relay::RingRelayConfig cfg;
    cfg.guest_tap.name = o.guest_tap;
    cfg.guest_tap.netns = o.guest_netns;
    cfg.host_tap.name = o.host_tap;
    cfg.host_tap.netns = o.host_netns;
    cfg.offloads = o.offloads == "on";
    cfg.fe.rx_size = cfg.fe.tx_size = o.queue_size;
    cfg.fe.tx_mode = o.tx_mode == "napi" ? frontend::TxMode::Napi : frontend::TxMode::FreeOnXmit;
    cfg.fe.clean_tx_at_rx = o.at_rx;
    cfg.fe.busy_poll_usecs = o.busy_poll_usecs;
    cfg.rx_coalesce = o.backend.rx_coalesce();
    cfg.tx_coalesce = o.backend.tx_coalesce();
    cfg.busyloop_usecs = o.backend.busyloop_usecs;
    cfg.workers = o.backend.workers;
    cfg.tx_weight = o.backend.tx();
    cfg.rx_weight = o.backend.rx();
    cfg.vhost_user = o.vhost_user;
    cfg.vhost_user_server = o.vhost_user_server;
    cfg.direct = o.direct && o.vhost_user.empty();
    cfg.direct_max = o.direct_max;
    cfg.direct_spin_usecs = o.direct_spin_usecs;
    cfg.queues = o.queues;
    cfg.guest_cpu = o.guest_cpu;
    cfg.backend_cpu = o.backend_cpu;
    cfg.xps = o.xps || o.symmetric || !o.xps_cpus.empty() || !o.xps_rxqs.empty();
    cfg.symmetric = o.symmetric;
    for (const auto& [opt, list, out, nbits] :
         {std::tuple{"--xps-cpus", &o.xps_cpus, &cfg.xps_cpus, xps_cpu_bits()},
          std::tuple{"--xps-rxqs", &o.xps_rxqs, &cfg.xps_rxqs, unsigned{o.queues}}}) {
        for (const std::string& s : *list) {
            auto set = parse_xps_setting(s, o.queues, nbits);
            if (!set) throw CLI::ValidationError(opt, set.error());
            out->push_back(std::move(*set));
        }
    }
    const int sfd = block_stop_signals();
    auto r = relay::RingRelay::create(cfg);
    if (!r) {
        ::close(sfd);
        throw std::runtime_error(r.error());
    }
    relay::RingRelay& relay = **r;
    if (auto st = relay.start(); !st) {
        ::close(sfd);
        throw std::runtime_error(st.error());
    }
    serve(
        sfd, o, [&](const char* tag) { print_ring_counters(tag, relay); },
        [&] { return relay.counters().broken; },
        [&](const std::string& line) { return relay_command(relay, o.queues, cfg.xps, line); });
    relay.stop();
    ::close(sfd);
    print_ring_counters("final", relay);
    if (relay.counters().broken) throw std::runtime_error("relay stopped: a queue broke");
}

}  // namespace

void add_relay_command(CLI::App& app) {
    auto o = std::make_shared<RelayOptions>();
    CLI::App* cmd = app.add_subcommand(
        "relay", "Relay frames between tap A (guest side) and tap B (host side); root needed");
    cmd->footer(
        "Run time (the ring relay): stdin takes sysfs-like writes, one per line, each answered "
        "on stdout with \"<line>: ok\" or \"<line>: error: <why>\": xps_cpus TXQ=MASK, "
        "xps_rxqs TXQ=MASK (with --xps).");
    using checks::Int;
    constexpr uint32_t kMaxUsecs = backend::kNotfCoalMaxUsecs;
    cmd->add_option("--guest-tap", o->guest_tap, "tap A: created, or attached to if it exists")
        ->required()
        ->check(checks::IfName());
    auto* host_tap =
        cmd->add_option("--host-tap", o->host_tap, "tap B: created, or attached to if it exists")
            ->check(checks::IfName());
    auto* vhost_user = cmd->add_option(
        "--vhost-user", o->vhost_user,
        "two processes: the backend and tap B are `pvnet serve --tap B` on this vhost-user "
        "socket (one queue pair; the backend's options are serve's)");
    auto* vhost_user_server = cmd->add_flag(
        "--vhost-user-server", o->vhost_user_server,
        "with --vhost-user: listen on the socket (run serve with --client)");
    vhost_user->excludes(host_tap);
    vhost_user_server->needs(vhost_user);
    cmd->add_option("--guest-netns", o->guest_netns, "existing namespace of tap A (ip netns name)")
        ->check(checks::Netns());
    cmd->add_option("--host-netns", o->host_netns, "existing namespace of tap B (ip netns name)")
        ->check(checks::Netns());
    cmd->add_flag("--plain", o->plain,
                  "the plain tun relay: one thread, poll + read + write per frame (the baseline)");
    // The ring relay's options; the plain relay rejects them rather than ignore them.
    std::vector<CLI::Option*> ring_opts = {
        cmd->add_option("--tx-mode", o->tx_mode, "guest tx completion: napi or free-on-xmit")
            ->check(checks::OneOf({"napi", "free-on-xmit"})),
        cmd->add_flag("--at-rx", o->at_rx, "guest reaps tx completions from rx NAPI"),
    };
    const auto backend_opts = add_backend_options(cmd, o->backend).all;
    ring_opts.insert(ring_opts.end(), backend_opts.begin(), backend_opts.end());
    ring_opts.insert(ring_opts.end(), {
        cmd->add_option("--busy-poll-usecs", o->busy_poll_usecs, "guest spins on rx, us")
            ->check(Int(0u, kMaxUsecs)),
        cmd->add_flag("--direct,!--no-direct", o->direct,
                      "small batches run the backend's tx in the guest's context (default on)"),
        cmd->add_option("--direct-max", o->direct_max, "largest batch sent the direct way")
            ->check(Int(1u, 256u)),
        cmd->add_option("--direct-spin-usecs", o->direct_spin_usecs,
                        "after a direct transmit, spin on rx this long for the answer, us")
            ->check(Int(0u, 10000u)),
        cmd->add_option("--queue-size", o->queue_size, "virtqueue size (power of two)")
            ->check(checks::PowerOfTwo(checks::kMinQueueSize, virtio::kMaxQueueSize)),
        cmd->add_option("--queues", o->queues,
                        "queue pairs: both taps multi-queue, a guest thread per pair")
            ->check(Int<uint16_t>(1, relay::kMaxRelayQueues)),
        cmd->add_option("--guest-cpu", o->guest_cpu,
                        "CPU N of guest thread 0; thread i on CPU (N + i) mod online CPUs (-1: any)")
            ->check(checks::Cpu()),
        cmd->add_flag("--xps", o->xps,
                      "pick each frame's tx queue pair by XPS (xps_rxqs, then xps_cpus, then the "
                      "flow hash) instead of the reading thread's own pair"),
        cmd->add_option("--xps-cpus", o->xps_cpus,
                        "TXQ=MASK: tx queue TXQ's CPU mask, sysfs syntax (e.g. 0=1 1=2); "
                        "repeatable; implies --xps")
            ->type_name("TXQ=MASK"),
        cmd->add_option("--xps-rxqs", o->xps_rxqs,
                        "TXQ=MASK: tx queue TXQ's rx-queue mask, sysfs syntax; repeatable; "
                        "implies --xps")
            ->type_name("TXQ=MASK"),
        cmd->add_flag("--symmetric", o->symmetric,
                      "xps_rxqs maps rx queue i to tx queue i (a flow's replies leave on the "
                      "queue its requests came in on); implies --xps"),
    });
    cmd->add_option("--offloads", o->offloads,
                    "on: TUNSETOFFLOAD CSUM|TSO4|TSO6 on both taps (GSO frames pass); off: none")
        ->check(checks::OneOf({"on", "off"}));
    cmd->add_option("--backend-cpu", o->backend_cpu,
                    "CPU of the backend thread, or of the --plain relay's one thread (-1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--stats-interval", o->stats_interval, "seconds between stats lines (0: none)")
        ->check(checks::Real(0.0, 3600.0, "0: none"));

    cmd->callback([o, ring_opts, backend_opts, host_tap, vhost_user] {
        // Checks across options, before anything opens: CLI11's errors, so the same exit code.
        if (host_tap->count() == 0 && vhost_user->count() == 0) {
            throw CLI::ValidationError("--host-tap", "required (or --vhost-user)");
        }
        if (vhost_user->count() != 0) {
            if (o->plain) throw CLI::ValidationError("--vhost-user", "applies to the ring relay, not --plain");
            for (const CLI::Option* opt : backend_opts) {
                // Coalescing is asked of the device (NOTF_COAL), the rest is serve's.
                const std::string n = opt->get_name();
                if (n == "--tx-frames" || n == "--tx-usecs" || n == "--rx-frames" ||
                    n == "--rx-usecs") {
                    continue;
                }
                if (opt->count() != 0) {
                    throw CLI::ValidationError(opt->get_name(),
                                               "is the backend's: give it to pvnet serve");
                }
            }
        }
        if (o->guest_tap == o->host_tap && o->guest_netns == o->host_netns) {
            throw CLI::ValidationError("--host-tap", checks::must_be(o->host_tap,
                "another tap than --guest-tap when both are in the same namespace"));
        }
        if (!o->plain) {
            run_ring(*o);
            return;
        }
        for (const CLI::Option* opt : ring_opts) {
            if (opt->count() != 0) {
                throw CLI::ValidationError(opt->get_name(),
                                           "applies to the ring relay, not --plain");
            }
        }
        run_plain(*o);
    });
}

}  // namespace pvnet::app
