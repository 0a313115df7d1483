// A vhost-user front-end for the tests: a unix-socket connection that sends
// any message (framed or not, with any fds) and reads replies, a guest
// (one memfd of memory, an rx and a tx ring, their doorbells) and QEMU's
// setup sequence. Shared by server_test.cc (vhost_user::Server in-process)
// and hostile_frontend_test.cc (`pvnet serve` as a separate process).
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pvnet/backend/net_device.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/util/fd_passing.h"
#include "pvnet/vhost_user/protocol.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::vhost_user::test {

using namespace std::chrono_literals;

inline constexpr uint64_t kGpa = 0x100000;
/// The front-end's (fictitious) user address of guest memory.
inline constexpr uint64_t kUva = 0x7f0000000000;
inline constexpr uint64_t kRingArea = 64 * 1024;
inline constexpr uint64_t kMemBytes = 4 * 1024 * 1024;
inline constexpr uint64_t kDataGpa = kGpa + 2 * kRingArea;
inline constexpr uint16_t kRingSize = 256;
inline constexpr uint32_t kHdr = backend::kHdrBytes;

inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

/// Open fds of a process ("self" or a pid).
inline int count_fds(const std::string& pid = "self") {
    int n = 0;
    DIR* d = ::opendir(("/proc/" + pid + "/fd").c_str());
    if (d == nullptr) return -1;
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    return n;
}

/// Mappings of the memfd called `memfd_name` in a process's maps ("/memfd:NAME (deleted)").
inline int count_maps(const std::string& memfd_name, const std::string& pid = "self") {
    FILE* f = std::fopen(("/proc/" + pid + "/maps").c_str(), "r");
    if (f == nullptr) return -1;
    const std::string needle = "/memfd:" + memfd_name + " ";
    int n = 0;
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr)
        n += std::strstr(line, needle.c_str()) != nullptr;
    std::fclose(f);
    return n;
}

/// The socket path a test process `pid` uses for `tag`.
inline std::string socket_path(const std::string& tag, pid_t pid = ::getpid()) {
    return "/tmp/pvnet_vu_" + std::to_string(pid) + "_" + tag + ".sock";
}

/// The test's front-end: one connection, blocking with a receive timeout.
class FrontEnd {
public:
    explicit FrontEnd(const std::string& path) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        timeval tv{5, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv,
                     sizeof tv);  // a back-end that stops reading
    }
    ~FrontEnd() { close(); }
    FrontEnd(const FrontEnd&) = delete;
    FrontEnd& operator=(const FrontEnd&) = delete;
    bool connected() const { return connected_; }
    int fd() const { return fd_; }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

    bool send_raw(const void* data, std::size_t len, std::span<const int> fds = {}) {
        iovec iov{const_cast<void*>(data), len};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 16)];
        if (fds.size() > 16) return false;
        put_rights(mh, cbuf, fds);
        return ::sendmsg(fd_, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
    }
    bool send(Request r, uint32_t flags, const void* payload, uint32_t size,
              std::span<const int> fds = {}) {
        std::vector<std::byte> m(sizeof(MsgHeader) + size);
        const MsgHeader h{static_cast<uint32_t>(r), flags, size};
        std::memcpy(m.data(), &h, sizeof h);
        if (size != 0) std::memcpy(m.data() + sizeof h, payload, size);
        return send_raw(m.data(), m.size(), fds);
    }
    template <typename T>
    bool msg(Request r, const T& payload, std::span<const int> fds = {}, bool need_reply = true) {
        return send(r, kVersion | (need_reply ? kFlagNeedReply : 0), &payload, sizeof payload, fds);
    }
    /// A reply's u64 (or VringState), nullopt on EOF / timeout / bad reply.
    std::optional<uint64_t> reply(Request r) {
        MsgHeader h;
        if (!read_all(&h, sizeof h)) return std::nullopt;
        uint64_t v = 0;
        if (h.request != static_cast<uint32_t>(r) || h.flags != (kVersion | kFlagReply) ||
            h.size != 8 || !read_all(&v, sizeof v)) {
            return std::nullopt;
        }
        return v;
    }
    /// GET_INFLIGHT_FD: the reply's InflightInfo and the fd that came with it
    /// (the caller owns it); nullopt on EOF / timeout / a bad reply.
    std::optional<std::pair<InflightInfo, int>> get_inflight(const InflightInfo& req) {
        if (!msg(Request::GetInflightFd, req, {}, false)) return std::nullopt;
        MsgHeader h;
        InflightInfo info;
        std::vector<int> fds;
        if (!read_all(&h, sizeof h, &fds) || h.request != static_cast<uint32_t>(Request::GetInflightFd) ||
            h.flags != (kVersion | kFlagReply) || h.size != sizeof info ||
            !read_all(&info, sizeof info, &fds) || fds.size() != 1) {
            for (const int fd : fds) ::close(fd);
            return std::nullopt;
        }
        return std::pair{info, fds[0]};
    }
    /// Sends with NEED_REPLY and returns the REPLY_ACK value.
    template <typename T>
    std::optional<uint64_t> ack(Request r, const T& payload, std::span<const int> fds = {}) {
        if (!msg(r, payload, fds)) return std::nullopt;
        return reply(r);
    }
    std::optional<uint64_t> get(Request r) {
        if (!send(r, kVersion, nullptr, 0)) return std::nullopt;
        return reply(r);
    }
    /// True when the back-end closed the connection within the timeout (EOF,
    /// or a reset when it closed with our bytes unread).
    bool closed_by_peer() {
        char c;
        const ssize_t n = ::recv(fd_, &c, 1, 0);
        return n == 0 || (n < 0 && errno == ECONNRESET);
    }

    /// As closed_by_peer(), after reading and dropping whatever came before
    /// the close (replies left unread); false past `limit`.
    bool closed_after_draining(std::chrono::milliseconds limit = 10s) {
        const auto end = std::chrono::steady_clock::now() + limit;
        char buf[4096];
        while (std::chrono::steady_clock::now() < end) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
            if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        }
        return false;
    }

private:
    /// Reads n bytes; fds that come with them go to `fds` (else closed).
    bool read_all(void* p, std::size_t n, std::vector<int>* fds = nullptr) {
        auto* b = static_cast<char*>(p);
        while (n != 0) {
            iovec iov{b, n};
            msghdr mh{};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
            mh.msg_control = cbuf;
            mh.msg_controllen = sizeof cbuf;
            const ssize_t k = ::recvmsg(fd_, &mh, MSG_CMSG_CLOEXEC);
            std::vector<int> got;
            if (k > 0) take_rights(mh, got);
            for (const int fd : got) {
                if (fds != nullptr) {
                    fds->push_back(fd);
                } else {
                    ::close(fd);
                }
            }
            if (k <= 0) return false;
            b += k;
            n -= static_cast<std::size_t>(k);
        }
        return true;
    }
    int fd_ = -1;
    bool connected_ = false;
};

struct OneRegion {
    uint32_t nregions = 1;
    uint32_t padding = 0;
    MemRegion r;
};

inline VringState vs(uint32_t i, uint32_t n) { return VringState{i, n}; }

/// The guest side: memory (one memfd named `memfd_name`: it shows in the
/// back-end's /proc/PID/maps as "/memfd:NAME (deleted)"), both rings and
/// their doorbells. Slots: tx frames at kDataGpa + (token % 64) * 2048, rx
/// buffers 64 slots further.
struct Guest {
    mem::MemoryRegion region;
    mem::MemoryTable table;
    ring::SplitRingAddrs addrs[2];
    std::unique_ptr<ring::SplitDriverQueue> q[2];  // rx, tx
    notify::EventFd kick[2] = {std::move(notify::EventFd::create().value()),
                               std::move(notify::EventFd::create().value())};
    notify::EventFd call[2] = {std::move(notify::EventFd::create().value()),
                               std::move(notify::EventFd::create().value())};

    explicit Guest(const char* memfd_name = "vu_guest")
        : region(std::move(mem::MemoryRegion::create(kMemBytes, memfd_name).value())) {
        EXPECT_TRUE(table.add(mem::GuestAddr(kGpa), region.bytes()));
        for (uint64_t i = 0; i < 2; ++i) {
            addrs[i] = ring::split_ring_addrs_at(mem::GuestAddr(kGpa + i * kRingArea), kRingSize);
            ring::DriverQueueConfig c;
            c.addrs = addrs[i];
            q[i] = std::move(ring::SplitDriverQueue::create(table, c).value());
        }
    }
    static uint64_t uva(mem::GuestAddr g) { return kUva + (g.value - kGpa); }
    OneRegion mem_table(uint64_t uva_base = kUva) const {
        OneRegion t;
        t.r = MemRegion{kGpa, region.size(), uva_base, 0};
        return t;
    }
    VringAddr vring_addr(uint32_t i) const {
        VringAddr a;
        a.index = i;
        a.desc_user_addr = uva(addrs[i].desc);
        a.avail_user_addr = uva(addrs[i].avail);
        a.used_user_addr = uva(addrs[i].used);
        return a;
    }
    std::byte* host(uint64_t gpa) const { return region.host() + (gpa - kGpa); }

    static uint64_t tx_gpa(uint64_t token) { return kDataGpa + (token % 64) * 2048; }
    static uint64_t rx_gpa(uint64_t token) { return kDataGpa + 64 * 2048 + (token % 64) * 2048; }
    /// A zeroed virtio_net_hdr and `frame` made available on the tx ring, kicked.
    void transmit(uint64_t token, std::span<const std::byte> frame) {
        ASSERT_LE(kHdr + frame.size(), 2048u);
        std::memset(host(tx_gpa(token)), 0, kHdr);
        std::memcpy(host(tx_gpa(token)) + kHdr, frame.data(), frame.size());
        const ring::Buf out{mem::GuestAddr(tx_gpa(token)),
                            static_cast<uint32_t>(kHdr + frame.size())};
        ASSERT_EQ(q[1]->add(std::span(&out, 1), {}, token), ring::AddStatus::Ok);
        q[1]->publish();
        kick[1].signal();
    }
    /// One 2048-byte buffer made available on the rx ring, kicked.
    void post_rx(uint64_t token) {
        const ring::Buf in{mem::GuestAddr(rx_gpa(token)), 2048};
        ASSERT_EQ(q[0]->add({}, std::span(&in, 1), token), ring::AddStatus::Ok);
        q[0]->publish();
        kick[0].signal();
    }
};

inline constexpr uint64_t kFeatures =
    virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) | bit(kFProtocolFeatures);

/// Features (`features`, kFeatures unless told) and protocol features
/// (REPLY_ACK) negotiated.
inline void negotiate(FrontEnd& fe, uint64_t features = kFeatures) {
    const auto offered = fe.get(Request::GetFeatures);
    ASSERT_TRUE(offered);
    EXPECT_EQ(*offered & virtio::feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ), 0u);
    EXPECT_EQ(*offered & virtio::feature_mask(virtio::VIRTIO_NET_F_NOTF_COAL), 0u);
    ASSERT_NE(*offered & bit(kFProtocolFeatures), 0u);
    ASSERT_TRUE(fe.msg(Request::SetFeatures, features, {}, false));
    const auto proto = fe.get(Request::GetProtocolFeatures);
    ASSERT_TRUE(proto);
    EXPECT_EQ(*proto, kBackendProtocolFeatures);
    ASSERT_TRUE(fe.msg(Request::SetProtocolFeatures, *proto, {}, false));
    EXPECT_EQ(fe.get(Request::GetQueueNum), 1u);
}
/// Requests negotiate() sends.
inline constexpr uint64_t kNegotiateMessages = 5;

/// QEMU's order: features, owner, memory, then per vring num, base, addr,
/// kick, call, enable; every request acked.
inline void full_setup(FrontEnd& fe, Guest& g, uint64_t features = kFeatures) {
    negotiate(fe, features);
    const int mfd = g.region.fd();
    ASSERT_EQ(fe.ack(Request::SetMemTable, g.mem_table(), std::span(&mfd, 1)), 0u);
    for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(fe.ack(Request::SetVringNum, vs(i, kRingSize)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringBase, vs(i, 0)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringAddr, g.vring_addr(i)), 0u);
        const int k = g.kick[i].fd(), c = g.call[i].fd();
        ASSERT_EQ(fe.ack(Request::SetVringKick, uint64_t{i}, std::span(&k, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringCall, uint64_t{i}, std::span(&c, 1)), 0u);
        ASSERT_EQ(fe.ack(Request::SetVringEnable, vs(i, 1)), 0u);
    }
}

}  // namespace pvnet::vhost_user::test
