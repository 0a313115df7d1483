#include "pvnet/grant/netfront.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "pvnet/grant/handshake.h"
#include "pvnet/grant/store.h"
#include "pvnet/grant/wire.h"
#include "pvnet/mem/grant_table.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::grant {

namespace {

constexpr uint32_t kPage = mem::kGrantPageBytes;
constexpr uint32_t kGrantEntries = 4096;
constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
constexpr uint64_t kPersistentTag = uint64_t{1} << 63;

uint64_t align_page(uint64_t v) { return (v + kPage - 1) & ~uint64_t{kPage - 1}; }

uint64_t thread_cpu_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

struct Netfront::Impl {
    NetfrontConfig cfg;
    GrantMode mode = GrantMode::Map;
    std::optional<Store> store;
    mem::MemoryRegion shared;
    mem::MemoryRegion data;
    mem::MemoryTable table;  // the driver's view of its own rings
    std::optional<mem::GrantTable> grants;
    std::unique_ptr<ring::SplitDriverQueue> rxq, txq;
    notify::EventFd rx_kick = notify::EventFd::adopt(-1), rx_call = notify::EventFd::adopt(-1),
                    tx_kick = notify::EventFd::adopt(-1), tx_call = notify::EventFd::adopt(-1);
    int sock = -1;
    std::vector<uint32_t> free_pages;  // frames for packets ("skbs")
    // Persistent pools: page frame and its grant, per slot; free slots.
    std::vector<uint32_t> tx_pool_frame, rx_pool_frame;
    std::vector<mem::GrantRef> tx_pool_ref, rx_pool_ref;
    std::vector<uint32_t> tx_pool_free;
    bool rx_pool_posted = false;  // the rx pool stays posted across rx phases
    /// Revokes the backend refused: retried, the page kept meanwhile.
    struct Deferred {
        mem::GrantRef ref;
        uint32_t frame;
    };
    std::vector<Deferred> deferred;
    PhaseResult r;
    uint64_t tx_seq = 0;
    std::optional<port::FrameFormat> fmt;

    Impl(mem::MemoryRegion s, mem::MemoryRegion d) : shared(std::move(s)), data(std::move(d)) {}
    std::byte* page(uint32_t frame) const { return data.host() + uint64_t{frame} * kPage; }
    bool persistent() const { return mode == GrantMode::Persistent; }

    /// Revoke, or keep the page aside until the backend lets go.
    void end_access(mem::GrantRef ref, uint32_t frame) {
        if (grants->end_access(ref)) {
            ++r.revokes;
            free_pages.push_back(frame);
        } else {
            ++r.revoke_busy;
            deferred.push_back({ref, frame});
        }
    }
    void retry_deferred() {
        for (std::size_t i = 0; i < deferred.size();) {
            if (grants->end_access(deferred[i].ref)) {
                ++r.revokes;
                free_pages.push_back(deferred[i].frame);
                deferred[i] = deferred.back();
                deferred.pop_back();
            } else {
                ++i;
            }
        }
    }
    static uint64_t token(mem::GrantRef ref, uint32_t frame) {
        return (uint64_t{ref} << 32) | frame;
    }
    /// Waits for an interrupt on `q` (call fd), at most 2 ms; false if the
    /// ring broke.
    bool wait_used(ring::SplitDriverQueue& q, const notify::EventFd& call) {
        if (q.enable_cb()) (void)call.wait(2000);
        (void)call.consume();
        q.disable_cb();
        return !q.broken();
    }

    void reap_tx(uint64_t& done) {
        ring::UsedBuf u;
        while (txq->get_used(u)) {
            ++done;
            if ((u.token & kPersistentTag) != 0) {
                tx_pool_free.push_back(static_cast<uint32_t>(u.token & 0xffffffffu));
            } else {
                end_access(static_cast<mem::GrantRef>(u.token >> 32),
                           static_cast<uint32_t>(u.token & 0xffffffffu));
            }
        }
    }

    bool post_tx(port::FrameGen& gen) {
        if (free_pages.empty() || txq->num_free() == 0) return false;
        const uint32_t skb = free_pages.back();
        std::byte* p = page(skb);
        std::memset(p, 0, kHdr);
        const uint32_t len = kHdr + gen.write_frame(tx_seq, p + kHdr, kPage - kHdr);
        ring::Buf b;
        b.len = len;
        uint64_t tok;
        if (persistent()) {
            if (tx_pool_free.empty()) return false;
            const uint32_t slot = tx_pool_free.back();
            tx_pool_free.pop_back();
            const uint32_t n = cfg.copy_whole_page ? kPage : len;
            std::memcpy(page(tx_pool_frame[slot]), p, n);
            r.copy_bytes += n;
            b.gpa = mem::GuestAddr(mem::grant_addr(tx_pool_ref[slot], 0));
            tok = kPersistentTag | slot;
        } else {
            auto ref = grants->grant(0, skb, /*readonly=*/true);
            if (!ref) return false;
            free_pages.pop_back();
            ++r.grants;
            b.gpa = mem::GuestAddr(mem::grant_addr(*ref, 0));
            tok = token(*ref, skb);
        }
        if (txq->add(std::span<const ring::Buf>(&b, 1), {}, tok) != ring::AddStatus::Ok) return false;
        ++tx_seq;
        return true;
    }

    /// Grants a fresh page and posts it (without persistent grants).
    bool post_rx() {
        if (persistent() || rxq->num_free() == 0 || free_pages.empty()) return false;
        ring::Buf b;
        b.len = kPage;
        const uint32_t frame = free_pages.back();
        auto ref = grants->grant(0, frame, /*readonly=*/false);
        if (!ref) return false;
        free_pages.pop_back();
        ++r.grants;
        b.gpa = mem::GuestAddr(mem::grant_addr(*ref, 0));
        return rxq->add({}, std::span<const ring::Buf>(&b, 1), token(*ref, frame)) ==
               ring::AddStatus::Ok;
    }
    /// Posts a persistent pool page: the slot is the token.
    bool post_rx_slot(uint32_t slot) {
        ring::Buf b{mem::GuestAddr(mem::grant_addr(rx_pool_ref[slot], 0)), kPage};
        return rxq->add({}, std::span<const ring::Buf>(&b, 1), kPersistentTag | slot) ==
               ring::AddStatus::Ok;
    }
};

Netfront::Netfront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Netfront::~Netfront() { close(); }

GrantMode Netfront::mode() const noexcept { return impl_->mode; }

Result<std::unique_ptr<Netfront>, std::string> Netfront::connect(const NetfrontConfig& cfg) {
    if (auto d = check_domid(cfg.domid); !d) return unexpected(d.error());
    if (cfg.ring_size == 0 || cfg.ring_size > kMaxRingSize ||
        (cfg.ring_size & (cfg.ring_size - 1)) != 0) {
        return unexpected(std::string("ring size must be a power of two up to 1024"));
    }
    auto fmt = port::FrameFormat::create(cfg.frame_bytes);
    if (!fmt) return unexpected(std::string("frame size out of range"));
    const uint16_t n = cfg.ring_size;
    const uint64_t table_bytes = uint64_t{kGrantEntries} * sizeof(mem::GrantEntry);
    const uint64_t rx_off = align_page(table_bytes);
    const uint64_t tx_off = align_page(rx_off + ring_bytes(n));
    const uint64_t shared_bytes = align_page(tx_off + ring_bytes(n));
    // Pools (2 × ring) and packet pages (ring per direction in flight, and
    // as many again for revokes the backend delays).
    const uint32_t frames = 6u * n;
    auto shared = mem::MemoryRegion::create(shared_bytes, "pvnet-netfront-shared");
    auto data = mem::MemoryRegion::create(uint64_t{frames} * kPage, "pvnet-netfront-data");
    if (!shared || !data) return unexpected(std::string("memfd_create failed"));
    auto impl = std::make_unique<Impl>(std::move(*shared), std::move(*data));
    Impl& m = *impl;
    m.cfg = cfg;
    m.fmt.emplace(*fmt);
    if (!m.table.add(mem::GuestAddr(0), m.shared.bytes())) {
        return unexpected(std::string("memory table"));
    }
    m.grants.emplace(m.shared.bytes().first(table_bytes));
    const auto ring_at = [&](uint64_t off) {
        ring::DriverQueueConfig c;
        c.addrs = ring::SplitRingAddrs{n, mem::GuestAddr(off),
                                       mem::GuestAddr(off + ring_avail_off(n)),
                                       mem::GuestAddr(off + ring_used_off(n))};
        c.event_idx = true;
        return ring::SplitDriverQueue::create(m.table, c);
    };
    auto rxq = ring_at(rx_off);
    auto txq = ring_at(tx_off);
    if (!rxq || !txq) return unexpected(std::string("ring setup"));
    m.rxq = std::move(*rxq);
    m.txq = std::move(*txq);
    for (notify::EventFd* e : {&m.rx_kick, &m.rx_call, &m.tx_kick, &m.tx_call}) {
        auto fd = notify::EventFd::create();
        if (!fd) return unexpected(std::string("eventfd"));
        *e = std::move(*fd);
    }
    for (uint32_t f = frames; f-- > 2u * n;) m.free_pages.push_back(f);
    // Every packet page can wait on a delayed revoke: no allocation then.
    m.deferred.reserve(frames);

    auto store = Store::open(cfg.store_dir);
    if (!store) return unexpected(store.error());
    m.store.emplace(std::move(*store));
    m.sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (m.sock < 0 || cfg.socket_path.size() >= sizeof addr.sun_path) {
        return unexpected(std::string("socket"));
    }
    std::memcpy(addr.sun_path, cfg.socket_path.c_str(), cfg.socket_path.size() + 1);
    if (::connect(m.sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
        return unexpected("connect " + cfg.socket_path + ": " + std::strerror(errno));
    }
    GrantHello h;
    h.domid = cfg.domid;
    h.pid = static_cast<uint32_t>(::getpid());
    h.ring_size = n;
    h.frame_bytes = cfg.frame_bytes;
    h.grant_entries = kGrantEntries;
    h.shared_bytes = shared_bytes;
    h.data_bytes = m.data.size();
    h.remote_base = reinterpret_cast<uint64_t>(m.data.host());
    h.rx_ring_off = rx_off;
    h.tx_ring_off = tx_off;
    if (cfg.edit_hello) cfg.edit_hello(h);
    // The backend holds the doorbells from here: its kicks and calls may block nothing of ours.
    for (const notify::EventFd* e : {&m.rx_kick, &m.rx_call, &m.tx_kick, &m.tx_call}) {
        e->hand_over();
    }
    const int fds[kHelloFds] = {m.shared.fd(), m.data.fd(), m.rx_kick.fd(),
                                m.rx_call.fd(), m.tx_kick.fd(), m.tx_call.fd()};
    if (auto s = send_msg(m.sock, std::as_bytes(std::span(&h, 1)), fds); !s) {
        return unexpected("hello: " + s.error());
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg.handshake_ms);
    // The backend's answer: its ack, or the refusal it sends at once when
    // the hello does not pass (the store then never moves).
    const auto read_ack = [&](int timeout_ms) -> Result<GrantAck, std::string> {
        std::vector<int> got;
        auto reply = recv_msg(m.sock, sizeof(GrantAck), got, timeout_ms);
        for (const int fd : got) ::close(fd);
        if (!reply) return unexpected("ack: " + reply.error());
        GrantAck a;
        if (reply->size() != sizeof a) return unexpected(std::string("ack: wrong size"));
        std::memcpy(&a, reply->data(), sizeof a);
        a.error.back() = '\0';
        a.mode.back() = '\0';
        return a;
    };
    const auto refused = [](const GrantAck& a) {
        return a.magic != kHelloMagic || a.ok != 1;
    };
    auto mode = frontend_handshake(*m.store, cfg.domid, cfg.offer_persistent, deadline);
    if (!mode) {
        if (auto early = read_ack(0); early && refused(*early)) {
            return unexpected("backend refused: " + std::string(early->error.data()));
        }
        return unexpected("handshake: " + mode.error());
    }
    m.mode = *mode;
    auto reply = read_ack(cfg.handshake_ms);
    if (!reply) return unexpected(reply.error());
    const GrantAck& ack = *reply;
    if (refused(ack)) return unexpected("backend refused: " + std::string(ack.error.data()));
    if (std::string(ack.mode.data()) != to_string(m.mode)) {
        return unexpected("backend runs " + std::string(ack.mode.data()) + ", the store says " +
                          to_string(m.mode));
    }
    if (m.persistent()) {
        // The pools: ring-size pages per direction, granted once, kept.
        for (uint32_t s = 0; s < n; ++s) {
            auto t = m.grants->grant(0, s, /*readonly=*/true);
            auto rx = m.grants->grant(0, n + s, /*readonly=*/false);
            if (!t || !rx) return unexpected(std::string("grant table too small for the pools"));
            m.tx_pool_frame.push_back(s);
            m.tx_pool_ref.push_back(*t);
            m.rx_pool_frame.push_back(n + s);
            m.rx_pool_ref.push_back(*rx);
            m.tx_pool_free.push_back(s);
        }
    }
    return std::unique_ptr<Netfront>(new Netfront(std::move(impl)));
}

Result<PhaseResult, std::string> Netfront::run(Direction dir, uint64_t max_frames,
                                               std::chrono::milliseconds duration) {
    Impl& m = *impl_;
    m.r = PhaseResult{};
    const auto start = Clock::now();
    const auto end = start + duration;
    const uint64_t cpu_start = thread_cpu_ns();
    const uint32_t frame_bytes = m.fmt->frame_bytes();
    if (dir == Direction::Tx) {
        port::FrameGen gen(*m.fmt);
        uint64_t done = 0, posted = 0;
        uint32_t spins = 0;
        while (done < max_frames) {
            m.reap_tx(done);
            m.retry_deferred();
            const bool time_up = (++spins & 63u) == 0 && Clock::now() >= end;
            if (time_up) max_frames = posted;  // stop posting; drain what is out
            bool added = false;
            while (posted < max_frames && m.post_tx(gen)) {
                ++posted;
                added = true;
            }
            if (added && m.txq->kick_prepare()) m.tx_kick.signal();
            if (done < posted && !added) {
                if (!m.wait_used(*m.txq, m.tx_call)) {
                    return unexpected(std::string("tx ring broken: ") +
                                      std::string(ring::to_string(m.txq->broken_reason())));
                }
                if (Clock::now() > end + std::chrono::seconds(2)) {
                    return unexpected("tx: the backend completed " + std::to_string(done) +
                                      " of " + std::to_string(posted) + " frames");
                }
            }
            if (done >= posted && (posted >= max_frames)) break;
        }
        m.r.frames = done;
    } else {
        port::FrameSink sink(*m.fmt, 0);
        if (m.persistent() && !m.rx_pool_posted) {
            m.rx_pool_posted = true;
            for (uint32_t s = 0; s < m.rx_pool_ref.size(); ++s) {
                if (m.rxq->num_free() == 0 || !m.post_rx_slot(s)) break;
            }
            if (m.rxq->kick_prepare()) m.rx_kick.signal();
        }
        uint32_t spins = 0;
        while (sink.stats().sink_pkts < max_frames) {
            if ((++spins & 63u) == 0 && Clock::now() >= end) break;
            bool added = false;
            while (m.post_rx()) added = true;
            if (added && m.rxq->kick_prepare()) m.rx_kick.signal();
            ring::UsedBuf u;
            bool got = false;
            bool reposted = false;
            while (sink.stats().sink_pkts < max_frames && m.rxq->get_used(u)) {
                got = true;
                if (u.len < kHdr) {
                    ++m.r.sink_bad;
                } else if ((u.token & kPersistentTag) != 0) {
                    const auto slot = static_cast<uint32_t>(u.token & 0xffffffffu);
                    // Copied out of the pool page into a packet page (the skb).
                    const uint32_t skb = m.free_pages.back();
                    const uint32_t n = m.cfg.copy_whole_page ? kPage : u.len;
                    std::memcpy(m.page(skb), m.page(m.rx_pool_frame[slot]), n);
                    m.r.copy_bytes += n;
                    (void)sink.check_frame(m.page(skb) + kHdr, u.len - kHdr);
                    reposted |= m.post_rx_slot(slot);
                } else {
                    const auto frame = static_cast<uint32_t>(u.token & 0xffffffffu);
                    (void)sink.check_frame(m.page(frame) + kHdr, u.len - kHdr);
                    m.end_access(static_cast<mem::GrantRef>(u.token >> 32), frame);
                }
            }
            if (reposted && m.rxq->kick_prepare()) m.rx_kick.signal();
            m.retry_deferred();
            if (!got && !m.wait_used(*m.rxq, m.rx_call)) {
                return unexpected(std::string("rx ring broken: ") +
                                  std::string(ring::to_string(m.rxq->broken_reason())));
            }
        }
        const port::SinkStats st = sink.stats();
        m.r.frames = st.sink_pkts;
        m.r.sink_lost = st.sink_lost;
        m.r.sink_bad += st.sink_drop_corrupt + st.sink_drop_bad_len + st.sink_duplicates;
    }
    m.r.bytes = m.r.frames * frame_bytes;
    m.r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    m.r.cpu_ns = thread_cpu_ns() - cpu_start;
    return m.r;
}

void Netfront::close() {
    if (!impl_ || impl_->sock < 0) return;
    (void)close_side(*impl_->store, Side::Frontend, impl_->cfg.domid);
    ::close(impl_->sock);
    impl_->sock = -1;
}

}  // namespace pvnet::grant
