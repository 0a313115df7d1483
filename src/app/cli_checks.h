// Checks for pvnet's option values, attached where each option is defined
// (`->check(...)`): a bad value fails the parse, so no command starts. CLI11
// puts the option's name before each message, which names the value and the
// rule: "--queue-size: 300: must be a power of two from 2 to 32768". The
// description of each check is what --help shows after the option's type.
#pragma once

#include <CLI/CLI.hpp>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pvnet::app::checks {

/// "<value>: must be <rule>", the one shape every check's message has.
std::string must_be(const std::string& value, const std::string& rule);

/// An integer of type T from lo to hi, read the way CLI11 then converts it
/// (base prefixes included). `note` says what a special value means ("0: off").
template <typename T>
CLI::Validator Int(T lo, T hi, const std::string& note = {}) {
    const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
    const std::string rule = "an integer from " + range + (note.empty() ? "" : " (" + note + ")");
    return CLI::Validator(
        [lo, hi, rule](std::string& s) -> std::string {
            T v{};
            if (!CLI::detail::lexical_cast(s, v) || v < lo || v > hi) return must_be(s, rule);
            return {};
        },
        range);
}

/// A number from lo to hi (NaN and infinities fail).
CLI::Validator Real(double lo, double hi, const std::string& note = {});
/// A power of two from lo to hi: a split virtqueue's size (virtio 1.x 2.7).
CLI::Validator PowerOfTwo(uint32_t lo, uint32_t hi);
/// One of `words`.
CLI::Validator OneOf(std::vector<std::string> words);
/// -1 (no pinning) or a CPU this process may run on (sched_getaffinity): a
/// thread pinned elsewhere would fail silently or never run.
CLI::Validator Cpu();
/// A Linux interface name (the kernel's dev_valid_name): 1..IFNAMSIZ-1
/// characters, none of them '/', ':' or white space, not "." or "..".
CLI::Validator IfName();
/// A named network namespace that exists (`ip netns add` made
/// /var/run/netns/NAME).
CLI::Validator Netns();
/// A file to write (or a prefix of files): an existing directory holds it.
CLI::Validator OutputPath();
/// A unix socket's path: fits sockaddr_un's sun_path, no white space (the
/// stats lines are key=value words), in an existing directory.
CLI::Validator SocketPath();
/// A unicast IPv4 address in dotted-quad form (inet_pton).
CLI::Validator Ipv4();

/// Reads an Ethernet unicast MAC "aa:bb:cc:dd:ee:ff" (hex, any case) into
/// 48 bits, first octet in the top byte; false if it is not one (multicast
/// and all-zero included).
bool parse_unicast_mac(const std::string& s, uint64_t& out);
/// A unicast MAC (parse_unicast_mac), or `none_word` when not empty.
CLI::Validator UnicastMac(const std::string& none_word = {});

/// An IPv4 address and a UDP/TCP port.
struct Ipv4Endpoint {
    std::array<uint8_t, 4> ip{};  ///< network order
    uint16_t port = 0;
};
/// Reads "a.b.c.d:port" (inet_pton, port 0..65535); false if it is not one.
bool parse_ipv4_endpoint(const std::string& s, Ipv4Endpoint& out);
/// "a.b.c.d:port". To bind: unicast or 0.0.0.0 (any), port 0 (the kernel's
/// pick) allowed; to reach a server: unicast, port 1 to 65535.
CLI::Validator Ipv4Port(bool bind);
/// The packet weight words of the bench commands (parse_weight): baseline,
/// none or 1..1000000.
CLI::Validator PktWeight();
/// A `pvnet bench relay` column (bench::relay_variant).
CLI::Validator RelayVariant();
/// The option's output needs `tool` in PATH; `hint` says how to get it.
CLI::Validator NeedsTool(const std::string& tool, const std::string& hint);

/// `tool` is an executable in PATH.
bool tool_in_path(const std::string& tool);

/// The smallest virtqueue the commands accept (the largest is
/// virtio::kMaxQueueSize).
inline constexpr uint32_t kMinQueueSize = 2;

}  // namespace pvnet::app::checks
