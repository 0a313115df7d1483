// DPDK telemetry client: connect, greeting, one send and one bounded
// receive per query (lib/telemetry/telemetry.c serves one message each).
#include "pvnet/lab/dpdk_telemetry.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace pvnet::lab {
namespace {
constexpr int kReplyTimeoutMs = 1000;
constexpr std::size_t kMaxReply = 1 << 16;  // telemetry's max_output_len is 16 KiB
}  // namespace

std::string dpdk_runtime_dir(const std::string& file_prefix) {
    std::string base = "/var/run";
    if (::getuid() != 0) {
        const char* xdg = std::getenv("XDG_RUNTIME_DIR");
        base = xdg ? xdg : "/tmp";
    }
    return base + "/dpdk/" + file_prefix;
}

std::string dpdk_telemetry_path(const std::string& file_prefix) {
    return dpdk_runtime_dir(file_prefix) + "/dpdk_telemetry.v2";
}

Result<nlohmann::json, std::string> parse_telemetry_reply(std::string_view cmd,
                                                          std::string_view reply) {
    const std::string key(cmd.substr(0, cmd.find(',')));
    const auto j = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        return unexpected("telemetry " + key + ": reply is not a JSON object");
    }
    const auto it = j.find(key);
    if (it == j.end()) return unexpected("telemetry " + key + ": reply lacks the command's key");
    return *it;
}

Result<TelemetryClient, std::string> TelemetryClient::connect(const std::string& path) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) return unexpected("telemetry path too long: " + path);
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return unexpected(std::string("socket: ") + std::strerror(errno));
    TelemetryClient c(fd);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        return unexpected("telemetry " + path + ": " + std::strerror(errno));
    }
    auto greeting = c.recv_msg();
    if (!greeting) return unexpected("telemetry " + path + ": " + greeting.error());
    return c;
}

TelemetryClient::~TelemetryClient() {
    if (fd_ >= 0) ::close(fd_);
}

Result<std::string, std::string> TelemetryClient::recv_msg() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, kReplyTimeoutMs) <= 0) return unexpected(std::string("no reply within 1 s"));
    std::string buf(kMaxReply, '\0');
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) return unexpected(std::string(n == 0 ? "closed" : std::strerror(errno)));
    buf.resize(static_cast<std::size_t>(n));
    return buf;
}

Result<nlohmann::json, std::string> TelemetryClient::query(const std::string& cmd) {
    if (::send(fd_, cmd.data(), cmd.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(cmd.size())) {
        return unexpected("telemetry " + cmd + ": " + std::strerror(errno));
    }
    auto msg = recv_msg();
    if (!msg) return unexpected("telemetry " + cmd + ": " + msg.error());
    return parse_telemetry_reply(cmd, *msg);
}

}  // namespace pvnet::lab
