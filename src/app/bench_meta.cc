#include "bench_meta.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "pvnet/lab/child.h"

namespace pvnet::app {
namespace {

std::vector<std::string>& argv_store() {
    static std::vector<std::string> v;
    return v;
}

/// Output of a short command without its trailing newline; "" if it fails.
std::string run_capture(const std::vector<std::string>& argv) {
    auto out = lab::run_ok(argv, std::chrono::seconds(5));
    if (!out) return {};
    std::string s = std::move(*out);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
        }
    }
    return "unknown";
}

/// The installed Debian package's version, or null when it is not installed.
nlohmann::json package_version(const char* pkg) {
    const std::string v = run_capture({"dpkg-query", "-W", "-f=${Status} ${Version}", pkg});
    const std::string installed = "install ok installed ";
    if (v.rfind(installed, 0) != 0) return nullptr;
    return v.substr(installed.size());
}

}  // namespace

void set_command_line(int argc, char** argv) {
    argv_store().assign(argv, argv + argc);
}

nlohmann::json bench_meta() {
    nlohmann::json m;
    // The source tree this binary was built from; "-dirty" when it has
    // uncommitted changes, so a figure from unpublished code says so.
    std::string commit = run_capture({"git", "-C", PVNET_SOURCE_DIR, "rev-parse", "--short=12", "HEAD"});
    if (commit.empty()) {
        commit = "unknown";
    } else if (!run_capture({"git", "-C", PVNET_SOURCE_DIR, "status", "--porcelain",
                             "--untracked-files=no"})
                    .empty()) {
        commit += "-dirty";
    }
    m["commit"] = commit;
    m["command_line"] = argv_store();
    char date[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    m["date"] = date;
    utsname u{};
    uname(&u);
    m["machine"] = {{"cpu_model", cpu_model()},
                    {"vcpus", sysconf(_SC_NPROCESSORS_ONLN)},
                    {"kernel", std::string(u.release)}};
    m["peers"] = {{"dpdk", package_version("dpdk")},
                  {"qemu", package_version("qemu-system-x86")},
                  {"iperf3", package_version("iperf3")},
                  {"sockperf", package_version("sockperf")},
                  {"ping", package_version("iputils-ping")}};
    return m;
}

}  // namespace pvnet::app
