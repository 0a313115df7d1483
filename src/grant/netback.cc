#include "pvnet/grant/netback.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <iterator>
#include <list>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
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

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5; older libc headers lack it
#endif

/// The data memfd: a regular file at least `bytes` long that cannot shrink
/// (a truncated page under a mapping would SIGBUS the backend), open for
/// writing, not sealed against it, and of 4 KiB pages (rx writes whole
/// grants into it; a refusal now beats a broken queue later).
std::optional<std::string> check_data_fd(int fd, uint64_t bytes) {
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "data fd is not a regular file";
    if (static_cast<uint64_t>(st.st_size) < bytes) return "data memfd shorter than data_bytes";
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return "data memfd not sealed against shrinking";
    if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
        return "data memfd sealed against writing";
    }
    if ((::fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) return "data memfd not open for writing";
    struct statfs fs{};
    if (::fstatfs(fd, &fs) != 0 || fs.f_type == HUGETLBFS_MAGIC) {
        return "data memfd on hugetlbfs (grants are 4 KiB pages)";
    }
    return std::nullopt;
}

/// The process at the other end of `conn`, for process_vm copies, or why it
/// cannot be served. The socket names it (the hello's pid must agree), its
/// pidfd is held (readable once it exits), and the hello's remote_base is
/// its shared mapping of `data_fd`. Checked alive after reading its maps,
/// so the /proc/<pid> read was that process's and no other's.
struct Peer {
    int pidfd = -1;
    std::optional<mem::GrantPeer> vm;
    Peer() = default;
    Peer(const Peer&) = delete;
    Peer& operator=(const Peer&) = delete;
    ~Peer() {
        if (pidfd >= 0) ::close(pidfd);
    }
};

std::optional<std::string> identify_peer(int conn, const GrantHello& h, int data_fd, Peer& peer) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) {
        return "peer credentials: " + std::string(std::strerror(errno));
    }
    if (h.pid != static_cast<uint32_t>(cred.pid)) {
        return "hello: pid " + std::to_string(h.pid) + " is not the connected peer's (" +
               std::to_string(cred.pid) + ")";
    }
    len = sizeof peer.pidfd;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERPIDFD, &peer.pidfd, &len) != 0) {
        peer.pidfd = -1;
        return "peer pidfd (SO_PEERPIDFD, Linux 6.5): " + std::string(std::strerror(errno));
    }
    if (auto st = mem::check_peer_mapping(cred.pid, h.remote_base, h.data_bytes, data_fd); !st) {
        return "hello: " + st.error();
    }
    // glibc 2.36's <sys/pidfd.h> declares it without C linkage: the syscall.
    if (::syscall(SYS_pidfd_send_signal, peer.pidfd, 0, nullptr, 0) != 0) {
        return "hello: the peer process exited";
    }
    peer.vm.emplace(cred.pid, h.remote_base, h.data_bytes);
    return std::nullopt;
}

/// A report that must not throw (it follows a failure to allocate).
void tell(const std::function<void(const std::string&)>& report, const char* what,
          const char* why) noexcept {
    try {
        report(std::string(what) + why);
    } catch (...) {
    }
}

std::string counters(uint16_t domid, GrantMode mode, const backend::VhostNet<port::GenLoopPort>& dev,
                     const port::GenLoopPort& port, const mem::GrantAccess& rx,
                     const mem::GrantAccess& tx, const mem::GrantRefs& refs, bool peer_gone) {
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
    kv("slots_lost", rx.stats().slots_lost.get() + tx.stats().slots_lost.get());
    kv("pool_hits", rx.stats().pool_hits.get() + tx.stats().pool_hits.get());
    kv("pool_misses", rx.stats().pool_misses.get() + tx.stats().pool_misses.get());
    kv("pool_evictions", rx.stats().pool_evictions.get() + tx.stats().pool_evictions.get());
    kv("grant_errors", refs.errors().total());
    // Each refusal by its reason (GrantError order), only those that happened.
    static constexpr const char* kErrorKeys[] = {
        "zero_length",  "ref_out_of_range",  "not_granted", "wrong_domain",
        "read_only",    "crosses_page",      "frame_out_of_range", "too_many_segments",
        "pool_full",    "system_error",      "outside_peer", "copy_stopped",
        "table_full",   "in_use"};
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
    kv("peer_gone", peer_gone ? 1 : 0);  // process_vm: its process exited or a copy failed
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
            tell(report, "refused: ", "too many guests already connected");
            continue;
        }
        // Out of memory, threads or mappings (vm.max_map_count: a thread's
        // stack is one): this guest is refused, the others go on.
        try {
            Guest& g = guests.emplace_back();
            try {
                g.t = std::thread([this, conn, &stop, &report, &g] {
                    serve_guest(conn, stop, report);
                    g.done.store(true);
                });
            } catch (...) {
                guests.pop_back();
                throw;
            }
        } catch (const std::exception& e) {
            refused_.fetch_add(1);
            ::close(conn);
            tell(report, "refused: cannot start the guest: ", e.what());
        }
    }
    for (Guest& g : guests) g.t.join();
}

void Netback::serve_guest(int conn, const std::atomic<bool>& stop,
                          const std::function<void(const std::string&)>& report) noexcept {
    std::vector<int> fds;
    bool acked = false;
    try {
        serve(conn, fds, acked, stop, report);
    } catch (const std::exception& e) {
        // What serve() set up is unwound; the device, if it ran, was stopped
        // before anything past it can throw.
        if (acked) {
            guest_errors_.fetch_add(1);
        } else {
            refused_.fetch_add(1);
            GrantAck ack;
            std::snprintf(ack.error.data(), ack.error.size(), "%s", e.what());
            try {
                (void)send_msg(conn, std::as_bytes(std::span(&ack, 1)), {});
            } catch (...) {
            }
        }
        tell(report, acked ? "guest error: " : "refused: ", e.what());
    }
    for (const int fd : fds) {
        if (fd >= 0) ::close(fd);
    }
    ::close(conn);
}

void Netback::serve(int conn, std::vector<int>& fds, bool& acked, const std::atomic<bool>& stop,
                    const std::function<void(const std::string&)>& report) {
    GrantAck ack;
    const auto refuse = [&](const std::string& why) {
        refused_.fetch_add(1);
        std::snprintf(ack.error.data(), ack.error.size(), "%s", why.c_str());
        (void)send_msg(conn, std::as_bytes(std::span(&ack, 1)), {});
        tell(report, "refused: ", why.c_str());
    };
    auto msg = recv_msg(conn, sizeof(GrantHello), fds, cfg_.handshake_ms);
    if (!msg) return refuse(msg.error());
    auto hello = parse_hello(*msg, fds.size());
    if (!hello) return refuse(hello.error());
    const GrantHello h = *hello;
    // The frontend holds the doorbells too: each checked as any peer's (an
    // eventfd, a kick not in semaphore mode), then read and signalled so that
    // it can block nothing here (notify/event_fd.h).
    std::optional<notify::EventFd> door[kHelloFds];
    for (const std::size_t k : {kRxKick, kRxCall, kTxKick, kTxCall}) {
        const bool kick = k == kRxKick || k == kTxKick;
        auto e = notify::EventFd::from_peer(std::exchange(fds[k], -1),
                                            kick ? notify::PeerUse::Kick : notify::PeerUse::Notify);
        if (!e) {
            return refuse("fd " + std::to_string(k) +
                          (e.error() == notify::NotifyError::Semaphore
                               ? " is a semaphore eventfd (a kick must drain)"
                               : " is not an eventfd"));
        }
        door[k].emplace(std::move(*e));
    }
    if (auto bad = check_data_fd(fds[kDataFd], h.data_bytes)) return refuse(*bad);
    Peer peer;
    if (cfg_.copy_via == mem::CopyVia::ProcessVm) {
        if (auto bad = identify_peer(conn, h, fds[kDataFd], peer)) return refuse(*bad);
    }
    auto shared = mem::MemoryRegion::map_fd(::dup(fds[kSharedFd]), h.shared_bytes, 0);
    if (!shared) return refuse("shared memfd: " + std::string(mem::to_string(shared.error())));
    if (!shared->sealed_against_shrink()) return refuse("shared memfd not sealed against shrinking");

    auto store = Store::open(cfg_.store_dir);
    if (!store) return refuse(store.error());
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.handshake_ms);
    auto mode = backend_handshake(*store, h.domid, cfg_.fallback, cfg_.offer_persistent, deadline);
    if (!mode) return refuse("handshake: " + mode.error());
    // From here a refusal also closes the backend's side in the store.
    const auto refuse_closing = [&](const std::string& why) {
        (void)close_side(*store, Side::Backend, h.domid);
        refuse(why);
    };

    mem::MemoryTable table;
    if (!table.add(mem::GuestAddr(0), shared->bytes())) {
        return refuse_closing("shared memory table");
    }
    mem::GrantRefs refs(shared->bytes().first(uint64_t{h.grant_entries} * sizeof(mem::GrantEntry)),
                        0, h.data_bytes / mem::kGrantPageBytes);
    const mem::GrantSource src{&refs, fds[kDataFd], peer.vm ? &*peer.vm : nullptr};
    // Declared before the device: the rings hand their chains back to them
    // when the device stops.
    auto rx_access = make_access(*mode, src, h.ring_size, cfg_.copy_via);
    auto tx_access = make_access(*mode, src, h.ring_size, cfg_.copy_via);
    if (!rx_access->ok() || !tx_access->ok()) {
        return refuse_closing("cannot reserve the grant slots (mmap failed)");
    }
    auto fmt = port::FrameFormat::create(h.frame_bytes);
    if (!fmt) return refuse_closing("frame format");
    port::GenLoopPort port(*fmt);

    const auto ring_at = [&](uint64_t off) {
        return ring::SplitRingAddrs{h.ring_size, mem::GuestAddr(off),
                                    mem::GuestAddr(off + ring_avail_off(h.ring_size)),
                                    mem::GuestAddr(off + ring_used_off(h.ring_size))};
    };
    backend::DeviceSetup setup;
    setup.features = kGrantFeatures;
    setup.mem = &table;
    setup.vrings.resize(2);
    setup.vrings[0] = backend::VringSetup{ring_at(h.rx_ring_off), {}, &*door[kRxKick],
                                          &*door[kRxCall], nullptr, true, rx_access.get(), {}};
    setup.vrings[1] = backend::VringSetup{ring_at(h.tx_ring_off), {}, &*door[kTxKick],
                                          &*door[kTxCall], nullptr, true, tx_access.get(), {}};
    backend::VhostNetOptions opt = cfg_.device;
    opt.offered_features = kGrantFeatures;
    auto dev = backend::VhostNet<port::GenLoopPort>::create(setup, opt, port);
    if (!dev) return refuse_closing("device: " + std::string(backend::to_string(dev.error())));
    // Stops the workers however this ends, before anything they use goes.
    struct Running {
        backend::VhostNet<port::GenLoopPort>& dev;
        port::GenLoopPort& port;
        ~Running() {
            port.stop();
            dev.stop();
        }
    } running{**dev, port};
    try {
        (*dev)->start();
    } catch (const std::system_error& e) {
        return refuse_closing(std::string("device workers: ") + e.what());
    }
    ack.ok = 1;
    std::snprintf(ack.mode.data(), ack.mode.size(), "%s", to_string(*mode));
    acked = true;
    (void)send_msg(conn, std::as_bytes(std::span(&ack, 1)), {});

    // Serve until the guest hangs up (or we are told to stop), or, for
    // process_vm copies, its process exits: its pid is then free for another
    // process, so no copy may name it from now on.
    pollfd p[2] = {{conn, POLLIN | POLLRDHUP, 0}, {peer.pidfd, POLLIN, 0}};
    while (!stop.load()) {
        if (::poll(p, peer.pidfd >= 0 ? 2 : 1, 50) <= 0) continue;
        if (p[1].revents != 0) {
            peer.vm->set_gone();
            break;
        }
        char b;
        if (p[0].revents != 0 && ::recv(conn, &b, 1, MSG_DONTWAIT) <= 0) break;
    }
    port.stop();
    (*dev)->stop();
    (*dev)->reset();  // every vring stopped: the chains it held go back, unwritten
    rx_access->release_all();  // a persistent pool unmaps and releases its grants here
    tx_access->release_all();
    const std::string line = counters(h.domid, *mode, **dev, port, *rx_access, *tx_access, refs,
                                      peer.vm && peer.vm->gone());
    (void)close_side(*store, Side::Backend, h.domid);
    report(line);
}

}  // namespace pvnet::grant
