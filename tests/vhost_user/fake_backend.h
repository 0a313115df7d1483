// A scripted vhost-user back-end for the Frontend's tests: it listens on a unix socket (or
// connects to a server-mode Frontend), reads each request whole (header, payload, fds, which
// it closes) and answers as a real back-end would (GET_FEATURES, GET_PROTOCOL_FEATURES,
// GET_QUEUE_NUM, GET_VRING_BASE, GET_INFLIGHT_FD with a memfd, REPLY_ACK 0 for the rest),
// except for one scripted Defect at one chosen request. One thread per back-end, ended by
// the Frontend's close, by the script, or by 10 s without a request.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include <random>

#include "test_frontend.h"

namespace pvnet::vhost_user::test {

/// The virtio features the tests' Frontend wants; the fake offers them and PROTOCOL_FEATURES,
/// and the protocol features REPLY_ACK and MQ (INFLIGHT_SHMFD too when a case says so).
inline constexpr uint64_t kWanted = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) |
                                    virtio::feature_mask(virtio::VIRTIO_NET_F_CSUM) |
                                    virtio::feature_mask(virtio::VIRTIO_NET_F_MRG_RXBUF);
inline constexpr uint64_t kOffered = kWanted | bit(kFProtocolFeatures);
inline constexpr uint64_t kProto = bit(kProtoReplyAck) | bit(kProtoMq);
inline constexpr uint64_t kProtoInflight = kProto | bit(kProtoInflightShmfd);
inline constexpr uint32_t kBase = 7;  ///< what the fake answers GET_VRING_BASE with

/// What the fake back-end does instead of the proper answer.
enum class Defect : uint8_t {
    None,
    // The reply's header: another request's code, no REPLY flag, version 2, 4 or 16 bytes.
    WrongRequest,
    NoReplyFlag,
    Version2,
    Short,
    Long,
    // The reply cut off after its header, or missing (silence, or the connection closed).
    HeaderThenSilence,
    HeaderThenClose,
    Silence,
    Close,
    // Fds with a reply that carries none: 3, 12 (beyond what the Frontend receives), 1.
    Fds3,
    Fds12,
    Fd1,
    // REPLY_ACK 1; Script::value as the u64 (or VringState) answered.
    Nack,
    Value,
    // GET_INFLIGHT_FD: no fd, two, a buffer past the fd's end, offset + size overflowing,
    // a buffer too small for the queues.
    InflightNoFd,
    InflightTwoFds,
    InflightBeyondFd,
    InflightOffsetOverflow,
    InflightTooSmall,
    // The proper reply, then a message nothing asked for, or a close.
    UnsolicitedAfter,
    CloseAfter,
    // Random bytes (seeded by Script::value) in place of the reply.
    Garbage,
    Count
};

/// What the fake back-end offers and the one defect it commits.
struct Script {
    uint64_t features = kOffered;
    uint64_t protocol = kProto;
    uint64_t queue_num = 1;
    Request at = Request::None;  ///< the request whose answer is defective
    int nth = 1;                 ///< its occurrence (1: the first)
    Defect defect = Defect::None;
    uint64_t value = 0;
    bool client = false;  ///< connect to a server-mode Frontend instead of listening
};

/// The scripted back-end: listens (or connects), serves one connection on a thread, and
/// ends when the Frontend closes it, when the script says so, or after 10 s of silence.
class FakeBackend {
public:
    FakeBackend(std::string path, Script s) : path_(std::move(path)), s_(s) {
        if (!s_.client) {
            ::unlink(path_.c_str());
            listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_un a{};
            a.sun_family = AF_UNIX;
            std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
            EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
            EXPECT_EQ(::listen(listen_, 1), 0);
        }
        thread_ = std::thread([this] { run(); });
    }
    ~FakeBackend() {
        if (thread_.joinable()) thread_.join();
    }
    FakeBackend(const FakeBackend&) = delete;
    FakeBackend& operator=(const FakeBackend&) = delete;

private:
    void run() {
        if (!s_.client) {
            pollfd p{listen_, POLLIN, 0};
            if (::poll(&p, 1, 5000) == 1) fd_ = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
            ::close(listen_);
            ::unlink(path_.c_str());  // the next back-end binds the path afresh
        } else {
            sockaddr_un a{};
            a.sun_family = AF_UNIX;
            std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
            const auto end = std::chrono::steady_clock::now() + 5s;
            while (fd_ < 0 && std::chrono::steady_clock::now() < end) {
                fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
                    ::close(fd_);
                    fd_ = -1;
                    std::this_thread::sleep_for(5ms);
                }
            }
        }
        int seen = 0;
        MsgHeader h;
        std::array<std::byte, kMaxPayload> p{};
        while (fd_ >= 0 && read_msg(h, p)) {
            const auto r = static_cast<Request>(h.request);
            const bool hit = r == s_.at && ++seen == s_.nth;
            if (!answer(h, p, hit ? s_.defect : Defect::None)) break;
        }
        if (fd_ >= 0) ::close(fd_);
    }

    /// One request whole: header, payload, fds (closed: only the count matters here).
    bool read_msg(MsgHeader& h, std::array<std::byte, kMaxPayload>& p) {
        std::size_t got = 0, need = sizeof h;
        while (got < need) {
            pollfd pf{fd_, POLLIN, 0};
            if (::poll(&pf, 1, 10000) != 1) return false;
            const bool in_header = got < sizeof h;
            std::byte* dst =
                in_header ? reinterpret_cast<std::byte*>(&h) + got : p.data() + (got - sizeof h);
            iovec iov{dst, (in_header ? sizeof h : need) - got};
            msghdr mh{};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
            mh.msg_control = cbuf;
            mh.msg_controllen = sizeof cbuf;
            const ssize_t n = ::recvmsg(fd_, &mh, MSG_CMSG_CLOEXEC);
            if (n <= 0) return false;
            std::vector<int> fds;
            take_rights(mh, fds);
            for (const int f : fds) ::close(f);
            got += static_cast<std::size_t>(n);
            if (in_header && got == sizeof h) {
                if (h.size > kMaxPayload) return false;
                need += h.size;
            }
        }
        return true;
    }

    void send_msg(MsgHeader h, const void* payload, std::size_t len, std::span<const int> fds) {
        std::array<std::byte, sizeof(MsgHeader) + 64> m{};
        std::memcpy(m.data(), &h, sizeof h);
        if (len != 0) std::memcpy(m.data() + sizeof h, payload, std::min(len, m.size() - sizeof h));
        iovec iov{m.data(), sizeof h + len};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 16)];
        put_rights(mh, cbuf, fds);
        (void)::sendmsg(fd_, &mh, MSG_NOSIGNAL);
    }

    /// Answers `h` as a back-end would, but for `d`. False: the connection ends here.
    bool answer(const MsgHeader& h, const std::array<std::byte, kMaxPayload>& req, Defect d) {
        if (d == Defect::Close) return false;
        if (d == Defect::Silence) return true;
        const auto r = static_cast<Request>(h.request);
        std::array<std::byte, 32> out{};
        uint32_t size = sizeof(uint64_t);
        std::vector<int> fds;
        const auto put = [&out](const auto& v) { std::memcpy(out.data(), &v, sizeof v); };
        switch (r) {
            case Request::GetFeatures:
                put(s_.features);
                break;
            case Request::GetProtocolFeatures:
                put(s_.protocol);
                break;
            case Request::GetQueueNum:
                put(s_.queue_num);
                break;
            case Request::GetVringBase: {
                VringState st;
                std::memcpy(&st, req.data(), sizeof st);
                put(VringState{st.index, kBase});
                break;
            }
            case Request::GetInflightFd: {
                InflightInfo ask;
                std::memcpy(&ask, req.data(), sizeof ask);
                const uint64_t bytes = inflight_queue_bytes(ask.queue_size) * ask.num_queues;
                InflightInfo info{bytes, 0, ask.num_queues, ask.queue_size};
                if (d == Defect::InflightBeyondFd) info.mmap_size = 2 * bytes;
                if (d == Defect::InflightOffsetOverflow) info.mmap_offset = UINT64_MAX - 16;
                if (d == Defect::InflightTooSmall) info.mmap_size = bytes - virtio::kInflightAlign;
                put(info);
                size = sizeof info;
                const int m = ::memfd_create("fe_hostile_inflight", MFD_CLOEXEC);
                EXPECT_EQ(::ftruncate(m, static_cast<off_t>(bytes)), 0);
                if (d != Defect::InflightNoFd) fds.push_back(m);
                if (d == Defect::InflightTwoFds) fds.push_back(::dup(m));
                if (d == Defect::InflightNoFd) ::close(m);
                break;
            }
            default:
                if ((h.flags & kFlagNeedReply) == 0) {  // no answer expected
                    return d != Defect::CloseAfter && d != Defect::HeaderThenClose;
                }
                break;  // REPLY_ACK 0
        }
        MsgHeader rh{h.request, kVersion | kFlagReply, size};
        uint32_t len = size;
        const int extra = d == Defect::Fds3 ? 3 : d == Defect::Fds12 ? 12 : d == Defect::Fd1;
        for (int i = 0; i < extra; ++i) fds.push_back(::eventfd(0, EFD_CLOEXEC));
        switch (d) {
            case Defect::WrongRequest:
                rh.request = h.request + 1;
                break;
            case Defect::NoReplyFlag:
                rh.flags = kVersion;
                break;
            case Defect::Version2:
                rh.flags = 2 | kFlagReply;
                break;
            case Defect::Short:
                rh.size = len = 4;
                break;
            case Defect::Long:
                rh.size = len = size + 8;
                break;
            case Defect::HeaderThenSilence:
            case Defect::HeaderThenClose:
                len = 0;
                break;
            case Defect::Nack:
                put(uint64_t{1});
                break;
            case Defect::Value:
                put(s_.value);
                break;
            case Defect::Garbage: {
                // Random bytes: a header of a random request, flags and size half the
                // time, the right one with one field bent the other half.
                std::mt19937_64 rng(s_.value);
                std::array<std::byte, 48> g{};
                for (auto& b : g) b = static_cast<std::byte>(rng());
                if (rng() % 2 == 0) {
                    std::memcpy(g.data(), &rh, sizeof rh);
                    std::memcpy(g.data() + sizeof rh, out.data(), size);
                    g[rng() % (sizeof rh + size)] = static_cast<std::byte>(rng());
                }
                const auto n = static_cast<std::size_t>(rng() % g.size());
                MsgHeader gh;
                std::memcpy(&gh, g.data(), sizeof gh);
                if (n >= sizeof gh)
                    send_msg(gh, g.data() + sizeof gh, n - sizeof gh, fds);
                else
                    (void)::send(fd_, g.data(), n, MSG_NOSIGNAL);
                for (const int f : fds) ::close(f);
                return rng() % 2 == 0;
            }
            default:
                break;
        }
        send_msg(rh, out.data(), len, fds);
        for (const int f : fds) ::close(f);
        if (d == Defect::UnsolicitedAfter) send_msg(MsgHeader{1, kVersion, 0}, nullptr, 0, {});
        return d != Defect::HeaderThenClose && d != Defect::CloseAfter;
    }

    std::string path_;
    Script s_;
    int listen_ = -1;
    int fd_ = -1;
    std::thread thread_;
};

}  // namespace pvnet::vhost_user::test
