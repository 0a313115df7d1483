// Shared by the TapPort tests (tap_port_test.cc, tap_accounting_test.cc):
// a namespace per test with the kernel's side of a tap in it, and frames to
// write and read. Needs root; every wait is a bounded poll.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "pvnet/port/gen_port.h"
#include "pvnet/port/netns.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port::tap_test {

using Frame = std::vector<std::byte>;
inline constexpr uint32_t kHdr = TapPort::kHdrBytes;

// The tap's side is the kernel at 198.51.100.1 (GenPort's destination, MAC
// kDstMac); we are the peer 192.0.2.1 (kSrcIp, kSrcMac).
inline constexpr const char* kTapMac = "02:00:00:00:00:02";

/// A namespace with one tap in it, configured as the kernel's side of a link.
class TapRootTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_EQ(geteuid(), 0u) << "TapPort tests need root (CAP_NET_ADMIN) to create "
                                    "network namespaces and taps; run them as root";
        const std::string name = "pvnet-tap-" + std::to_string(getpid());
        auto ns = ScopedNetns::create(name);
        ASSERT_TRUE(ns.has_value()) << to_string(ns.error());
        ns_.emplace(std::move(*ns));
        // No IPv6 chatter (router solicitations, MLD) between our frames and
        // the kernel's answers: /proc/sys/net is the opener's namespace.
        auto st = run_in_netns(name, []() -> Status<SysError> {
            for (const char* p : {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
                                  "/proc/sys/net/ipv6/conf/default/disable_ipv6"}) {
                FILE* f = std::fopen(p, "w");
                if (f == nullptr) return unexpected(SysError{"disable_ipv6", errno});
                std::fputs("1", f);
                std::fclose(f);
            }
            return {};
        });
        ASSERT_TRUE(st.has_value()) << to_string(st.error());
    }

    TapConfig config(const std::string& tap) const {
        TapConfig c;
        c.name = tap;
        c.netns = ns_->name();
        c.link_up = true;
        return c;
    }

    /// MAC and address the kernel answers on, and our address as a permanent neighbour.
    void address(const std::string& tap) const {
        ASSERT_EQ(ns_->ip({"link", "set", "dev", tap, "address", kTapMac}), 0);
        ASSERT_EQ(ns_->ip({"addr", "add", "198.51.100.1/24", "dev", tap}), 0);
        ASSERT_EQ(ns_->ip({"route", "add", "192.0.2.0/24", "dev", tap}), 0);
        ASSERT_EQ(ns_->ip({"neigh", "add", "192.0.2.1", "lladdr", "02:00:00:00:00:01", "dev", tap,
                           "nud", "permanent"}),
                  0);
    }

    std::optional<ScopedNetns> ns_;
};

/// An ARP request from 192.0.2.1 for 198.51.100.1 (the tap's address), behind a
/// zero vnet header; padded to the 60-byte minimum.
inline Frame arp_request() {
    Frame f(kHdr + 60);
    auto* e = reinterpret_cast<uint8_t*>(f.data() + kHdr);
    std::memset(e, 0xff, 6);
    std::memcpy(e + 6, kSrcMac.data(), 6);
    e[12] = 0x08, e[13] = 0x06;                       // ARP
    const uint8_t arp[8] = {0, 1, 8, 0, 6, 4, 0, 1};  // Ethernet, IPv4, request
    std::memcpy(e + 14, arp, 8);
    std::memcpy(e + 22, kSrcMac.data(), 6);
    std::memcpy(e + 28, kSrcIp.data(), 4);
    std::memcpy(e + 38, kDstIp.data(), 4);
    return f;
}

/// A GenPort UDP frame (192.0.2.1:1024 -> 198.51.100.1:9) behind a zero header.
inline Frame udp_frame(uint64_t seq) {
    auto fmt = FrameFormat::create(64);
    EXPECT_TRUE(fmt.has_value());
    FrameGen gen(*fmt);
    Frame f(kHdr + 64);
    EXPECT_EQ(gen.write_frame(seq, f.data() + kHdr, 64), 64u);
    return f;
}

/// Sends `f` split in two iovecs inside the header (the guest may split anywhere).
inline bool send_split(TapPort& tap, Frame& f) {
    const std::array<iovec, 2> iov{iovec{f.data(), 5}, iovec{f.data() + 5, f.size() - 5}};
    return tap.send(iov, static_cast<uint32_t>(f.size())) == SendResult::Sent;
}

/// Reads frames for up to 2 s until one is an ARP reply to 192.0.2.1; the
/// buffer is split inside the header. Other frames are skipped.
inline std::optional<Frame> await_arp_reply(TapPort& tap) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    Frame buf(2048, std::byte{0xee});
    while (std::chrono::steady_clock::now() < until) {
        pollfd p{tap.rx_fd(), POLLIN, 0};
        if (::poll(&p, 1, 100) != 1) continue;
        const std::array<iovec, 2> iov{iovec{buf.data(), 7}, iovec{buf.data() + 7, buf.size() - 7}};
        const uint32_t n = tap.recv(iov);
        if (n < kHdr + 42) continue;
        const auto* e = reinterpret_cast<const uint8_t*>(buf.data() + kHdr);
        if (e[12] == 0x08 && e[13] == 0x06 && e[21] == 2 &&
            std::memcmp(e + 38, kSrcIp.data(), 4) == 0) {
            buf.resize(n);
            return buf;
        }
    }
    return std::nullopt;
}

/// A UDP socket bound to 198.51.100.1:9 inside `ns`, closed with the object.
struct UdpSink {
    int fd = -1;
    explicit UdpSink(const std::string& ns) {
        auto r = udp_socket_in(ns, kDstIp, kUdpDstPort, UdpEnd::Bind);
        EXPECT_TRUE(r.has_value()) << to_string(r.error());
        if (r) fd = *r;
    }
    ~UdpSink() {
        if (fd >= 0) ::close(fd);
    }
    /// The seq of the next datagram, waiting up to 2 s; nullopt if none.
    std::optional<uint64_t> next_seq() const {
        pollfd p{fd, POLLIN, 0};
        uint8_t payload[64];
        if (::poll(&p, 1, 2000) != 1 ||
            ::recv(fd, payload, sizeof payload, 0) != 64 - static_cast<ssize_t>(kHdrBytes)) {
            return std::nullopt;
        }
        uint64_t seq_be = 0;
        std::memcpy(&seq_be, payload, 8);
        return __builtin_bswap64(seq_be);
    }
};

/// The output of shell command `cmd` run inside namespace `ns`.
inline std::string run_in(const std::string& ns, const std::string& cmd) {
    const std::string full = "ip netns exec " + ns + " " + cmd + " 2>&1";
    std::string out;
    if (FILE* f = ::popen(full.c_str(), "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f) != nullptr) out += line;
        ::pclose(f);
    }
    return out;
}

/// `ethtool -k <tap>` inside the namespace.
inline std::string ethtool_k(const std::string& ns, const std::string& tap) {
    return run_in(ns, "ethtool -k " + tap);
}

}  // namespace pvnet::port::tap_test
