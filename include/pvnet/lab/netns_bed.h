// Two network namespaces for an experiment: made with `ip netns add`, each
// with lo up and IPv6 off (no router solicitations or MLD in the counters),
// and deleted (with every device inside) when the bed goes — also when
// making it fails half-way. Names carry the creating pid so that a later
// run can delete what a killed one left behind (remove_stale_netns).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pvnet/port/netns.h"
#include "pvnet/util/result.h"

namespace pvnet::lab {

class NetnsBed {
public:
    /// Namespaces "<prefix><tag>-a" and "<prefix><tag>-b". `tag` starts with
    /// the pid, optionally after one lowercase letter: "<pid>-<n>", "t<pid>-<n>".
    static Result<NetnsBed, std::string> create(std::string_view prefix, std::string_view tag);
    NetnsBed(NetnsBed&&) noexcept = default;
    NetnsBed& operator=(NetnsBed&&) = delete;

    const std::string& ns_a() const noexcept { return a_.name(); }
    const std::string& ns_b() const noexcept { return b_.name(); }

private:
    NetnsBed(port::ScopedNetns a, port::ScopedNetns b) : a_(std::move(a)), b_(std::move(b)) {}
    port::ScopedNetns a_, b_;
};

/// Deletes namespaces named "<prefix>[letter]<pid>-..." whose pid no longer
/// exists (a run killed before its destructors ran).
void remove_stale_netns(std::string_view prefix);

/// `ip netns exec <ns> cmd...`.
std::vector<std::string> in_netns(const std::string& ns, std::vector<std::string> cmd);

/// `ip args...`, bounded; an error carries ip's output.
Status<std::string> ip(std::vector<std::string> args);

/// Polls (ss) until something listens on `port` in `ns`, up to `timeout`.
Status<std::string> wait_listening(const std::string& ns, bool tcp, uint16_t port,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace pvnet::lab
