// Network namespaces for ports and their tests: run setup code inside a
// named namespace (/var/run/netns/NAME, the `ip netns` convention) without
// moving the process, and create or delete namespaces and links with the
// `ip` tool (setup and tests only, never the data path).
//
// The namespace switch happens in a short-lived helper thread: setns()
// with CLONE_NEWNET changes only the calling thread, and a thread that
// exits needs no switch back. What it opens (a tap, a socket) belongs to
// that namespace and keeps working from any other.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pvnet/util/result.h"

namespace pvnet::port {

/// A failed system call during setup: which step (a string literal) and its errno.
struct SysError {
    const char* op = "";
    int err = 0;
};

/// "op: strerror(err)".
std::string to_string(const SysError& e);

/// Runs `fn` in a helper thread inside namespace `netns` and waits for it;
/// an empty name runs it in the caller's thread and namespace. fn's own
/// error comes back as is; the switch's as {"open netns"|"setns"|"thread", errno}.
Status<SysError> run_in_netns(std::string_view netns,
                              const std::function<Status<SysError>()>& fn) noexcept;

/// A UDP socket made inside `netns` (empty: here), bound to (Bind) or
/// connected to (Connect) ip:port; the caller closes the fd. Experiments and
/// tests use it for the kernel's end of a tap.
enum class UdpEnd : uint8_t { Bind, Connect };
Result<int, SysError> udp_socket_in(std::string_view netns, const std::array<uint8_t, 4>& ip,
                                    uint16_t port, UdpEnd end) noexcept;

/// Runs `ip args...` (found in PATH) and returns its exit status, or -1 if it
/// could not run or died of a signal. Output goes to the caller's stdout/stderr.
int run_ip(const std::vector<std::string>& args) noexcept;

/// A namespace made with `ip netns add` and deleted with `ip netns del` when
/// the object goes (devices inside, taps included, go with it).
class ScopedNetns {
public:
    static Result<ScopedNetns, SysError> create(std::string name) noexcept;
    ScopedNetns(ScopedNetns&& o) noexcept : name_(std::move(o.name_)) { o.name_.clear(); }
    ScopedNetns& operator=(ScopedNetns&&) = delete;
    ScopedNetns(const ScopedNetns&) = delete;
    ~ScopedNetns();

    const std::string& name() const noexcept { return name_; }
    /// `ip -n <name> args...`.
    int ip(std::vector<std::string> args) const noexcept;

private:
    explicit ScopedNetns(std::string name) : name_(std::move(name)) {}
    std::string name_;
};

}  // namespace pvnet::port
