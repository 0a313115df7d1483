// The vhost-user front-end (frontend.h): QEMU's message order (hw/virtio/
// vhost-user.c, vhost.c vhost_dev_start), every reply checked before use.
#include "pvnet/vhost_user/frontend.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "pvnet/util/fd_passing.h"
#include "pvnet/vhost_user/unix_socket.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::vhost_user {

std::string_view to_string(FrontendFail f) noexcept {
    switch (f) {
        case FrontendFail::Connect: return "connect";
        case FrontendFail::Closed: return "closed";
        case FrontendFail::Timeout: return "timeout";
        case FrontendFail::BadVersion: return "bad_version";
        case FrontendFail::NotReply: return "not_reply";
        case FrontendFail::WrongRequest: return "wrong_request";
        case FrontendFail::BadSize: return "bad_size";
        case FrontendFail::BadFds: return "bad_fds";
        case FrontendFail::BadPayload: return "bad_payload";
        case FrontendFail::Nack: return "nack";
        case FrontendFail::Layout: return "layout";
        case FrontendFail::Unexpected: return "unexpected";
        case FrontendFail::Features: return "features";
        case FrontendFail::Io: return "io";
        case FrontendFail::Count: break;
    }
    return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

/// The protocol features pvnet's front-end can use.
constexpr uint64_t kFrontendProtocolFeatures =
    bit(kProtoMq) | bit(kProtoReplyAck) | bit(kProtoInflightShmfd);

/// A reply: its payload (at most InflightInfo) and the fd it may carry.
struct Reply {
    std::array<std::byte, sizeof(InflightInfo)> payload{};
    int fd = -1;
};

std::string req_name(Request r) { return std::string(to_string(r)); }

}  // namespace

struct Frontend::Impl {
    FrontendConfig cfg;
    FrontendStats stats;
    int listen_fd = -1;
    int fd = -1;
    bool created_file = false;

    uint64_t features = 0;  ///< negotiated virtio features (without PROTOCOL_FEATURES)
    bool negotiated = false;
    uint64_t proto = 0;
    uint16_t queue_num = 1;

    int inflight_fd = -1;
    InflightInfo inflight{};

    bool have_dev = false;
    backend::DeviceSetup dev;
    GuestMemory mem;
    /// GET_VRING_BASE's answers after stop(); restarts use them once.
    std::vector<uint16_t> bases;
    bool bases_valid = false;
    bool lost = false;  ///< the last connection ended without stop()

    explicit Impl(const FrontendConfig& c) : cfg(c) {}
    ~Impl() {
        close_conn();
        if (listen_fd >= 0) ::close(listen_fd);
        if (created_file) ::unlink(cfg.path.c_str());
        if (inflight_fd >= 0) ::close(inflight_fd);
    }

    void close_conn() noexcept {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
    Unexpected<FrontendError> fail(FrontendFail f, std::string text) {
        stats.fails.add(f);
        if (f != FrontendFail::Nack && fd >= 0) {
            close_conn();
            stats.losses.add();
            lost = true;
        }
        return unexpected(FrontendError{f, std::move(text)});
    }

    Status<FrontendError> open_connection() noexcept;
    Status<FrontendError> send(Request r, uint32_t flags, const void* p, uint32_t size,
                               std::span<const int> fds = {}) noexcept;
    /// Reads the reply to `r`: exactly `size` payload bytes and `nfds` fds.
    Result<Reply, FrontendError> reply(Request r, uint32_t size, std::size_t nfds) noexcept;
    Result<uint64_t, FrontendError> get_u64(Request r) noexcept;
    /// A request that changes state: with REPLY_ACK it asks for the ack and checks it.
    Status<FrontendError> set(Request r, const void* p, uint32_t size,
                              std::span<const int> fds = {}) noexcept;
    template <typename T>
    Status<FrontendError> set(Request r, const T& v, std::span<const int> fds = {}) noexcept {
        return set(r, &v, sizeof v, fds);
    }
    Result<uint64_t, FrontendError> negotiate(uint64_t wanted, uint64_t all_or_none = 0) noexcept;
    /// The device's queue pairs are no more than GET_QUEUE_NUM's answer.
    Status<FrontendError> check_queues(const backend::DeviceSetup& d) noexcept {
        const auto pairs = static_cast<uint16_t>(d.vrings.size() / 2);
        if (pairs <= queue_num) return {};
        return fail(FrontendFail::Features, "the device has " + std::to_string(pairs) +
                                                " queue pairs, the back-end " +
                                                std::to_string(queue_num));
    }
    Status<FrontendError> setup_inflight() noexcept;
    /// Forgets the inflight buffer: the next start asks the back-end for a fresh one.
    void drop_inflight() noexcept {
        if (inflight_fd >= 0) ::close(inflight_fd);
        inflight_fd = -1;
        inflight = InflightInfo{};
    }
    Status<FrontendError> start_device() noexcept;
    uint16_t used_idx(const ring::SplitRingAddrs& a) const noexcept;
    uint64_t uva(mem::GuestAddr g) const noexcept {
        return reinterpret_cast<uint64_t>(mem.host) + (g.value - mem.gpa);
    }
};

Status<FrontendError> Frontend::Impl::open_connection() noexcept {
    close_conn();
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg.connect_timeout_ms);
    const auto addr = unix_addr(cfg.path);
    if (!addr) return fail(FrontendFail::Connect, "socket path empty or too long");
    const sockaddr_un& a = *addr;
    for (;;) {
        if (cfg.server) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - Clock::now());
            pollfd p{listen_fd, POLLIN, 0};
            if (left.count() > 0 && ::poll(&p, 1, static_cast<int>(left.count())) > 0) {
                fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            }
        } else {
            // Non-blocking: a blocking connect to a back-end that listens but never
            // accepts waits without end once its backlog is full (EAGAIN here instead).
            fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd >= 0 && (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
                            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)) {
                close_conn();
            }
        }
        if (fd >= 0) break;
        if (Clock::now() >= deadline) {
            return fail(FrontendFail::Connect,
                        std::string(cfg.server ? "no back-end connected to '"
                                               : "no back-end listening on '") +
                            cfg.path + "' within " + std::to_string(cfg.connect_timeout_ms) +
                            " ms");
        }
        if (!cfg.server) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.retry_ms));
    }
    // A back-end that stops reading cannot block a send for longer than a reply may take.
    timeval tv{static_cast<time_t>(cfg.reply_timeout_ms / 1000),
               static_cast<suseconds_t>(cfg.reply_timeout_ms % 1000 * 1000)};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    lost = false;
    return {};
}

Status<FrontendError> Frontend::Impl::send(Request r, uint32_t flags, const void* p,
                                           uint32_t size, std::span<const int> fds) noexcept {
    if (fd < 0) return fail(FrontendFail::Closed, req_name(r) + ": not connected");
    std::array<std::byte, sizeof(MsgHeader) + kMaxPayload> buf{};
    const MsgHeader h{static_cast<uint32_t>(r), kVersion | flags, size};
    std::memcpy(buf.data(), &h, sizeof h);
    if (size != 0) std::memcpy(buf.data() + sizeof h, p, size);
    iovec iov{buf.data(), sizeof h + size};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
    put_rights(mh, cbuf, fds);
    for (;;) {
        const ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n == static_cast<ssize_t>(iov.iov_len)) break;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            return fail(FrontendFail::Closed, req_name(r) + ": the back-end closed the connection");
        }
        return fail(FrontendFail::Io, req_name(r) + ": send: " +
                                          (n < 0 ? std::strerror(errno) : "short write"));
    }
    stats.requests.add();
    return {};
}

Result<Reply, FrontendError> Frontend::Impl::reply(Request r, uint32_t size,
                                                   std::size_t nfds) noexcept {
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg.reply_timeout_ms);
    std::vector<int> fds;
    const auto close_fds = [&fds] {
        for (const int f : fds) ::close(f);
        fds.clear();
    };
    MsgHeader h;
    Reply out;
    auto* hb = reinterpret_cast<std::byte*>(&h);
    std::size_t got = 0;
    bool ctrunc = false;
    bool have_header = false;
    const std::string what = req_name(r) + " reply";
    for (;;) {
        const std::size_t want = have_header ? h.size : sizeof h;
        if (got == want) {
            if (have_header) break;
            have_header = true;
            got = 0;
            // The header decides whether the payload is read at all.
            if ((h.flags & kVersionMask) != kVersion) {
                close_fds();
                return fail(FrontendFail::BadVersion, what + ": version " +
                                                          std::to_string(h.flags & kVersionMask));
            }
            if ((h.flags & kFlagReply) == 0) {
                close_fds();
                return fail(FrontendFail::NotReply, what + ": REPLY flag not set");
            }
            if (h.request != static_cast<uint32_t>(r)) {
                close_fds();
                return fail(FrontendFail::WrongRequest,
                            what + ": answers request " + std::to_string(h.request));
            }
            if (h.size != size) {
                close_fds();
                return fail(FrontendFail::BadSize, what + ": payload of " +
                                                       std::to_string(h.size) + " bytes, want " +
                                                       std::to_string(size));
            }
            if (size == 0) break;
            continue;
        }
        std::byte* dst = have_header ? out.payload.data() + got : hb + got;
        iovec iov{dst, want - got};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        const ssize_t n = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n > 0) {
            take_rights(mh, fds);
            ctrunc = ctrunc || (mh.msg_flags & MSG_CTRUNC) != 0;
            got += static_cast<std::size_t>(n);
            continue;
        }
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            close_fds();
            return fail(FrontendFail::Closed, what + ": the back-end closed the connection");
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            close_fds();
            return fail(FrontendFail::Io, what + ": " + std::strerror(errno));
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd p{fd, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
            close_fds();
            return fail(FrontendFail::Timeout, what + ": none within " +
                                                   std::to_string(cfg.reply_timeout_ms) + " ms");
        }
    }
    if (ctrunc || fds.size() != nfds) {
        const std::size_t k = fds.size();
        close_fds();
        return fail(FrontendFail::BadFds, what + ": " + std::to_string(k) + " fds" +
                                              (ctrunc ? " (truncated)" : "") + ", want " +
                                              std::to_string(nfds));
    }
    if (nfds == 1) out.fd = fds[0];
    stats.replies.add();
    return out;
}

Result<uint64_t, FrontendError> Frontend::Impl::get_u64(Request r) noexcept {
    if (auto s = send(r, 0, nullptr, 0); !s) return unexpected(s.error());
    auto rep = reply(r, sizeof(uint64_t), 0);
    if (!rep) return unexpected(rep.error());
    uint64_t v = 0;
    std::memcpy(&v, rep->payload.data(), sizeof v);
    return v;
}

Status<FrontendError> Frontend::Impl::set(Request r, const void* p, uint32_t size,
                                          std::span<const int> fds) noexcept {
    const bool ack = (proto & bit(kProtoReplyAck)) != 0;
    if (auto s = send(r, ack ? kFlagNeedReply : 0, p, size, fds); !s) return s;
    if (!ack) return {};
    auto rep = reply(r, sizeof(uint64_t), 0);
    if (!rep) return unexpected(rep.error());
    uint64_t v = 0;
    std::memcpy(&v, rep->payload.data(), sizeof v);
    if (v != 0) {
        return fail(FrontendFail::Nack, req_name(r) + ": refused by the back-end (REPLY_ACK " +
                                            std::to_string(v) + ")");
    }
    return {};
}

Result<uint64_t, FrontendError> Frontend::Impl::negotiate(uint64_t wanted,
                                                          uint64_t all_or_none) noexcept {
    auto offered = get_u64(Request::GetFeatures);
    if (!offered) return unexpected(offered.error());
    if ((*offered & bit(kFProtocolFeatures)) == 0) {
        return fail(FrontendFail::Features,
                    "the back-end does not offer VHOST_USER_F_PROTOCOL_FEATURES");
    }
    const uint64_t version_1 = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1);
    if ((*offered & version_1) == 0) {
        return fail(FrontendFail::Features, "the back-end does not offer VIRTIO_F_VERSION_1");
    }
    // Never VIRTIO_F_IN_ORDER: it binds the driver too (VIRTIO 1.2 2.7.5.1:
    // descriptors in ring order, next = x + 1), and the driver queue takes
    // them from a free list.
    uint64_t f = wanted & *offered & ~bit(kFProtocolFeatures) &
                 ~virtio::feature_mask(virtio::VIRTIO_F_IN_ORDER);
    if ((f & all_or_none) != all_or_none) f &= ~all_or_none;
    if (negotiated && f != features) {
        // The driver laid out its rings and headers for the first back-end's features.
        return fail(FrontendFail::Features,
                    "the back-end no longer offers the negotiated features (missing 0x" +
                        [](uint64_t m) {
                            char b[20];
                            std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(m));
                            return std::string(b);
                        }(features & ~f) + ")");
    }
    auto poff = get_u64(Request::GetProtocolFeatures);
    if (!poff) return unexpected(poff.error());
    uint64_t p = *poff & kFrontendProtocolFeatures;
    if (!cfg.inflight) p &= ~bit(kProtoInflightShmfd);
    if (auto s = send(Request::SetProtocolFeatures, 0, &p, sizeof p); !s) return unexpected(s.error());
    proto = p;
    queue_num = 1;
    if ((p & bit(kProtoMq)) != 0) {
        auto n = get_u64(Request::GetQueueNum);
        if (!n) return unexpected(n.error());
        if (*n == 0 || *n > 0x8000) {
            return fail(FrontendFail::BadPayload,
                        "GET_QUEUE_NUM reply: " + std::to_string(*n) + " queue pairs");
        }
        queue_num = static_cast<uint16_t>(*n);
    }
    if (auto s = set(Request::SetOwner, nullptr, 0); !s) return unexpected(s.error());
    const uint64_t fw = f | bit(kFProtocolFeatures);
    if (auto s = set(Request::SetFeatures, fw); !s) return unexpected(s.error());
    features = f;
    negotiated = true;
    stats.connects.add();
    return f;
}

Status<FrontendError> Frontend::Impl::setup_inflight() noexcept {
    if ((proto & bit(kProtoInflightShmfd)) == 0) return {};
    if (inflight_fd < 0) {
        // The data vrings only: the back-end logs no control command. start()
        // checked they share one size.
        const std::size_t data = dev.vrings.size() / 2 * 2;
        const uint16_t qsize = data == 0 ? 0 : dev.vrings[0].addrs.size;
        InflightInfo ask{};
        ask.num_queues = static_cast<uint16_t>(data);
        ask.queue_size = qsize;
        if (auto s = send(Request::GetInflightFd, 0, &ask, sizeof ask); !s) return s;
        auto rep = reply(Request::GetInflightFd, sizeof(InflightInfo), 1);
        if (!rep) return unexpected(rep.error());
        InflightInfo got;
        std::memcpy(&got, rep->payload.data(), sizeof got);
        struct stat st{};
        // The buffer must be what was asked for and lie inside the fd the front-end keeps.
        if (got.mmap_size < inflight_queue_bytes(qsize) * ask.num_queues ||
            got.mmap_offset > UINT64_MAX - got.mmap_size || ::fstat(rep->fd, &st) != 0 ||
            static_cast<uint64_t>(st.st_size) < got.mmap_offset + got.mmap_size) {
            ::close(rep->fd);
            return fail(FrontendFail::BadPayload,
                        "GET_INFLIGHT_FD reply: a buffer of " + std::to_string(got.mmap_size) +
                            " bytes at offset " + std::to_string(got.mmap_offset) +
                            " does not fit its fd or the queues");
        }
        inflight_fd = rep->fd;
        inflight = got;
        inflight.num_queues = ask.num_queues;
        inflight.queue_size = qsize;
    }
    return set(Request::SetInflightFd, inflight, std::span(&inflight_fd, 1));
}

uint16_t Frontend::Impl::used_idx(const ring::SplitRingAddrs& a) const noexcept {
    // The used ring is the driver's own memory; idx is its second u16.
    auto* p = reinterpret_cast<uint16_t*>(mem.host + (a.used.value - mem.gpa) + 2);
    return std::atomic_ref<uint16_t>(*p).load(std::memory_order_acquire);
}

Status<FrontendError> Frontend::Impl::start_device() noexcept {
    if (auto s = setup_inflight(); !s) return s;
    struct {
        uint32_t nregions = 1;
        uint32_t padding = 0;
        MemRegion r;
    } table;
    table.r = MemRegion{mem.gpa, mem.size, reinterpret_cast<uint64_t>(mem.host), 0};
    if (auto s = set(Request::SetMemTable, table, std::span(&mem.fd, 1)); !s) return s;
    const bool from_used = lost && !bases_valid;
    for (std::size_t k = 0; k < dev.vrings.size(); ++k) {
        const auto i = static_cast<uint32_t>(k);
        const backend::VringSetup& v = dev.vrings[k];
        uint32_t base = v.base.last_avail_idx;
        if (bases_valid) base = bases[k];
        if (from_used) {
            base = used_idx(v.addrs);
            stats.base_from_used.add();
        }
        if (auto s = set(Request::SetVringNum, VringState{i, v.addrs.size}); !s) return s;
        if (auto s = set(Request::SetVringBase, VringState{i, base}); !s) return s;
        VringAddr a;
        a.index = i;
        a.desc_user_addr = uva(v.addrs.desc);
        a.avail_user_addr = uva(v.addrs.avail);
        a.used_user_addr = uva(v.addrs.used);
        if (auto s = set(Request::SetVringAddr, a); !s) return s;
        const auto fd_msg = [&](Request r, const notify::EventFd* e) {
            // The back-end holds it from now on: it may saturate it and clear
            // O_NONBLOCK, so our signals of it go through the kernel.
            if (e != nullptr) e->hand_over();
            const uint64_t val = i | (e == nullptr ? kVringNoFdMask : 0);
            const int efd = e == nullptr ? -1 : e->fd();
            return set(r, val, e == nullptr ? std::span<const int>{} : std::span(&efd, 1));
        };
        if (auto s = fd_msg(Request::SetVringKick, v.kick); !s) return s;
        if (auto s = fd_msg(Request::SetVringCall, v.call); !s) return s;
        if (v.enabled) {
            if (auto s = set(Request::SetVringEnable, VringState{i, 1}); !s) return s;
        }
    }
    bases_valid = false;
    lost = false;
    return {};
}

Result<std::unique_ptr<Frontend>, std::string> Frontend::create(const FrontendConfig& cfg) {
    auto impl = std::make_unique<Impl>(cfg);
    if (!unix_addr(cfg.path)) {
        return unexpected("vhost-user socket path '" + cfg.path + "' is empty or too long");
    }
    if (cfg.server) {
        auto fd = listen_unix(cfg.path, false, 1);
        if (!fd) return unexpected(fd.error());
        impl->listen_fd = *fd;
        impl->created_file = true;
    }
    return std::unique_ptr<Frontend>(new Frontend(std::move(impl)));
}

Frontend::Frontend(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Frontend::~Frontend() = default;

Result<uint64_t, FrontendError> Frontend::connect(uint64_t wanted, uint64_t all_or_none) noexcept {
    Impl& m = *impl_;
    if (auto s = m.open_connection(); !s) return unexpected(s.error());
    // A fresh negotiation: only reconnect() holds a back-end to the features of before.
    const bool had = m.negotiated;
    const uint64_t before = m.features;
    m.negotiated = false;
    auto f = m.negotiate(wanted, all_or_none);
    if (!f) {
        m.negotiated = had;
    } else if (had && *f != before) {
        m.have_dev = false;  // laid out for the old features: it needs start() again
    }
    return f;
}

Status<FrontendError> Frontend::start(const backend::DeviceSetup& dev,
                                      const GuestMemory& mem) noexcept {
    Impl& m = *impl_;
    if (dev.features != m.features) {
        return m.fail(FrontendFail::Features, "the device's features are not the negotiated ones");
    }
    if (auto s = m.check_queues(dev); !s) return s;
    if ((m.proto & bit(kProtoInflightShmfd)) != 0) {
        // vhost-user.rst GET_INFLIGHT_FD: one queue_size for every queue's log (QEMU,
        // DPDK and libvhost-user lay each out for it); a ring of another size is refused.
        const std::size_t data = dev.vrings.size() / 2 * 2;
        for (std::size_t k = 1; k < data; ++k) {
            if (dev.vrings[k].addrs.size != dev.vrings[0].addrs.size) {
                return m.fail(FrontendFail::Layout,
                              "vring " + std::to_string(k) + " has " +
                                  std::to_string(dev.vrings[k].addrs.size) + " entries, vring 0 " +
                                  std::to_string(dev.vrings[0].addrs.size) +
                                  ": INFLIGHT_SHMFD's buffer has one queue_size for all (give "
                                  "every ring the same size, or set FrontendConfig::inflight "
                                  "= false)");
            }
        }
    }
    m.dev = dev;
    m.mem = mem;
    m.have_dev = true;
    m.bases_valid = false;
    // New rings: an old log would complete chains they never had (after a crash),
    // or, laid out for other ring sizes, have every ring refused.
    m.drop_inflight();
    return m.start_device();
}

Status<FrontendError> Frontend::stop() noexcept {
    Impl& m = *impl_;
    m.bases.assign(m.dev.vrings.size(), 0);
    for (std::size_t k = 0; k < m.dev.vrings.size(); ++k) {
        const VringState q{static_cast<uint32_t>(k), 0};
        if (auto s = m.send(Request::GetVringBase, 0, &q, sizeof q); !s) return s;
        auto rep = m.reply(Request::GetVringBase, sizeof(VringState), 0);
        if (!rep) return unexpected(rep.error());
        VringState st;
        std::memcpy(&st, rep->payload.data(), sizeof st);
        if (st.index != k || st.num > 0xffff) {
            return m.fail(FrontendFail::BadPayload,
                          "GET_VRING_BASE reply: vring " + std::to_string(st.index) + " base " +
                              std::to_string(st.num) + " for vring " + std::to_string(k));
        }
        m.bases[k] = static_cast<uint16_t>(st.num);
    }
    m.bases_valid = true;
    return {};
}

bool Frontend::alive(int timeout_ms) noexcept {
    Impl& m = *impl_;
    if (m.fd < 0) return false;
    pollfd p{m.fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;
    char c;
    const ssize_t n = ::recv(m.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (n > 0) {
        (void)m.fail(FrontendFail::Unexpected, "a message from the back-end nothing asked for");
    } else {
        (void)m.fail(FrontendFail::Closed, "the back-end closed the connection");
    }
    return false;
}

bool Frontend::connected() const noexcept { return impl_->fd >= 0; }

Status<FrontendError> Frontend::reconnect() noexcept {
    Impl& m = *impl_;
    if (!m.have_dev || !m.negotiated) {
        return m.fail(FrontendFail::Features, "reconnect before a first start");
    }
    if (m.fd < 0 || !m.bases_valid) {
        if (m.fd >= 0) (void)m.fail(FrontendFail::Closed, "reconnect on a live connection");
        if (auto s = m.open_connection(); !s) return s;
        m.lost = !m.bases_valid;
        if (auto f = m.negotiate(m.features); !f) return unexpected(f.error());
        // A restarted back-end may offer fewer queue pairs than the device has.
        if (auto s = m.check_queues(m.dev); !s) return s;
    }
    m.stats.reconnects.add();
    // After a clean stop nothing is in flight: the log starts afresh. After a
    // loss it is what the next back-end needs (the dead one's chains).
    if (m.bases_valid) m.drop_inflight();
    return m.start_device();
}

Reconnector::Reconnector(Frontend& fe, double give_up_s, Hooks hooks)
    : fe_(fe), give_up_s_(give_up_s), hooks_(std::move(hooks)), thread_([this] { run(); }) {}

Reconnector::~Reconnector() { stop(); }

void Reconnector::stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
}

void Reconnector::run() noexcept {
    while (!stop_.load(std::memory_order_relaxed)) {
        if (fe_.alive(20)) continue;
        if (hooks_.lost) hooks_.lost();
        const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(give_up_s_));
        std::string why = "stopped";
        bool ok = false;
        while (!stop_.load(std::memory_order_relaxed) && Clock::now() < give_up) {
            auto s = fe_.reconnect();
            if (s) {
                ok = true;
                break;
            }
            why = s.error().text;
        }
        if (hooks_.done) hooks_.done(ok, why);
        if (!ok) return;
    }
}

uint64_t Frontend::features() const noexcept { return impl_->features; }
uint64_t Frontend::protocol_features() const noexcept { return impl_->proto; }
uint16_t Frontend::queue_num() const noexcept { return impl_->queue_num; }
bool Frontend::has_inflight() const noexcept { return impl_->inflight_fd >= 0; }
const FrontendStats& Frontend::stats() const noexcept { return impl_->stats; }
const std::string& Frontend::path() const noexcept { return impl_->cfg.path; }

}  // namespace pvnet::vhost_user
