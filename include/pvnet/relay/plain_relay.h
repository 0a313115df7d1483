// The plain tun relay: what a user writes without rings (issue 5's baseline,
// seed 002's "plain tun I/O"). One thread polls both tap fds and, for each
// readable one, reads one hdr+frame and writes it unchanged to the other
// tap. The virtio_net_hdr passes through, so with offloads on (TUNSETOFFLOAD
// CSUM|TSO4|TSO6) 64 KiB GSO frames and partial checksums cross as they are
// and the receiving kernel validates the header.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "pvnet/port/tap_port.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::relay {

/// One direction of the relay (frames read from one tap, written to the other).
struct PlainDirStats {
    /// errno values counted one by one; larger ones land in the last slot.
    static constexpr std::size_t kErrnoSlots = 134;

    Counter reads;             ///< frames read (each then written or counted below)
    Counter frames, bytes;     ///< written in full
    Counter read_eagain;       ///< poll said readable, read found nothing
    Counter read_errors;       ///< any other failed read
    Counter read_truncated;    ///< frame filled the whole buffer: may have been cut
    Counter write_eagain;      ///< EAGAIN/ENOBUFS on write: dropped, as the kernel does
    Counter write_short;       ///< a write that took fewer bytes than the frame
    std::array<Counter, kErrnoSlots> write_errno{};  ///< dropped writes by errno

    uint64_t write_errors() const noexcept;
};

struct PlainRelayStats {
    PlainDirStats guest_to_host, host_to_guest;
    Counter polls;  ///< poll() calls that returned at least one ready fd
};

struct PlainRelayConfig {
    port::TapConfig guest, host;  ///< each opened (or attached to) as TapPort::open does
    int cpu = -1;                 ///< pin the relay thread (run()'s caller); -1: any
};

class PlainRelay {
public:
    /// Largest hdr+frame: a 64 KiB GSO frame with its headers fits with room to
    /// spare; a read that fills the buffer exactly is counted as truncated.
    static constexpr std::size_t kBufBytes = 256 * 1024;

    /// Opens both taps (links up). The datapath runs once run() is called.
    static Result<std::unique_ptr<PlainRelay>, port::SysError> open(const PlainRelayConfig& cfg);

    /// Relays until `stop` is set (checked at least every 100 ms) and returns
    /// success; an error if a tap went away under it (POLLERR/POLLHUP: its
    /// namespace or device was deleted). Pins the calling thread to cfg.cpu.
    Status<port::SysError> run(const std::atomic<bool>& stop) noexcept;

    const PlainRelayStats& stats() const noexcept { return stats_; }

private:
    explicit PlainRelay(int cpu) : cpu_(cpu) {}
    void relay_one(int from_fd, int to_fd, PlainDirStats& st) noexcept;

    int cpu_;
    std::unique_ptr<port::TapPort> guest_, host_;
    std::unique_ptr<std::byte[]> buf_;
    PlainRelayStats stats_;
};

}  // namespace pvnet::relay
