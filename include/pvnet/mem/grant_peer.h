// The frontend process that copy mode's process_vm_readv/writev reach
// (issue 23). Those calls name a pid and an address, so the backend must be
// sure of both: the pid is the socket's peer (the grant layer takes it from
// SO_PEERCRED and holds its pidfd), the address range is that process's own
// shared mapping of the data memfd the backend holds (check_peer_mapping),
// and every copy stays inside the range and stops for good once the process
// is known gone. What the peer does to its own mappings afterwards reaches
// only its own memory.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "pvnet/util/result.h"

namespace pvnet::mem {

class GrantPeer {
public:
    /// `pid` with [base, base + bytes) checked to be its mapping of the data memfd.
    GrantPeer(pid_t pid, uint64_t base, uint64_t bytes) noexcept
        : pid_(pid), base_(base), bytes_(bytes) {}

    pid_t pid() const noexcept { return pid_; }
    uint64_t base() const noexcept { return base_; }
    uint64_t bytes() const noexcept { return bytes_; }
    /// Once gone, no copy names the pid again: a later process may get it.
    bool gone() const noexcept { return gone_.load(std::memory_order_relaxed); }
    // ORDER: relaxed; the flag orders nothing else, and whoever ends the
    // device joins its workers afterwards.
    void set_gone() noexcept { gone_.store(true, std::memory_order_relaxed); }

private:
    pid_t pid_;
    uint64_t base_;
    uint64_t bytes_;
    std::atomic<bool> gone_{false};
};

/// Whether [base, base + bytes) of process `pid` is a shared, readable and
/// writable mapping of the file `data_fd` is (same device and inode), the
/// file's offset 0 at `base` and contiguous from there (/proc/<pid>/maps).
/// The error says what is wrong and where.
Status<std::string> check_peer_mapping(pid_t pid, uint64_t base, uint64_t bytes, int data_fd);

}  // namespace pvnet::mem
