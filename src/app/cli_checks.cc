// The option checks of cli_checks.h.
#include "cli_checks.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/un.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>

#include "bench_common.h"
#include "pvnet/lab/child.h"
#include "pvnet/bench/relay_bench.h"

namespace pvnet::app::checks {
namespace {

std::string shown(const std::string& s) { return s.empty() ? "''" : s; }

std::string number(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
}

bool is_dir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// The CPUs sched_getaffinity allows, as Linux lists them ("0-3,6").
std::string cpu_list(const cpu_set_t& set) {
    std::string out;
    for (std::size_t c = 0; c < CPU_SETSIZE; ++c) {
        if (!CPU_ISSET(c, &set)) continue;
        std::size_t last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
        out += (out.empty() ? "" : ",") + std::to_string(c);
        if (last != c) out += "-" + std::to_string(last);
        c = last;
    }
    return out;
}

/// Not 0.0.0.0/8, multicast, reserved or broadcast: a host answers at it.
bool unicast_ipv4(uint32_t host_order) {
    return host_order != 0 && (host_order >> 24) != 0 && (host_order >> 28) < 0xe;
}

}  // namespace

std::string must_be(const std::string& value, const std::string& rule) {
    return shown(value) + ": must be " + rule;
}

CLI::Validator Real(double lo, double hi, const std::string& note) {
    const std::string range = number(lo) + " to " + number(hi);
    const std::string rule = "a number from " + range + (note.empty() ? "" : " (" + note + ")");
    return CLI::Validator(
        [lo, hi, rule](std::string& s) -> std::string {
            double v = 0;
            // !(in range) also rejects NaN.
            if (!CLI::detail::lexical_cast(s, v) || !(v >= lo && v <= hi)) return must_be(s, rule);
            return {};
        },
        range);
}

CLI::Validator PowerOfTwo(uint32_t lo, uint32_t hi) {
    const std::string rule =
        "a power of two from " + std::to_string(lo) + " to " + std::to_string(hi);
    return CLI::Validator(
        [lo, hi, rule](std::string& s) -> std::string {
            uint32_t v = 0;
            if (!CLI::detail::lexical_cast(s, v) || v < lo || v > hi || (v & (v - 1)) != 0) {
                return must_be(s, rule);
            }
            return {};
        },
        "power of two, " + std::to_string(lo) + " to " + std::to_string(hi));
}

CLI::Validator OneOf(std::vector<std::string> words) {
    std::string list;
    for (std::size_t i = 0; i < words.size(); ++i) {
        list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
    }
    std::string desc;
    for (const auto& w : words) desc += (desc.empty() ? "" : "|") + w;
    return CLI::Validator(
        [words = std::move(words), list](std::string& s) -> std::string {
            for (const auto& w : words) {
                if (s == w) return {};
            }
            return must_be(s, list);
        },
        desc);
}

CLI::Validator Cpu() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            cpu_set_t set;
            CPU_ZERO(&set);
            if (::sched_getaffinity(0, sizeof set, &set) != 0) CPU_ZERO(&set);
            const std::string rule =
                "-1 (any CPU) or a CPU this process may run on (" + cpu_list(set) + ")";
            int v = 0;
            if (!CLI::detail::lexical_cast(s, v) || v < -1 ||
                (v >= 0 && (v >= CPU_SETSIZE || !CPU_ISSET(static_cast<std::size_t>(v), &set)))) {
                return must_be(s, rule);
            }
            return {};
        },
        "-1 or an allowed CPU");
}

CLI::Validator IfName() {
    const std::string rule = "an interface name: 1 to " + std::to_string(IFNAMSIZ - 1) +
                             " characters, no '/', ':' or spaces, not . or ..";
    return CLI::Validator(
        [rule](std::string& s) -> std::string {
            bool ok = !s.empty() && s.size() < IFNAMSIZ && s != "." && s != "..";
            for (const char c : s) {
                if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c))) ok = false;
            }
            return ok ? std::string() : must_be(s, rule);
        },
        "1-" + std::to_string(IFNAMSIZ - 1) + " chars");
}

CLI::Validator Netns() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            const bool name_ok =
                !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos;
            if (!name_ok || ::access(("/var/run/netns/" + s).c_str(), F_OK) != 0) {
                return must_be(s, "an existing network namespace (ip netns list)");
            }
            return {};
        },
        "existing netns");
}

CLI::Validator OutputPath() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            const std::size_t slash = s.rfind('/');
            const std::string dir = slash == std::string::npos ? "." : s.substr(0, slash + 1);
            if (s.empty() || slash + 1 == s.size() || is_dir(s) || !is_dir(dir)) {
                return must_be(s, "a file name in an existing directory");
            }
            return {};
        },
        "file in an existing dir");
}

CLI::Validator SocketPath() {
    const std::string rule = "a socket path of 1 to " + std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                             " characters, no white space, in an existing directory";
    return CLI::Validator(
        [rule](std::string& s) -> std::string {
            const std::size_t slash = s.rfind('/');
            const std::string dir = slash == std::string::npos ? "." : s.substr(0, slash + 1);
            bool ok = !s.empty() && s.size() < sizeof(sockaddr_un{}.sun_path) &&
                      slash + 1 != s.size() && !is_dir(s) && is_dir(dir);
            for (const char c : s) {
                if (std::isspace(static_cast<unsigned char>(c))) ok = false;
            }
            return ok ? std::string() : must_be(s, rule);
        },
        "socket path");
}

CLI::Validator Ipv4() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            in_addr a{};
            const uint32_t h = ::inet_pton(AF_INET, s.c_str(), &a) == 1 ? ntohl(a.s_addr) : 0;
            if (!unicast_ipv4(h)) return must_be(s, "a unicast IPv4 address (a.b.c.d)");
            return {};
        },
        "IPv4");
}

bool parse_unicast_mac(const std::string& s, uint64_t& out) {
    if (s.size() != 17) return false;
    uint64_t m = 0;
    for (std::size_t i = 0; i < 17; ++i) {
        const char c = s[i];
        if (i % 3 == 2) {
            if (c != ':') return false;
            continue;
        }
        const auto u = static_cast<unsigned char>(c);
        if (!std::isxdigit(u)) return false;
        const int v = std::isdigit(u) ? u - '0' : std::tolower(u) - 'a' + 10;
        m = (m << 4) | static_cast<uint64_t>(v);
    }
    if (m == 0 || ((m >> 40) & 1) != 0) return false;
    out = m;
    return true;
}

CLI::Validator UnicastMac(const std::string& none_word) {
    std::string rule = "a unicast MAC address (aa:bb:cc:dd:ee:ff)";
    if (!none_word.empty()) rule += " or " + none_word;
    return CLI::Validator(
        [rule, none_word](std::string& s) -> std::string {
            uint64_t m = 0;
            if ((!none_word.empty() && s == none_word) || parse_unicast_mac(s, m)) return {};
            return must_be(s, rule);
        },
        "MAC");
}

bool parse_ipv4_endpoint(const std::string& s, Ipv4Endpoint& out) {
    const std::size_t colon = s.rfind(':');
    if (colon == std::string::npos) return false;
    in_addr a{};
    if (::inet_pton(AF_INET, s.substr(0, colon).c_str(), &a) != 1) return false;
    uint16_t port = 0;
    const std::string digits = s.substr(colon + 1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
        !CLI::detail::lexical_cast(digits, port)) {
        return false;
    }
    std::memcpy(out.ip.data(), &a.s_addr, out.ip.size());  // network order
    out.port = port;
    return true;
}

CLI::Validator Ipv4Port(bool bind) {
    const std::string rule = bind ? "a.b.c.d:port, a unicast address or 0.0.0.0, port 0 to 65535 "
                                    "(0: the kernel picks)"
                                  : "a.b.c.d:port, a unicast address, port 1 to 65535";
    return CLI::Validator(
        [bind, rule](std::string& s) -> std::string {
            Ipv4Endpoint e;
            if (!parse_ipv4_endpoint(s, e)) return must_be(s, rule);
            uint32_t h = 0;
            std::memcpy(&h, e.ip.data(), sizeof h);
            h = ntohl(h);
            const bool ok = bind ? h == 0 || unicast_ipv4(h) : unicast_ipv4(h) && e.port != 0;
            return ok ? std::string() : must_be(s, rule);
        },
        "IPv4:port");
}

CLI::Validator PktWeight() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            try {
                parse_weight(s, 1, 0);  // the rule's one copy
            } catch (const std::exception&) {
                return must_be(s, "baseline, none or an integer from 1 to 1000000");
            }
            return {};
        },
        "baseline|none|1-1000000");
}

CLI::Validator RelayVariant() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            auto v = bench::relay_variant(s);
            return v ? std::string() : must_be(s, "a known variant: " + v.error());
        },
        "");
}

CLI::Validator NeedsTool(const std::string& tool, const std::string& hint) {
    return CLI::Validator(
        [tool, hint](std::string& s) -> std::string {
            if (tool_in_path(tool)) return {};
            return shown(s) + ": needs " + tool + " in PATH (" + hint + ")";
        },
        "");
}

bool tool_in_path(const std::string& tool) { return lab::find_executable(tool).has_value(); }

}  // namespace pvnet::app::checks
