// `pvnet serve`: virtio-net devices for a VMM (QEMU's vhost-user netdev),
// one per --vhost-user socket, each a backend::VhostNet over one port per
// queue pair: IcmpEchoPort (--echo, a host that answers ARP and ping),
// MacswapPort (--macswap, testpmd's macswap), GenLoopPort (--gen-loop, PVP's
// generator and sink), a TapPort (--tap, into the
// host's stack, optionally in a namespace) or a SwitchPort (--switch, a
// learning switch between all the devices). Each device has its worker
// thread (NetDevice::start) and a vhost_user::Server on its own thread.
//
// Output contract: "ready" once every socket listens (--client: once every
// server started), per --stats-interval the stats lines, on SIGINT/SIGTERM
// the final lines (both from the counter tables of stats_table.h, as the
// --json-stats document is), exit 0.
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_commands.h"
#include "backend_options.h"
#include "cli_checks.h"
#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/backend/vhost_net.h"
#include "pvnet/port/icmp_echo_port.h"
#include "pvnet/port/macswap_port.h"
#include "pvnet/port/switch_port.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/vhost_user/server.h"
#include "stats_table.h"
#include "stop_signals.h"

namespace pvnet::app {
namespace {

struct ServeOptions {
    std::vector<std::string> sockets;
    bool client = false;
    uint16_t queues = 1;
    std::string echo_ip, tap, netns;
    bool macswap = false;
    uint32_t gen_loop = 0;  ///< frame bytes of the PVP generator and sink (0: not this port)
    bool l2switch = false;
    double switch_ageing = 300;  ///< seconds: Linux's bridge ageing_time default
    uint32_t switch_max_macs = port::SwitchConfig::kDefaultMaxDevMacs;
    uint32_t switch_flood_pps = port::SwitchConfig::kDefaultFloodPps;
    uint32_t switch_flood_burst = port::SwitchConfig::kDefaultFloodBurst;
    std::vector<std::string> switch_macs;  ///< the n-th for the n-th --vhost-user; "any": none
    std::string mode = "event";
    BackendKnobs backend;
    int backend_cpu = -1;
    double stats_interval = 0;
    std::string json_stats;
    uint16_t mtu = 1500;
    bool ctrl_vq = false;
};

constexpr uint32_t kL2HdrBytes = 14 + 4;  // Ethernet and one 802.1Q tag beyond the MTU

/// The device's feature word (the vhost-user session leaves out the control
/// queue's features itself: QEMU emulates that queue). Echo, macswap and the
/// switch hand frames to a guest as a guest sent them, so they offer no
/// checksum or GSO offload (a partial checksum would arrive unfinished).
uint64_t offered_features(bool offloads) {
    using namespace virtio;
    uint64_t f = backend::kVhostNetFeatures;
    if (!offloads) {
        for (const unsigned b : {VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4,
                                 VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_GUEST_ECN,
                                 VIRTIO_NET_F_GUEST_UFO, VIRTIO_NET_F_HOST_TSO4,
                                 VIRTIO_NET_F_HOST_TSO6, VIRTIO_NET_F_HOST_ECN,
                                 VIRTIO_NET_F_HOST_UFO}) {
            f &= ~feature_mask(b);
        }
    }
    return f;
}

backend::VhostNetOptions device_options(const ServeOptions& o) {
    backend::VhostNetOptions opt;
    opt.rx_weight = o.backend.rx();
    opt.tx_weight = o.backend.tx();
    opt.mode = o.mode == "poll" ? backend::RunMode::Poll : backend::RunMode::Event;
    opt.rx_coalesce = o.backend.rx_coalesce();
    opt.tx_coalesce = o.backend.tx_coalesce();
    opt.busyloop_usecs = o.backend.busyloop_usecs;
    opt.workers = o.backend.workers;
    opt.offered_features = offered_features(!o.tap.empty());
    return opt;
}

/// One socket's device, its ports and its server (destroyed in that order
/// reversed: the server before the device, the device before its ports).
template <typename P>
struct Device {
    std::vector<std::unique_ptr<P>> ports;
    std::unique_ptr<backend::VhostNet<P>> dev;
    std::unique_ptr<vhost_user::Server> server;

    DeviceSample sample(unsigned index) const {
        DeviceSample s;
        s.dev = index;
        s.sock = server->path();
        s.connected = server->connected();
        s.groups.push_back(read_counters("device", "", dev->device_stats(), device_counters()));
        s.groups.push_back(read_counters("session", "", server->stats(), session_counters()));
        for (uint16_t q = 0; q < dev->max_pairs(); ++q) {
            QueueSample qs{q, {}};
            qs.groups.push_back(read_counters("vhost", "", dev->stats(q), vhost_net_counters()));
            qs.groups.push_back(read_counters("port", "port_", *ports[q], port_counters<P>()));
            s.queues.push_back(std::move(qs));
        }
        return s;
    }
};

template <typename P>
void report(const char* tag, const ServeOptions& o, const std::vector<Device<P>>& devs) {
    std::vector<DeviceSample> samples;
    for (unsigned i = 0; i < devs.size(); ++i) samples.push_back(devs[i].sample(i));
    for (const auto& s : samples) {
        for (const auto& line : kv_lines(tag, s)) std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
    if (o.json_stats.empty()) return;
    // Written whole, then renamed: a reader never sees half a document.
    const std::string tmp = o.json_stats + ".tmp";
    {
        std::ofstream out(tmp);
        out << to_json(samples).dump(2) << "\n";
        if (!out) throw std::runtime_error("writing " + tmp + " failed");
    }
    if (std::rename(tmp.c_str(), o.json_stats.c_str()) != 0) {
        throw std::runtime_error("renaming " + tmp + " to " + o.json_stats + " failed");
    }
}

/// Builds every device with `make_port(dev, queue)`, serves until
/// SIGINT/SIGTERM, stops them and prints the final counters.
template <typename P, typename MakePort>
void run(const ServeOptions& o, MakePort make_port) {
    const int sfd = block_stop_signals();
    // A front-end that hangs up mid-reply is the server's error to count, not a kill.
    ::signal(SIGPIPE, SIG_IGN);
    struct Close {
        int fd;
        ~Close() { ::close(fd); }
    } close_sfd{sfd};

    std::vector<Device<P>> devs(o.sockets.size());
    const backend::VhostNetOptions opt = device_options(o);
    for (unsigned d = 0; d < devs.size(); ++d) {
        Device<P>& dv = devs[d];
        std::vector<P*> raw;
        for (uint16_t q = 0; q < o.queues; ++q) {
            dv.ports.push_back(make_port(d, q));
            raw.push_back(dv.ports.back().get());
        }
        auto dev = backend::VhostNet<P>::create(opt, std::span<P* const>(raw));
        if (!dev) {
            throw std::runtime_error("device for " + o.sockets[d] + ": " +
                                     std::string(backend::to_string(dev.error())));
        }
        dv.dev = std::move(*dev);
        vhost_user::ServerConfig cfg;
        cfg.path = o.sockets[d];
        cfg.client = o.client;
        cfg.max_mtu = o.mtu;
        cfg.ctrl_vq = o.ctrl_vq;
        auto srv = vhost_user::Server::create(cfg, *dv.dev);
        if (!srv) throw std::runtime_error(srv.error());
        dv.server = std::move(*srv);
    }
    for (auto& dv : devs) {
        dv.dev->start(o.backend_cpu);
        dv.server->start();
    }
    std::printf("ready\n");
    std::fflush(stdout);

    using Clock = std::chrono::steady_clock;
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(o.stats_interval));
    auto next = Clock::now() + interval;
    for (;;) {
        int wait_ms = -1;
        if (o.stats_interval > 0) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                next - Clock::now());
            wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
        }
        pollfd p{sfd, POLLIN, 0};
        if (::poll(&p, 1, wait_ms) == 1) {
            signalfd_siginfo si;
            if (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) break;
        }
        if (o.stats_interval > 0 && Clock::now() >= next) {
            report("stats", o, devs);
            next += interval;
        }
    }
    // Whatever the front-ends did, a stop signal ends the process within 2 s
    // (the sockets removed); the orderly stop below normally takes far less.
    const StopDeadline deadline(std::chrono::milliseconds(1500), [&o] {
        if (o.client) return;
        for (const auto& s : o.sockets) ::unlink(s.c_str());
    });
    // The servers first: each ends its session (every running vring
    // stopped) and removes its socket file; then the workers.
    for (auto& dv : devs) dv.server->stop();
    for (auto& dv : devs) dv.dev->stop();
    report("final", o, devs);
    devs.clear();  // inside the deadline too
}

port::IcmpEchoPort::Ipv4 parse_ipv4(const std::string& s) {
    in_addr a{};
    if (::inet_pton(AF_INET, s.c_str(), &a) != 1) throw std::runtime_error("bad --echo " + s);
    port::IcmpEchoPort::Ipv4 ip;
    std::memcpy(ip.data(), &a.s_addr, 4);  // network order, as on the wire
    return ip;
}

void run_serve(const ServeOptions& o) {
    const uint32_t max_frame = uint32_t{o.mtu} + kL2HdrBytes;
    // A reflecting port's producer (run_tx) and reader (run_rx) are its
    // pair's worker: polling, it needs no wake-up; in event mode, one per burst.
    const auto publish = o.mode == "poll" ? port::ReplyQueue::Publish::SameThreadPoll
                                          : port::ReplyQueue::Publish::PerBurst;
    if (!o.echo_ip.empty()) {
        const auto ip = parse_ipv4(o.echo_ip);
        run<port::IcmpEchoPort>(o, [&](unsigned dev, uint16_t) {
            // A locally administered MAC, one per device: 02:70:76 ("pv"), then the index.
            const port::IcmpEchoPort::Mac mac{0x02, 0x70, 0x76, 0, static_cast<uint8_t>(dev >> 8),
                                              static_cast<uint8_t>(dev + 1)};
            auto p = port::IcmpEchoPort::create(ip, mac, max_frame,
                                                port::IcmpEchoPort::kDefaultSlots, publish);
            if (!p) throw std::runtime_error("echo port: " + std::string(port::to_string(p.error())));
            return std::move(*p);
        });
    } else if (o.macswap) {
        run<port::MacswapPort>(o, [&](unsigned, uint16_t) {
            auto p = port::MacswapPort::create(max_frame, port::MacswapPort::kDefaultSlots, publish);
            if (!p) {
                throw std::runtime_error("macswap port: " + std::string(port::to_string(p.error())));
            }
            return std::move(*p);
        });
    } else if (o.gen_loop != 0) {
        auto fmt = port::FrameFormat::create(o.gen_loop);
        if (!fmt) throw std::runtime_error("gen-loop: " + std::string(port::to_string(fmt.error())));
        run<port::GenLoopPort>(o, [&](unsigned, uint16_t) {
            return std::make_unique<port::GenLoopPort>(*fmt);
        });
    } else if (o.l2switch) {
        port::SwitchConfig cfg;
        cfg.ageing = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(o.switch_ageing));
        cfg.max_dev_macs = o.switch_max_macs;
        cfg.flood_pps = o.switch_flood_pps;
        cfg.flood_burst = o.switch_flood_burst;
        auto sw = port::L2Switch::create(std::move(cfg));
        if (!sw) throw std::runtime_error("switch: " + std::string(port::to_string(sw.error())));
        // Outlives every device: run() stops all the workers before any port goes.
        const std::unique_ptr<port::L2Switch> l2 = std::move(*sw);
        run<port::SwitchPort>(o, [&](unsigned dev, uint16_t q) {
            auto p = port::SwitchPort::create(*l2, dev, max_frame);
            if (!p) {
                throw std::runtime_error("switch port: " + std::string(port::to_string(p.error())));
            }
            uint64_t mac = 0;
            if (q == 0 && dev < o.switch_macs.size() &&
                checks::parse_unicast_mac(o.switch_macs[dev], mac)) {
                l2->fix_mac(dev, mac);
            }
            return std::move(*p);
        });
    } else {
        run<port::TapPort>(o, [&](unsigned, uint16_t) {
            port::TapConfig cfg;
            cfg.name = o.tap;
            cfg.netns = o.netns;
            cfg.offloads = 0;  // TUNSETOFFLOAD follows the guest's features (set_guest_features)
            cfg.multi_queue = o.queues > 1;
            cfg.link_up = true;
            auto p = port::TapPort::open(cfg);
            if (!p) throw std::runtime_error("tap " + o.tap + ": " + port::to_string(p.error()));
            return std::move(*p);
        });
    }
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "serve", "Serve virtio-net devices on vhost-user sockets (QEMU's vhost-user netdev)");
    using checks::Int;
    cmd->add_option("--vhost-user", o->sockets,
                    "socket of one device (repeat for more devices); listened on, or --client")
        ->required()
        ->check(checks::SocketPath());
    cmd->add_flag("--client", o->client,
                  "connect to the sockets (QEMU's server=on), retrying, instead of listening");
    cmd->add_option("--queues", o->queues, "queue pairs per device")->check(Int<uint16_t>(1, 64));
    CLI::Option* echo =
        cmd->add_option("--echo", o->echo_ip, "port: answer ARP and ping at this IPv4 address")
            ->check(checks::Ipv4());
    CLI::Option* macswap = cmd->add_flag(
        "--macswap", o->macswap, "port: return every frame with its MAC addresses swapped");
    CLI::Option* gen_loop =
        cmd->add_option("--gen-loop", o->gen_loop,
                        "port: PVP's generator (floods the rx ring with frames of this many bytes) "
                        "and sequence-checking sink (takes the tx ring), as `pvnet bench pvp "
                        "--transport vhost-user` runs it")
            ->check(Int(port::kMinFrameBytes, port::kMaxFrameBytes));
    CLI::Option* tap = cmd->add_option("--tap", o->tap,
                                       "port: this tap (created, or attached to); offloads as the guest negotiates")
                           ->check(checks::IfName());
    CLI::Option* l2switch =
        cmd->add_flag("--switch", o->l2switch,
                      "port: a learning L2 switch between all the devices of this process");
    CLI::Option* ageing =
        cmd->add_option("--switch-ageing", o->switch_ageing,
                        "seconds a learned MAC stays in --switch's table unseen")
            ->check(checks::Real(1.0, 1000000.0));
    std::vector<CLI::Option*> switch_opts{
        ageing,
        cmd->add_option("--switch-max-macs", o->switch_max_macs,
                        "MACs --switch learns per device at most (as the bridge's max_learned); "
                        "past it a new source is forwarded, not learned")
            ->check(Int<uint32_t>(1, port::SwitchConfig::kDefaultMaxEntries)),
        cmd->add_option("--switch-flood-pps", o->switch_flood_pps,
                        "storm control: broadcast, multicast and unknown-unicast frames per "
                        "second each queue pair may flood (past it: dropped)")
            ->check(Int<uint32_t>(0, port::SwitchConfig::kMaxFloodPps, "0: no limit")),
        cmd->add_option("--switch-flood-burst", o->switch_flood_burst,
                        "storm control: frames a queue pair may flood at once")
            ->check(Int<uint32_t>(1, 65536)),
        cmd->add_option("--switch-mac", o->switch_macs,
                        "the only source MAC the n-th device may send from (the n-th "
                        "--switch-mac for the n-th --vhost-user; any: no fixed MAC), as "
                        "libvirt's no-mac-spoofing")
            ->check(checks::UnicastMac("any")),
    };
    CLI::Option* netns = cmd->add_option("--netns", o->netns, "existing namespace of the --tap")
                             ->check(checks::Netns());
    cmd->add_option("--mode", o->mode,
                                        "event: sleep on eventfds; poll: spin on the rings")
        ->check(checks::OneOf({"event", "poll"}));
    CLI::Option* busyloop = add_backend_options(cmd, o->backend).busyloop;
    cmd->add_option("--backend-cpu", o->backend_cpu,
                    "CPU of every device's worker (worker w on the next w-th CPU; -1: any)")
        ->check(checks::Cpu());
    cmd->add_option("--stats-interval", o->stats_interval, "seconds between stats lines (0: none)")
        ->check(checks::Real(0.0, 3600.0, "0: none"));
    cmd->add_option("--json-stats", o->json_stats,
                    "write the counters as JSON here at every stats line and at the end")
        ->check(checks::OutputPath());
    cmd->add_flag("--ctrl-vq", o->ctrl_vq,
                  "offer the device's own control queue (CTRL_VQ, NOTF_COAL, MQ, RSS, "
                  "HASH_REPORT) to a front-end that drives it, as pvnet's does; QEMU emulates its "
                  "own and ignores this");
    cmd->add_option("--mtu", o->mtu,
                    "largest MTU: echo/macswap/switch frame size, and the NET_MTU the device "
                    "offers")
        ->check(Int<uint16_t>(68, 9000));

    cmd->callback([o, echo, macswap, gen_loop, tap, l2switch, switch_opts, netns, busyloop] {
        // Checks across options, before anything opens: CLI11's errors, so the same exit code.
        const std::size_t ports = echo->count() + macswap->count() + gen_loop->count() +
                                  tap->count() + l2switch->count();
        if (ports != 1) {
            throw CLI::ValidationError("--echo/--macswap/--gen-loop/--tap/--switch",
                                       "exactly one port kind is required (" +
                                           std::to_string(ports) + " given)");
        }
        if (netns->count() != 0 && tap->count() == 0) {
            throw CLI::ValidationError("--netns", "applies to --tap only");
        }
        for (const CLI::Option* so : switch_opts) {
            if (so->count() != 0 && l2switch->count() == 0) {
                throw CLI::ValidationError(so->get_name(), "applies to --switch only");
            }
        }
        if (o->switch_macs.size() > o->sockets.size()) {
            throw CLI::ValidationError("--switch-mac", "one per --vhost-user at most (" +
                                                           std::to_string(o->switch_macs.size()) +
                                                           " given)");
        }
        if (tap->count() != 0 && o->sockets.size() > 1) {
            throw CLI::ValidationError("--tap", "serves one device: give one --vhost-user");
        }
        if (busyloop->count() != 0 && o->mode == "poll") {
            throw CLI::ValidationError("--busyloop-usecs", "applies to --mode event only");
        }
        std::set<std::string> seen;
        for (const auto& s : o->sockets) {
            if (!seen.insert(s).second) {
                throw CLI::ValidationError("--vhost-user", checks::must_be(s, "given once"));
            }
        }
        run_serve(*o);
    });
}

}  // namespace pvnet::app
