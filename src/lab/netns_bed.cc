// The namespace pair: port::ScopedNetns for each (deleted in its
// destructor), configured through /proc/sys/net of a helper thread inside
// it (run_in_netns) and `ip -n`.
#include "pvnet/lab/netns_bed.h"

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <thread>

#include "pvnet/lab/child.h"

namespace pvnet::lab {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

constexpr milliseconds kToolTimeout{10'000};

Status<std::string> configure(const std::string& ns) {
    // /proc/sys/net is the namespace of the thread that opens it.
    auto v6 = port::run_in_netns(ns, []() -> Status<port::SysError> {
        for (const char* p : {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
                              "/proc/sys/net/ipv6/conf/default/disable_ipv6"}) {
            std::FILE* f = std::fopen(p, "w");
            if (f == nullptr) return unexpected(port::SysError{"disable_ipv6", errno});
            const bool ok = std::fputs("1", f) >= 0;
            if (std::fclose(f) != 0 || !ok) return unexpected(port::SysError{"disable_ipv6", errno});
        }
        return {};
    });
    if (!v6) return unexpected("in " + ns + ": " + port::to_string(v6.error()));
    return ip({"-n", ns, "link", "set", "lo", "up"});
}

}  // namespace

Result<NetnsBed, std::string> NetnsBed::create(std::string_view prefix, std::string_view tag) {
    const std::string base = std::string(prefix) + std::string(tag);
    auto a = port::ScopedNetns::create(base + "-a");
    if (!a) return unexpected("creating namespace " + base + "-a: " + port::to_string(a.error()));
    auto b = port::ScopedNetns::create(base + "-b");
    // Here and below, an early return drops what exists: its namespaces go.
    if (!b) return unexpected("creating namespace " + base + "-b: " + port::to_string(b.error()));
    NetnsBed bed(std::move(*a), std::move(*b));
    for (const std::string* ns : {&bed.ns_a(), &bed.ns_b()}) {
        if (auto st = configure(*ns); !st) return unexpected(st.error());
    }
    return bed;
}

void remove_stale_netns(std::string_view prefix) {
    DIR* d = ::opendir("/var/run/netns");
    if (d == nullptr) return;  // no namespaces at all
    std::vector<std::string> stale;
    while (const dirent* e = ::readdir(d)) {
        std::string_view name = e->d_name;
        if (name.substr(0, prefix.size()) != prefix) continue;
        name.remove_prefix(prefix.size());
        if (!name.empty() && name[0] >= 'a' && name[0] <= 'z') name.remove_prefix(1);
        const std::string_view digits = name.substr(0, name.find('-'));
        int32_t pid = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
        if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
        if (::kill(pid, 0) != 0 && errno == ESRCH) stale.emplace_back(e->d_name);
    }
    ::closedir(d);
    for (const auto& n : stale) (void)port::run_ip({"netns", "del", n});
}

std::vector<std::string> in_netns(const std::string& ns, std::vector<std::string> cmd) {
    cmd.insert(cmd.begin(), {"ip", "netns", "exec", ns});
    return cmd;
}

Status<std::string> ip(std::vector<std::string> args) {
    args.insert(args.begin(), "ip");
    auto r = run_ok(args, kToolTimeout);
    if (!r) return unexpected(r.error());
    return {};
}

Status<std::string> wait_listening(const std::string& ns, bool tcp, uint16_t port,
                                   milliseconds timeout) {
    // Appended, not ":" + to_string(): g++ 12 -O3 warns falsely (-Wrestrict) on that.
    std::string sport = ":";
    sport += std::to_string(port);
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline && !abort_requested()) {
        auto out = run_ok(in_netns(ns, {"ss", tcp ? "-Hltn" : "-Hlun", "sport", "=", sport}),
                          milliseconds(5000));
        if (out && out->find(sport) != std::string::npos) return {};
        std::this_thread::sleep_for(milliseconds(20));
    }
    return unexpected("nothing listens on port " + std::to_string(port) + " in " + ns);
}

}  // namespace pvnet::lab
