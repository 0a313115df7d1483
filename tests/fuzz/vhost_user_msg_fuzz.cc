// Fuzz target: vhost_user::BackendSession fed a stream of vhost-user
// requests with fds, without a socket, against a VhostNet on a PeerPort
// (no worker: the control plane only).
//
// Input, read front to back (fuzz_support.h Reader): u8 protocol features
// negotiated first (bit 0 REPLY_ACK, bit 1 INFLIGHT_SHMFD, bit 2 STATUS, bit 3
// NET_MTU); then per
// message, until the input ends or the session closes: u8 request (< 0xf0:
// one of the known ones, else a raw u32 follows), u8 flags (< 200: version
// 1, bit 0 NEED_REPLY; else a raw u32 follows), u8 fds (low nibble: count
// 0..kMaxFds + 1; high nibble: kind of the first, eventfd or a memfd of
// 4 KiB / 64 KiB / 1 MiB, sealed against shrinking), u8 fit (for
// SET_MEM_TABLE: each region's size set to its memfd's, offset 0, so tables
// map; for SET_INFLIGHT_FD: mmap_size the memfd's, offset 0), u16 payload
// size (mod kMaxPayload + 1), the payload.
//
// Checked: a reply is a REPLY-flagged version-1 header with 8 bytes (24 and
// an fd for GET_INFLIGHT_FD); a refused request (the rejected counter moved)
// changed nothing in the session's snapshot and the device's features and
// vrings: for a request that may complete a ring the device then refuses
// (its setting stays recorded, backend_session.h), at least nothing else
// changed and no ring started; no fd outlives the session (the /proc/self/fd
// count before and after).
#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/port/peer_port.h"
#include "pvnet/vhost_user/backend_session.h"
#include "fuzz_support.h"

namespace {

using namespace pvnet;
using namespace pvnet::vhost_user;

int count_fds() {
    int n = 0;
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) std::abort();
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    return n;
}

struct World {
    port::PeerPort::Pair ports;
    std::unique_ptr<backend::VhostNet<port::PeerPort>> dev;
    ServerConfig cfg;
    World() : ports(std::move(port::PeerPort::create_pair({}, {}).value())) {
        port::PeerPort* p[] = {ports.first.get(), ports.second.get()};
        // Two pairs on the same port: vring indexes 0..3 are data vrings.
        p[1] = p[0];
        dev = std::move(backend::VhostNet<port::PeerPort>::create(
                            backend::VhostNetOptions{}, std::span<port::PeerPort* const>(p))
                            .value());
        cfg.max_mtu = 9000;
    }
};

int make_fd(uint8_t kind) {
    static constexpr std::size_t kSizes[] = {4096, 64 * 1024, 1024 * 1024};
    if (kind % 4 == 0) return ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int fd = ::memfd_create("vu_fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && (::ftruncate(fd, static_cast<off_t>(kSizes[kind % 4 - 1])) != 0 ||
                    ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)) {
        ::close(fd);
        return -1;
    }
    return fd;
}

std::size_t fd_bytes(int fd) {
    const off_t end = ::lseek(fd, 0, SEEK_END);
    return end < 0 ? 0 : static_cast<std::size_t>(end);
}

/// The device's side of the session: what a refused request must not change.
struct Device {
    uint64_t features;
    std::vector<bool> started;
    bool operator==(const Device&) const = default;
};
Device device_state(const backend::NetDevice& dev) {
    Device d{dev.features(), {}};
    for (uint16_t i = 0; i < dev.num_vrings(); ++i) d.started.push_back(dev.vring_started(i));
    return d;
}

/// A refused request changed nothing (backend_session.h's one exception aside).
/// `payload`: refused as bad_payload, the reason a device refusal is counted under.
void unchanged(uint32_t request, bool payload, const BackendSession::Snapshot& a,
               const BackendSession::Snapshot& b, const Device& da, const Device& db) {
    const auto r = static_cast<Request>(request);
    const bool may_start = r == Request::SetVringNum || r == Request::SetVringAddr ||
                           r == Request::SetVringKick || r == Request::SetVringErr ||
                           r == Request::SetVringEnable;
    if (r != Request::SetMemTable && (!may_start || !payload)) {
        FUZZ_CHECK(a == b);
        FUZZ_CHECK(da == db);
        return;
    }
    FUZZ_CHECK(a.features == b.features && a.protocol_features == b.protocol_features &&
               a.status == b.status && a.features_set == b.features_set && a.mtu == b.mtu &&
               a.inflight == b.inflight && da.features == db.features);
    if (r != Request::SetMemTable) FUZZ_CHECK(a.mem == b.mem);
    for (std::size_t i = 0; i < a.vrings.size(); ++i) {
        FUZZ_CHECK(a.vrings[i].started || !b.vrings[i].started);  // none started by a refusal
    }
    for (std::size_t i = 0; i < da.started.size(); ++i) FUZZ_CHECK(da.started[i] || !db.started[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static World w;
    fuzz::Reader in(data, size);
    const int fds_before = count_fds();
    {
        SessionStats stats;
        BackendSession s(*w.dev, w.cfg, stats);
        const uint8_t proto = in.u8();
        if ((proto & 0xf) != 0) {
            const MsgHeader h{static_cast<uint32_t>(Request::SetProtocolFeatures), kVersion, 8};
            const uint64_t f = ((proto & 1) != 0 ? bit(kProtoReplyAck) : 0) |
                               ((proto & 2) != 0 ? bit(kProtoInflightShmfd) : 0) |
                               ((proto & 4) != 0 ? bit(kProtoStatus) : 0) |
                               ((proto & 8) != 0 ? bit(kProtoNetMtu) : 0);
            std::byte p[8];
            std::memcpy(p, &f, sizeof f);
            FUZZ_CHECK(!s.handle(h, p, {}).close);
        }
        for (int n = 0; n < 64 && !in.empty(); ++n) {
            MsgHeader h;
            const uint8_t rsel = in.u8();
            h.request = rsel < 0xf0 ? rsel % static_cast<uint32_t>(Request::Max) : in.u32();
            const uint8_t fsel = in.u8();
            h.flags = fsel < 200 ? kVersion | ((fsel & 1) != 0 ? kFlagNeedReply : 0u) : in.u32();
            const uint8_t fdsel = in.u8();
            const bool fit = (in.u8() & 1) != 0;
            std::vector<std::byte> payload(in.u16() % (kMaxPayload + 1));
            for (std::byte& b : payload) b = std::byte{in.u8()};
            h.size = static_cast<uint32_t>(payload.size());
            std::vector<int> fds;
            for (unsigned i = 0; i < (fdsel & 0xfu) % (kMaxFds + 2); ++i) {
                const int fd = make_fd(static_cast<uint8_t>((fdsel >> 4) + i));
                if (fd >= 0) fds.push_back(fd);
            }
            if (fit && h.request == static_cast<uint32_t>(Request::SetMemTable)) {
                for (std::size_t r = 0; r < fds.size() && 8 + 32 * (r + 1) <= payload.size(); ++r) {
                    const uint64_t bytes_in_fd = fd_bytes(fds[r]);
                    std::memcpy(payload.data() + 8 + 32 * r + 8, &bytes_in_fd, 8);
                    std::memset(payload.data() + 8 + 32 * r + 24, 0, 8);
                }
            }
            if (fit && h.request == static_cast<uint32_t>(Request::SetInflightFd) &&
                !fds.empty() && payload.size() >= 16) {
                const uint64_t bytes_in_fd = fd_bytes(fds[0]);
                std::memcpy(payload.data(), &bytes_in_fd, 8);
                std::memset(payload.data() + 8, 0, 8);
            }
            const BackendSession::Snapshot before = s.snapshot();
            const Device dev_before = device_state(*w.dev);
            const uint64_t rejected = stats.rejected.get(), bad = stats.bad_payload.get();
            const Outcome out = s.handle(h, payload, fds);
            if (stats.rejected.get() != rejected) {
                unchanged(h.request, stats.bad_payload.get() != bad, before, s.snapshot(),
                          dev_before, device_state(*w.dev));
            }
            if (out.reply_len != 0) {
                MsgHeader rh;
                std::memcpy(&rh, out.reply.data(), sizeof rh);
                const bool inflight = out.reply_fd >= 0;
                const uint32_t want = inflight ? sizeof(InflightInfo) : 8;
                FUZZ_CHECK(out.reply_len == sizeof rh + want && rh.size == want &&
                           rh.flags == (kVersion | kFlagReply) && rh.request == h.request);
                FUZZ_CHECK(!inflight || h.request == static_cast<uint32_t>(Request::GetInflightFd));
            }
            if (out.close) break;
        }
    }
    FUZZ_CHECK(count_fds() == fds_before);  // every fd given was closed with the session
    return 0;
}
