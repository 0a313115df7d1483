#include "pvnet/grant/netback.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <list>
#include <optional>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/grant/handshake.h"
#include "pvnet/grant/store.h"
#include "pvnet/grant/wire.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/gen_loop_port.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::grant {

namespace {

/// Features both ends of a grant connection use (fixed: the hello carries none).
constexpr uint64_t kGrantFeatures = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) |
                                    virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX);

bool is_eventfd(int fd) {
    char path[64];
    char target[64]{};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(path, target, sizeof target - 1);
    return n > 0 && std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

/// The data memfd: a regular file at least `bytes` long that cannot shrink
/// (a truncated page under a mapping would SIGBUS the backend).
std::optional<std::string> check_data_fd(int fd, uint64_t bytes) {
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "data fd is not a regular file";
    if (static_cast<uint64_t>(st.st_size) < bytes) return "data memfd shorter than data_bytes";
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return "data memfd not sealed against shrinking";
    return std::nullopt;
}

std::string counters(uint16_t domid, GrantMode mode, const backend::VhostNet<port::GenLoopPort>& dev,
                     const port::GenLoopPort& port, const mem::GrantAccess& rx,
                     const mem::GrantAccess& tx, const mem::GrantRefs& refs) {
    std::string s = "guest domid=" + std::to_string(domid) + " mode=" + to_string(mode);
    const auto kv = [&s](const char* k, uint64_t v) {
        s += ' ';
        s += k;
        s += '=';
        s += std::to_string(v);
    };
    const auto& st = dev.stats(0);
    kv("tx_pkts", st.tx_pkts.get());
    kv("tx_bytes", st.tx_bytes.get());
    kv("rx_pkts", st.rx_pkts.get());
    kv("rx_bytes", st.rx_bytes.get());
    const port::SinkStats sink = const_cast<port::GenLoopPort&>(port).sink().stats();
    kv("sink_pkts", sink.sink_pkts);
    kv("sink_lost", sink.sink_lost);
    kv("sink_bad", sink.sink_drop_corrupt + sink.sink_drop_bad_len + sink.sink_duplicates);
    kv("generated", port.generated());
    kv("grants", rx.stats().maps.get() + tx.stats().maps.get());
    kv("map_syscalls", rx.stats().map_syscalls.get() + tx.stats().map_syscalls.get());
    kv("unmap_syscalls", rx.stats().unmap_syscalls.get() + tx.stats().unmap_syscalls.get());
    kv("copy_syscalls", rx.stats().copy_syscalls.get() + tx.stats().copy_syscalls.get());
    kv("copy_back_failed", rx.stats().copy_back_failed.get());
    kv("pool_hits", rx.stats().pool_hits.get() + tx.stats().pool_hits.get());
    kv("pool_misses", rx.stats().pool_misses.get() + tx.stats().pool_misses.get());
    kv("pool_evictions", rx.stats().pool_evictions.get() + tx.stats().pool_evictions.get());
    kv("grant_errors", refs.errors().total());
    // Each refusal by its reason (GrantError order), only those that happened.
    static constexpr const char* kErrorKeys[] = {
        "zero_length",  "ref_out_of_range",  "not_granted", "wrong_domain",
        "read_only",    "crosses_page",      "frame_out_of_range", "too_many_segments",
        "pool_full",    "system_error",      "table_full",  "in_use"};
    static_assert(std::size(kErrorKeys) == static_cast<std::size_t>(mem::GrantError::Count));
    for (std::size_t e = 0; e < std::size(kErrorKeys); ++e) {
        const uint64_t v = refs.errors().get(static_cast<mem::GrantError>(e));
        if (v == 0) continue;
        s += " grant_error_";
        s += kErrorKeys[e];
        s += '=';
        s += std::to_string(v);
    }
    kv("rx_broken", dev.vring_broken(backend::rx_vring(0)) ? 1 : 0);
    kv("tx_broken", dev.vring_broken(backend::tx_vring(0)) ? 1 : 0);
    kv("held_after", refs.pinned());  // grants still pinned once all is released: 0
    return s;
}

std::unique_ptr<mem::GrantAccess> make_access(GrantMode mode, const mem::GrantSource& src,
                                              uint16_t ring, mem::CopyVia via) {
    switch (mode) {
        case GrantMode::Map: return std::make_unique<mem::GrantMapper>(src, ring);
        case GrantMode::Copy: return std::make_unique<mem::GrantCopier>(src, ring, via);
        case GrantMode::Persistent: return std::make_unique<mem::PersistentGrantPool>(src, ring);
    }
    return nullptr;
}

}  // namespace

Result<std::unique_ptr<Netback>, std::string> Netback::create(const NetbackConfig& cfg) {
    if (cfg.fallback == GrantMode::Persistent) {
        return unexpected(std::string("the fallback mode is map or copy"));
    }
    if (auto st = Store::open(cfg.store_dir); !st) return unexpected(st.error());
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (cfg.socket_path.empty() || cfg.socket_path.size() >= sizeof addr.sun_path) {
        return unexpected("socket path empty or too long: " + cfg.socket_path);
    }
    std::memcpy(addr.sun_path, cfg.socket_path.c_str(), cfg.socket_path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return unexpected(std::string("socket: ") + std::strerror(errno));
    ::unlink(cfg.socket_path.c_str());
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 16) != 0) {
        const std::string err = std::string("bind/listen ") + cfg.socket_path + ": " +
                                std::strerror(errno);
        ::close(fd);
        return unexpected(err);
    }
    return std::unique_ptr<Netback>(new Netback(cfg, fd));
}

Netback::~Netback() {
    ::close(listen_fd_);
    ::unlink(cfg_.socket_path.c_str());
}

void Netback::run(const std::atomic<bool>& stop,
                  const std::function<void(const std::string&)>& report) {
    struct Guest {
        std::thread t;
        std::atomic<bool> done{false};
    };
    std::list<Guest> guests;
    // A long-running backend joins each guest's thread once it has left,
    // and a flood of connections meets a bound, not a thread each.
    const auto reap = [&guests] {
        for (auto it = guests.begin(); it != guests.end();) {
            if (it->done.load()) {
                it->t.join();
                it = guests.erase(it);
            } else {
                ++it;
            }
        }
    };
    while (!stop.load()) {
        reap();
        pollfd p{listen_fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        if (guests.size() >= kMaxGuests) {
            refused_.fetch_add(1);
            ::close(conn);
            report("refused: " + std::to_string(kMaxGuests) + " guests already connected");
            continue;
        }
        Guest& g = guests.emplace_back();
        g.t = std::thread([this, conn, &stop, &report, &g] {
            serve_guest(conn, stop, report);
            g.done.store(true);
        });
    }
    for (Guest& g : guests) g.t.join();
}

void Netback::serve_guest(int conn, const std::atomic<bool>& stop,
                          const std::function<void(const std::string&)>& report) {
    std::vector<int> fds;
    GrantAck ack;
    const auto refuse = [&](const std::string& why) {
        refused_.fetch_add(1);
        std::snprintf(ack.error.data(), ack.error.size(), "%s", why.c_str());
        (void)send_msg(conn, std::as_bytes(std::span(&ack, 1)), {});
        for (const int fd : fds) ::close(fd);
        ::close(conn);
        report("refused: " + why);
    };
    auto msg = recv_msg(conn, sizeof(GrantHello), fds, cfg_.handshake_ms);
    if (!msg) return refuse(msg.error());
    auto hello = parse_hello(*msg, fds.size());
    if (!hello) return refuse(hello.error());
    const GrantHello h = *hello;
    for (const std::size_t k : {kRxKick, kRxCall, kTxKick, kTxCall}) {
        if (!is_eventfd(fds[k])) return refuse("fd " + std::to_string(k) + " is not an eventfd");
    }
    if (auto bad = check_data_fd(fds[kDataFd], h.data_bytes)) return refuse(*bad);
    auto shared = mem::MemoryRegion::map_fd(::dup(fds[kSharedFd]), h.shared_bytes, 0);
    if (!shared) return refuse("shared memfd: " + std::string(mem::to_string(shared.error())));
    if (!shared->sealed_against_shrink()) return refuse("shared memfd not sealed against shrinking");

    auto store = Store::open(cfg_.store_dir);
    if (!store) return refuse(store.error());
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.handshake_ms);
    auto mode = backend_handshake(*store, h.domid, cfg_.fallback, cfg_.offer_persistent, deadline);
    if (!mode) return refuse("handshake: " + mode.error());

    mem::MemoryTable table;
    if (!table.add(mem::GuestAddr(0), shared->bytes())) return refuse("shared memory table");
    mem::GrantRefs refs(shared->bytes().first(uint64_t{h.grant_entries} * sizeof(mem::GrantEntry)),
                        0, h.data_bytes / mem::kGrantPageBytes);
    const mem::GrantSource src{&refs, fds[kDataFd], static_cast<pid_t>(h.pid), h.remote_base};
    // Declared before the device: the rings hand their chains back to them
    // when the device stops.
    auto rx_access = make_access(*mode, src, h.ring_size, cfg_.copy_via);
    auto tx_access = make_access(*mode, src, h.ring_size, cfg_.copy_via);
    auto fmt = port::FrameFormat::create(h.frame_bytes);
    if (!fmt) return refuse("frame format");
    port::GenLoopPort port(*fmt);
    const notify::EventFd rx_kick = notify::EventFd::adopt(fds[kRxKick]);
    const notify::EventFd rx_call = notify::EventFd::adopt(fds[kRxCall]);
    const notify::EventFd tx_kick = notify::EventFd::adopt(fds[kTxKick]);
    const notify::EventFd tx_call = notify::EventFd::adopt(fds[kTxCall]);
    fds[kRxKick] = fds[kRxCall] = fds[kTxKick] = fds[kTxCall] = -1;  // owned by the EventFds

    const auto ring_at = [&](uint64_t off) {
        return ring::SplitRingAddrs{h.ring_size, mem::GuestAddr(off),
                                    mem::GuestAddr(off + ring_avail_off(h.ring_size)),
                                    mem::GuestAddr(off + ring_used_off(h.ring_size))};
    };
    backend::DeviceSetup setup;
    setup.features = kGrantFeatures;
    setup.mem = &table;
    setup.vrings.resize(2);
    setup.vrings[0] = backend::VringSetup{ring_at(h.rx_ring_off), {}, &rx_kick, &rx_call, nullptr,
                                          true, rx_access.get(), {}};
    setup.vrings[1] = backend::VringSetup{ring_at(h.tx_ring_off), {}, &tx_kick, &tx_call, nullptr,
                                          true, tx_access.get(), {}};
    backend::VhostNetOptions opt = cfg_.device;
    opt.offered_features = kGrantFeatures;
    auto dev = backend::VhostNet<port::GenLoopPort>::create(setup, opt, port);
    if (!dev) {
        const std::string why = "device: " + std::string(backend::to_string(dev.error()));
        (void)close_side(*store, Side::Backend, h.domid);
        return refuse(why);
    }
    (*dev)->start();
    ack.ok = 1;
    std::snprintf(ack.mode.data(), ack.mode.size(), "%s", to_string(*mode));
    (void)send_msg(conn, std::as_bytes(std::span(&ack, 1)), {});

    // Serve until the guest hangs up (or we are told to stop).
    while (!stop.load()) {
        pollfd p{conn, POLLIN | POLLRDHUP, 0};
        if (::poll(&p, 1, 50) > 0) {
            char b;
            if (::recv(conn, &b, 1, MSG_DONTWAIT) <= 0) break;
        }
    }
    port.stop();
    (*dev)->stop();
    (*dev)->reset();  // every vring stopped: the chains it held go back, unwritten
    rx_access->release_all();  // a persistent pool unmaps and releases its grants here
    tx_access->release_all();
    const std::string line = counters(h.domid, *mode, **dev, port, *rx_access, *tx_access, refs);
    dev->reset();
    (void)close_side(*store, Side::Backend, h.domid);
    ::close(fds[kSharedFd]);
    ::close(fds[kDataFd]);
    ::close(conn);
    report(line);
}

}  // namespace pvnet::grant
