// Namespace helpers: setns in a helper thread, `ip` through posix_spawnp.
#include "pvnet/port/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

extern char** environ;

namespace pvnet::port {

std::string to_string(const SysError& e) { return std::string(e.op) + ": " + std::strerror(e.err); }

Status<SysError> run_in_netns(std::string_view netns,
                              const std::function<Status<SysError>()>& fn) noexcept {
    if (netns.empty()) return fn();
    // A name with '/' would escape /var/run/netns.
    if (netns.find('/') != std::string_view::npos || netns == "." || netns == "..") {
        return unexpected(SysError{"netns name", EINVAL});
    }
    Status<SysError> st;
    try {
        const std::string path = "/var/run/netns/" + std::string(netns);
        std::thread t([&] {
            const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                st = unexpected(SysError{"open netns", errno});
                return;
            }
            const int rc = ::setns(fd, CLONE_NEWNET);
            const int err = errno;
            ::close(fd);
            if (rc != 0) {
                st = unexpected(SysError{"setns", err});
                return;
            }
            st = fn();
        });
        t.join();
    } catch (const std::system_error& e) {
        return unexpected(SysError{"thread", e.code().value()});
    } catch (...) {  // std::bad_alloc building the path
        return unexpected(SysError{"thread", ENOMEM});
    }
    return st;
}

Result<int, SysError> udp_socket_in(std::string_view netns, const std::array<uint8_t, 4>& ip,
                                    uint16_t port, UdpEnd end) noexcept {
    int fd = -1;
    auto st = run_in_netns(netns, [&]() -> Status<SysError> {
        fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return unexpected(SysError{"socket", errno});
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        std::memcpy(&a.sin_addr, ip.data(), ip.size());
        const auto* sa = reinterpret_cast<const sockaddr*>(&a);
        if (end == UdpEnd::Bind ? ::bind(fd, sa, sizeof a) : ::connect(fd, sa, sizeof a)) {
            const int err = errno;
            ::close(fd);
            return unexpected(SysError{end == UdpEnd::Bind ? "bind" : "connect", err});
        }
        return {};
    });
    if (!st) return unexpected(st.error());
    return fd;
}

int run_ip(const std::vector<std::string>& args) noexcept {
    try {
        std::vector<char*> argv;
        argv.reserve(args.size() + 2);
        argv.push_back(const_cast<char*>("ip"));
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        pid_t pid = 0;
        if (::posix_spawnp(&pid, "ip", nullptr, nullptr, argv.data(), environ) != 0) return -1;
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0) {
            if (errno != EINTR) return -1;
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    } catch (...) {
        return -1;
    }
}

Result<ScopedNetns, SysError> ScopedNetns::create(std::string name) noexcept {
    if (run_ip({"netns", "add", name}) != 0) return unexpected(SysError{"ip netns add", EIO});
    return ScopedNetns(std::move(name));
}

ScopedNetns::~ScopedNetns() {
    if (!name_.empty()) (void)run_ip({"netns", "del", name_});
}

int ScopedNetns::ip(std::vector<std::string> args) const noexcept {
    try {
        args.insert(args.begin(), {"-n", name_});
        return run_ip(args);
    } catch (...) {
        return -1;
    }
}

}  // namespace pvnet::port
