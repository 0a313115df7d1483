// A client of DPDK's telemetry socket (v2): a SOCK_SEQPACKET unix socket in
// the EAL runtime directory, one JSON message per query ("/ethdev/stats,0"
// answers {"/ethdev/stats": {...}}), a greeting on connect. Replies are
// untrusted: anything but a JSON object keyed by the command is an error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "pvnet/util/result.h"

namespace pvnet::lab {

/// Where EAL keeps the runtime directory of a file-prefix (eal_get_runtime_dir()).
std::string dpdk_runtime_dir(const std::string& file_prefix);
/// The telemetry socket of that prefix.
std::string dpdk_telemetry_path(const std::string& file_prefix);

/// The value a telemetry reply gives for `cmd` (the part before ',' is the key).
Result<nlohmann::json, std::string> parse_telemetry_reply(std::string_view cmd,
                                                          std::string_view reply);

class TelemetryClient {
public:
    /// Connects and reads the greeting ({"version":…,"max_output_len":…}).
    static Result<TelemetryClient, std::string> connect(const std::string& path);
    TelemetryClient(TelemetryClient&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    TelemetryClient& operator=(TelemetryClient&&) = delete;
    ~TelemetryClient();

    /// Sends `cmd`, waits up to 1 s for the reply, returns its value.
    Result<nlohmann::json, std::string> query(const std::string& cmd);

private:
    explicit TelemetryClient(int fd) : fd_(fd) {}
    Result<std::string, std::string> recv_msg();
    int fd_ = -1;
};

}  // namespace pvnet::lab
