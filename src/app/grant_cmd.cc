// `pvnet grant-back` and `pvnet grant-front`: the two processes of issue 13's
// grant datapath (seed 004). The backend serves any number of frontends on a
// unix socket; they agree on map, copy or persistent grants through a
// directory that plays xenstore (--store).
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "app_commands.h"
#include "pvnet/grant/netback.h"
#include "pvnet/grant/netfront.h"
#include "stop_signals.h"

namespace pvnet::app {
namespace {

/// on|off for a bool option.
CLI::CheckedTransformer on_off() {
    return CLI::CheckedTransformer(std::map<std::string, bool>{{"on", true}, {"off", false}});
}

struct BackOpts {
    grant::NetbackConfig cfg;
    std::string fallback = "map";
    std::string copy_via = "pread";
    bool persistent = true;
    double duration_s = 0;
};

struct FrontOpts {
    grant::NetfrontConfig cfg;
    std::string direction = "tx";
    double seconds = 2;
    uint64_t frames = UINT64_MAX;
};

void run_grant_back(BackOpts o) {
    o.cfg.fallback = o.fallback == "copy" ? grant::GrantMode::Copy : grant::GrantMode::Map;
    o.cfg.offer_persistent = o.persistent;
    o.cfg.copy_via = o.copy_via == "process-vm" ? mem::CopyVia::ProcessVm : mem::CopyVia::Pread;
    const int sigfd = block_stop_signals();
    auto nb = grant::Netback::create(o.cfg);
    if (!nb) throw std::runtime_error("grant-back: " + nb.error());
    std::atomic<bool> stop{false};
    std::thread watch([&] {
        const auto end = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(o.duration_s * 1000));
        while (!stop.load()) {
            pollfd p{sigfd, POLLIN, 0};
            if (::poll(&p, 1, 50) > 0) stop.store(true);
            if (o.duration_s > 0 && std::chrono::steady_clock::now() >= end) stop.store(true);
        }
    });
    std::printf("listening %s fallback=%s persistent=%s copy_via=%s\n", o.cfg.socket_path.c_str(),
                o.fallback.c_str(), o.persistent ? "on" : "off", o.copy_via.c_str());
    std::fflush(stdout);
    std::mutex out_mu;
    // Joined however run() ends: a joinable thread's destructor is std::terminate.
    struct Joined {
        std::atomic<bool>& stop;
        std::thread& t;
        ~Joined() {
            stop.store(true);
            t.join();
        }
    };
    {
        const Joined joined{stop, watch};
        (*nb)->run(stop, [&](const std::string& line) {
            const std::lock_guard g(out_mu);
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
        });
    }
    std::printf("final refused=%llu guest_errors=%llu\n",
                static_cast<unsigned long long>((*nb)->refused()),
                static_cast<unsigned long long>((*nb)->guest_errors()));
}

void print_phase(const char* dir, grant::GrantMode mode, const grant::PhaseResult& r) {
    std::printf(
        "phase direction=%s mode=%s frames=%llu bytes=%llu seconds=%.3f mbit_s=%.1f cpu_ns=%llu "
        "grants=%llu revokes=%llu revoke_busy=%llu copy_bytes=%llu sink_lost=%llu sink_bad=%llu\n",
        dir, grant::to_string(mode), static_cast<unsigned long long>(r.frames),
        static_cast<unsigned long long>(r.bytes), r.seconds, r.mbit_s(),
        static_cast<unsigned long long>(r.cpu_ns), static_cast<unsigned long long>(r.grants),
        static_cast<unsigned long long>(r.revokes), static_cast<unsigned long long>(r.revoke_busy),
        static_cast<unsigned long long>(r.copy_bytes), static_cast<unsigned long long>(r.sink_lost),
        static_cast<unsigned long long>(r.sink_bad));
    std::fflush(stdout);
}

void run_grant_front(const FrontOpts& o) {
    auto nf = grant::Netfront::connect(o.cfg);
    if (!nf) throw std::runtime_error("grant-front: " + nf.error());
    std::printf("connected domid=%u mode=%s\n", o.cfg.domid, grant::to_string((*nf)->mode()));
    std::fflush(stdout);
    const auto span = std::chrono::milliseconds(static_cast<int64_t>(o.seconds * 1000));
    for (const char* d : {"tx", "rx"}) {
        if (o.direction != "both" && o.direction != d) continue;
        const auto dir = std::string(d) == "tx" ? grant::Direction::Tx : grant::Direction::Rx;
        auto r = (*nf)->run(dir, o.frames, span);
        if (!r) throw std::runtime_error(std::string("grant-front ") + d + ": " + r.error());
        print_phase(d, (*nf)->mode(), *r);
    }
    (*nf)->close();
}

}  // namespace

void add_grant_commands(CLI::App& app) {
    auto bo = std::make_shared<BackOpts>();
    CLI::App* back = app.add_subcommand(
        "grant-back",
        "Grant backend (issue 13): serves frontend processes on a unix socket, reaching their "
        "pages only through grants (map, copy or persistent)");
    back->add_option("--socket", bo->cfg.socket_path, "Unix socket to listen on")->required();
    back->add_option("--store", bo->cfg.store_dir, "Directory that plays xenstore")->required();
    back->add_option("--fallback", bo->fallback, "Mode when persistent grants are not agreed")
        ->check(CLI::IsMember({"map", "copy"}))
        ->capture_default_str();
    back->add_option("--persistent", bo->persistent,
                     "Offer feature-persistent-grants (on|off)")
        ->transform(on_off())
        ->capture_default_str();
    back->add_option("--copy-via", bo->copy_via,
                     "How copy mode copies (process-vm: only the connected process's checked "
                     "mapping of its memory; Linux 6.5)")
        ->check(CLI::IsMember({"pread", "process-vm"}))
        ->capture_default_str();
    back->add_option("--duration", bo->duration_s, "Seconds to serve (0: until SIGINT/SIGTERM)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    back->callback([bo] { run_grant_back(*bo); });

    auto fo = std::make_shared<FrontOpts>();
    CLI::App* front = app.add_subcommand(
        "grant-front",
        "Grant frontend (issue 13): connects to grant-back, then streams frames to its sink "
        "(tx) and/or checks its generator's frames (rx)");
    front->add_option("--socket", fo->cfg.socket_path, "grant-back's socket")->required();
    front->add_option("--store", fo->cfg.store_dir, "Directory that plays xenstore")->required();
    front->add_option("--domid", fo->cfg.domid, "This guest's domain id")
        ->check(CLI::Range(1, 0x7fef))
        ->capture_default_str();
    front->add_option("--persistent", fo->cfg.offer_persistent,
                      "Offer feature-persistent-grants (on|off)")
        ->transform(on_off())
        ->capture_default_str();
    front->add_option("--ring", fo->cfg.ring_size, "Ring size (power of two)")
        ->check(CLI::Range(2, 1024))
        ->check(CLI::Validator(
            [](std::string& v) {
                const unsigned long n = std::stoul(v);
                return (n & (n - 1)) == 0 ? std::string() : v + " is not a power of two";
            },
            "POWER OF TWO"))
        ->capture_default_str();
    front->add_option("--frame-bytes", fo->cfg.frame_bytes, "Ethernet frame size")
        ->check(CLI::Range(64, 1518))
        ->capture_default_str();
    front->add_flag("--copy-whole-page", fo->cfg.copy_whole_page,
                    "Persistent grants: copy the whole 4 KiB page, not only the packet");
    front->add_option("--direction", fo->direction, "tx, rx, or both (tx then rx)")
        ->check(CLI::IsMember({"tx", "rx", "both"}))
        ->capture_default_str();
    front->add_option("--seconds", fo->seconds, "Seconds per direction")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    front->add_option("--frames", fo->frames, "Stop a direction after this many frames")
        ->check(CLI::PositiveNumber);
    front->callback([fo] { run_grant_front(*fo); });
}

}  // namespace pvnet::app
