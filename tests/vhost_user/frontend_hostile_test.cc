// Hostile back-ends against vhost_user::Frontend (issue 14), the mirror image of
// hostile_frontend_test.cc: a scripted fake back-end (a thread on a unix socket) reads each
// request whole and answers as a real one would, except for one defect at one chosen
// request. Every case asserts the exact FrontendFail and its counter, an error naming the
// request, a bounded wait, no fd kept by the Frontend, and that the same Frontend then
// serves a well-behaved back-end.
#include <random>

#include "fake_backend.h"
#include "pvnet/vhost_user/frontend.h"

namespace pvnet::vhost_user::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kReplyMs = 300;
constexpr milliseconds kBound{3000};  ///< any failing call returns within this

enum class Phase : uint8_t { Connect, Start, Stop, Idle, None };

struct Outcome {
    Phase phase = Phase::None;  ///< the call that failed (None: connect, start, stop all worked)
    std::optional<FrontendError> err;
    milliseconds took{0};  ///< of that call
};

class FrontendHostile : public ::testing::Test {
protected:
    FrontendHostile() {
        for (int i = 0; i < 8; ++i) {
            efd_.push_back(std::move(notify::EventFd::create().value()));
            // As the Frontend hands them over: their signalling rings (an fd
            // each, the EventFd's) are then in every case's fd baseline.
            efd_.back().hand_over();
        }
    }
    ~FrontendHostile() override { ::unlink(path_.c_str()); }

    std::unique_ptr<Frontend> make(bool server = false, uint32_t connect_ms = 2000) {
        FrontendConfig c;
        c.path = path_;
        c.server = server;
        c.reply_timeout_ms = kReplyMs;
        c.connect_timeout_ms = connect_ms;
        auto fe = Frontend::create(c);
        EXPECT_TRUE(fe) << (fe ? "" : fe.error());
        return fe ? std::move(*fe) : nullptr;
    }
    backend::DeviceSetup device(uint64_t features, std::size_t pairs = 1) const {
        backend::DeviceSetup d;
        d.features = features;
        for (std::size_t i = 0; i < 2 * pairs; ++i) {
            backend::VringSetup v;
            v.addrs = ring::split_ring_addrs_at(mem::GuestAddr(kGpa + i * kRingArea), kRingSize);
            v.kick = &efd_[2 * i];
            v.call = &efd_[2 * i + 1];
            d.vrings.push_back(v);
        }
        return d;
    }
    GuestMemory memory() const {
        return GuestMemory{region_.fd(), kGpa, region_.size(), region_.host()};
    }

    /// connect, start, then stop (or, `idle`, wait for what the back-end does next).
    Outcome drive(Frontend& fe, bool idle = false, std::size_t pairs = 1) {
        Outcome o;
        auto t = Clock::now();
        const auto done = [&](Phase p, std::optional<FrontendError> e) {
            o.phase = p;
            o.err = std::move(e);
            o.took = std::chrono::duration_cast<milliseconds>(Clock::now() - t);
            return o;
        };
        auto f = fe.connect(kWanted);
        if (!f) return done(Phase::Connect, f.error());
        t = Clock::now();
        if (auto s = fe.start(device(*f, pairs), memory()); !s)
            return done(Phase::Start, s.error());
        t = Clock::now();
        if (idle) return fe.alive(2000) ? o : done(Phase::Idle, std::nullopt);
        if (auto s = fe.stop(); !s) return done(Phase::Stop, s.error());
        return o;
    }

    /// The same Frontend against a well-behaved back-end: connect, start, stop.
    void serves_good_backend(std::unique_ptr<Frontend>& fe, std::unique_ptr<FakeBackend>& bad,
                             const Script& hostile) {
        const Script good{.protocol = hostile.protocol, .client = hostile.client};
        auto be = std::make_unique<FakeBackend>(path_, good);
        const uint64_t fails = fe->stats().fails.total();
        const Outcome o = drive(*fe);
        bad.reset();  // a live (nacked) connection was replaced by connect()
        EXPECT_EQ(o.phase, Phase::None) << (o.err ? o.err->text : "");
        EXPECT_EQ(fe->stats().fails.total(), fails);
        EXPECT_TRUE(fe->connected());
        fe.reset();  // the back-end sees the close and ends
        be.reset();
    }

    std::string path_ = socket_path("fe_hostile");
    mem::MemoryRegion region_ =
        std::move(mem::MemoryRegion::create(kMemBytes, "fe_hostile").value());
    std::vector<notify::EventFd> efd_;  ///< kick, call per vring (two pairs at most)
};

// ---- One defect per case -----------------------------------------------------------------

struct Case {
    std::string name;
    Script script;
    Phase phase;
    FrontendFail fail;
    std::string needle;  ///< the error text names this (the request, or the feature)
    std::string detail = {};
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
    using R = Request;
    using D = Defect;
    using F = FrontendFail;
    const auto at = [](R r, D d, int nth = 1, uint64_t proto = kProto) {
        return Script{.protocol = proto, .at = r, .nth = nth, .defect = d};
    };
    std::vector<Case> v = {
        {"wrong_request", at(R::GetFeatures, D::WrongRequest), Phase::Connect, F::WrongRequest,
         "GET_FEATURES"},
        {"no_reply_flag", at(R::GetFeatures, D::NoReplyFlag), Phase::Connect, F::NotReply,
         "GET_FEATURES"},
        {"version_2", at(R::GetFeatures, D::Version2), Phase::Connect, F::BadVersion,
         "GET_FEATURES", "version 2"},
        {"short_u64", at(R::GetFeatures, D::Short), Phase::Connect, F::BadSize, "GET_FEATURES",
         "4 bytes"},
        {"long_u64", at(R::GetFeatures, D::Long), Phase::Connect, F::BadSize, "GET_FEATURES",
         "16 bytes"},
        {"silence", at(R::GetFeatures, D::Silence), Phase::Connect, F::Timeout, "GET_FEATURES"},
        {"header_then_silence", at(R::GetProtocolFeatures, D::HeaderThenSilence), Phase::Connect,
         F::Timeout, "GET_PROTOCOL_FEATURES"},
        {"header_then_close", at(R::GetProtocolFeatures, D::HeaderThenClose), Phase::Connect,
         F::Closed, "GET_PROTOCOL_FEATURES"},
        {"three_fds", at(R::GetFeatures, D::Fds3), Phase::Connect, F::BadFds, "GET_FEATURES",
         "3 fds"},
        {"fds_truncated", at(R::GetFeatures, D::Fds12), Phase::Connect, F::BadFds, "GET_FEATURES",
         "(truncated)"},
        {"fd_with_ack", at(R::SetOwner, D::Fd1), Phase::Connect, F::BadFds, "SET_OWNER", "1 fds"},
        {"ack_wrong_request", at(R::SetFeatures, D::WrongRequest), Phase::Connect, F::WrongRequest,
         "SET_FEATURES"},
        {"queue_num_0", at(R::GetQueueNum, D::Value), Phase::Connect, F::BadPayload,
         "GET_QUEUE_NUM"},
        {"queue_num_huge", Script{.at = R::GetQueueNum, .defect = D::Value, .value = 0x8001},
         Phase::Connect, F::BadPayload, "GET_QUEUE_NUM"},
        {"no_protocol_features", Script{.features = kWanted}, Phase::Connect, F::Features,
         "PROTOCOL_FEATURES"},
        {"no_version_1",
         Script{.features = kOffered & ~virtio::feature_mask(virtio::VIRTIO_F_VERSION_1)},
         Phase::Connect, F::Features, "VERSION_1"},
        {"nack_set_features", at(R::SetFeatures, D::Nack), Phase::Connect, F::Nack, "SET_FEATURES"},
        {"inflight_no_fd", at(R::GetInflightFd, D::InflightNoFd, 1, kProtoInflight), Phase::Start,
         F::BadFds, "GET_INFLIGHT_FD", "0 fds"},
        {"inflight_two_fds", at(R::GetInflightFd, D::InflightTwoFds, 1, kProtoInflight),
         Phase::Start, F::BadFds, "GET_INFLIGHT_FD", "2 fds"},
        {"inflight_beyond_fd", at(R::GetInflightFd, D::InflightBeyondFd, 1, kProtoInflight),
         Phase::Start, F::BadPayload, "GET_INFLIGHT_FD"},
        {"inflight_offset_overflow",
         at(R::GetInflightFd, D::InflightOffsetOverflow, 1, kProtoInflight), Phase::Start,
         F::BadPayload, "GET_INFLIGHT_FD"},
        {"inflight_too_small", at(R::GetInflightFd, D::InflightTooSmall, 1, kProtoInflight),
         Phase::Start, F::BadPayload, "GET_INFLIGHT_FD"},
        {"inflight_wrong_request", at(R::GetInflightFd, D::WrongRequest, 1, kProtoInflight),
         Phase::Start, F::WrongRequest, "GET_INFLIGHT_FD"},
        {"set_inflight_ack_fd", at(R::SetInflightFd, D::Fd1, 1, kProtoInflight), Phase::Start,
         F::BadFds, "SET_INFLIGHT_FD"},
        {"nack_mem_table", at(R::SetMemTable, D::Nack, 1, kProtoInflight), Phase::Start, F::Nack,
         "SET_MEM_TABLE"},
        {"nack_vring_addr", at(R::SetVringAddr, D::Nack, 2), Phase::Start, F::Nack,
         "SET_VRING_ADDR"},
        {"ack_short", at(R::SetVringAddr, D::Short, 2), Phase::Start, F::BadSize, "SET_VRING_ADDR"},
        {"ack_not_reply", at(R::SetVringKick, D::NoReplyFlag), Phase::Start, F::NotReply,
         "SET_VRING_KICK"},
        {"ack_silence", at(R::SetVringCall, D::Silence, 2), Phase::Start, F::Timeout,
         "SET_VRING_CALL"},
        {"ack_header_then_silence", at(R::SetVringEnable, D::HeaderThenSilence, 2), Phase::Start,
         F::Timeout, "SET_VRING_ENABLE"},
        {"vring_base_wrong_index", Script{.at = R::GetVringBase, .defect = D::Value, .value = 1},
         Phase::Stop, F::BadPayload, "GET_VRING_BASE", "vring 1"},
        {"vring_base_above_u16",
         Script{.at = R::GetVringBase,
                .nth = 2,
                .defect = D::Value,
                .value = 1 | uint64_t{0x10000} << 32},
         Phase::Stop, F::BadPayload, "GET_VRING_BASE"},
        {"vring_base_wrong_request", at(R::GetVringBase, D::WrongRequest), Phase::Stop,
         F::WrongRequest, "GET_VRING_BASE"},
        {"vring_base_fds", at(R::GetVringBase, D::Fds3, 2), Phase::Stop, F::BadFds,
         "GET_VRING_BASE"},
        {"unsolicited_idle", at(R::SetVringEnable, D::UnsolicitedAfter, 2), Phase::Idle,
         F::Unexpected, ""},
        {"close_idle", at(R::SetVringEnable, D::CloseAfter, 2), Phase::Idle, F::Closed, ""},
        {"server_wrong_request",
         Script{.at = R::GetFeatures, .defect = D::WrongRequest, .client = true}, Phase::Connect,
         F::WrongRequest, "GET_FEATURES"},
        {"server_ack_silence", Script{.at = R::SetMemTable, .defect = D::Silence, .client = true},
         Phase::Start, F::Timeout, "SET_MEM_TABLE"},
    };
    // The back-end closing at each stage, instead of answering (inflight on: every request).
    const struct {
        R r;
        int nth;
        Phase phase;
        R named;
    } stages[] = {
        {R::GetFeatures, 1, Phase::Connect, R::GetFeatures},
        {R::GetProtocolFeatures, 1, Phase::Connect, R::GetProtocolFeatures},
        {R::SetProtocolFeatures, 1, Phase::Connect, R::GetQueueNum},  // it has no answer
        {R::GetQueueNum, 1, Phase::Connect, R::GetQueueNum},
        {R::SetOwner, 1, Phase::Connect, R::SetOwner},
        {R::SetFeatures, 1, Phase::Connect, R::SetFeatures},
        {R::GetInflightFd, 1, Phase::Start, R::GetInflightFd},
        {R::SetInflightFd, 1, Phase::Start, R::SetInflightFd},
        {R::SetMemTable, 1, Phase::Start, R::SetMemTable},
        {R::SetVringNum, 1, Phase::Start, R::SetVringNum},
        {R::SetVringBase, 2, Phase::Start, R::SetVringBase},
        {R::SetVringAddr, 1, Phase::Start, R::SetVringAddr},
        {R::SetVringKick, 2, Phase::Start, R::SetVringKick},
        {R::SetVringCall, 1, Phase::Start, R::SetVringCall},
        {R::SetVringEnable, 2, Phase::Start, R::SetVringEnable},
        {R::GetVringBase, 1, Phase::Stop, R::GetVringBase},
        {R::GetVringBase, 2, Phase::Stop, R::GetVringBase},
    };
    for (const auto& s : stages) {
        v.push_back({"close_at_" + std::string(to_string(s.r)) + "_" + std::to_string(s.nth),
                     at(s.r, D::Close, s.nth, kProtoInflight), s.phase, F::Closed,
                     std::string(to_string(s.named))});
    }
    return v;
}

class FrontendHostileReply : public FrontendHostile, public ::testing::WithParamInterface<Case> {};

TEST_P(FrontendHostileReply, FailsCleanlyThenServesAGoodOne) {
    const Case& c = GetParam();
    auto fe = make(c.script.client);
    ASSERT_NE(fe, nullptr);
    const int base = count_fds();
    auto be = std::make_unique<FakeBackend>(path_, c.script);
    const Outcome o = drive(*fe, c.phase == Phase::Idle);
    const bool nack = c.fail == FrontendFail::Nack;
    if (!nack) be.reset();  // the Frontend closed its end: the back-end is gone

    ASSERT_EQ(o.phase, c.phase) << (o.err ? o.err->text : "no error");
    EXPECT_LT(o.took, kBound);
    if (c.fail == FrontendFail::Timeout) {
        EXPECT_GE(o.took, milliseconds(kReplyMs - 10));
    }
    if (c.phase != Phase::Idle) {
        ASSERT_TRUE(o.err);
        EXPECT_EQ(o.err->fail, c.fail) << to_string(o.err->fail) << ": " << o.err->text;
        EXPECT_NE(o.err->text.find(c.needle), std::string::npos) << o.err->text;
        EXPECT_NE(o.err->text.find(c.detail), std::string::npos) << o.err->text;
    }
    const FrontendStats& st = fe->stats();
    EXPECT_EQ(st.fails.get(c.fail), 1u);
    EXPECT_EQ(st.fails.total(), 1u);
    // A Nack is a proper answer: the connection stays, in step (nothing left unread).
    EXPECT_EQ(fe->connected(), nack);
    EXPECT_EQ(st.losses.get(), nack ? 0u : 1u);
    EXPECT_EQ(count_fds(), base + (fe->has_inflight() ? 1 : 0) + (nack ? 2 : 0));
    if (nack) {
        EXPECT_TRUE(fe->alive(50));
        if (c.phase == Phase::Start) {  // the same connection takes the device after all
            EXPECT_TRUE(fe->start(device(fe->features()), memory()));
            EXPECT_TRUE(fe->stop());
            EXPECT_EQ(st.fails.total(), 1u);
        }
    }
    serves_good_backend(fe, be, c.script);
}

INSTANTIATE_TEST_SUITE_P(Defects, FrontendHostileReply, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// ---- Restarts and connection timeouts ----------------------------------------------------

TEST_F(FrontendHostile, RestartedBackendOfferingFewerFeatures) {
    for (const bool server : {false, true}) {
        SCOPED_TRACE(server ? "server" : "client");
        auto fe = make(server);
        auto be = std::make_unique<FakeBackend>(path_, Script{.at = Request::SetVringEnable,
                                                              .nth = 2,
                                                              .defect = Defect::CloseAfter,
                                                              .client = server});
        ASSERT_EQ(drive(*fe, true).phase, Phase::Idle);
        be.reset();
        const int base = count_fds();
        be = std::make_unique<FakeBackend>(
            path_, Script{.features = kOffered & ~virtio::feature_mask(virtio::VIRTIO_NET_F_CSUM),
                          .client = server});
        const auto t0 = Clock::now();
        const auto s = fe->reconnect();
        EXPECT_LT(Clock::now() - t0, kBound);
        be.reset();
        ASSERT_FALSE(s);
        EXPECT_EQ(s.error().fail, FrontendFail::Features) << s.error().text;
        EXPECT_NE(s.error().text.find("no longer"), std::string::npos) << s.error().text;
        EXPECT_EQ(fe->stats().fails.get(FrontendFail::Features), 1u);
        EXPECT_FALSE(fe->connected());
        EXPECT_EQ(count_fds(), base);
        // A back-end with every feature again: the device restarts from the rings' used.idx.
        be = std::make_unique<FakeBackend>(path_, Script{.client = server});
        EXPECT_TRUE(fe->reconnect());
        EXPECT_EQ(fe->stats().reconnects.get(), 1u);
        EXPECT_EQ(fe->stats().base_from_used.get(), 2u);
        EXPECT_TRUE(fe->stop());
        fe.reset();
    }
}

TEST_F(FrontendHostile, RestartedBackendOfferingFewerQueues) {
    auto fe = make();
    auto be = std::make_unique<FakeBackend>(
        path_,
        Script{
            .queue_num = 2, .at = Request::SetVringEnable, .nth = 4, .defect = Defect::CloseAfter});
    ASSERT_EQ(drive(*fe, true, 2).phase, Phase::Idle);
    be.reset();
    ASSERT_EQ(fe->queue_num(), 2u);
    const int base = count_fds();
    be = std::make_unique<FakeBackend>(path_, Script{.queue_num = 1});
    const auto s = fe->reconnect();
    be.reset();
    ASSERT_FALSE(s) << "four vrings handed to a back-end with one queue pair";
    EXPECT_EQ(s.error().fail, FrontendFail::Features) << s.error().text;
    EXPECT_NE(s.error().text.find("queue pairs"), std::string::npos) << s.error().text;
    EXPECT_FALSE(fe->connected());
    EXPECT_EQ(count_fds(), base);
    be = std::make_unique<FakeBackend>(path_, Script{.queue_num = 2});
    EXPECT_TRUE(fe->reconnect());
    fe.reset();
}

// The driver queue does not lay out descriptors in ring order, so IN_ORDER
// (offered by DPDK's vhost and pvnet serve) is never acked, even if asked for.
TEST_F(FrontendHostile, InOrderIsNeverAcked) {
    const uint64_t in_order = virtio::feature_mask(virtio::VIRTIO_F_IN_ORDER);
    auto fe = make();
    auto be = std::make_unique<FakeBackend>(path_, Script{.features = kOffered | in_order});
    const auto f = fe->connect(kWanted | in_order);
    ASSERT_TRUE(f) << f.error().text;
    EXPECT_EQ(*f, kWanted);
    fe.reset();
}

TEST_F(FrontendHostile, ConnectAfterABackendThatOfferedLess) {
    // connect() negotiates afresh (reconnect() is the one bound to the old features).
    auto fe = make();
    auto less = std::make_unique<FakeBackend>(
        path_, Script{.features = kOffered & ~virtio::feature_mask(virtio::VIRTIO_NET_F_CSUM)});
    auto f = fe->connect(kWanted);
    ASSERT_TRUE(f);
    EXPECT_EQ(*f, kWanted & ~virtio::feature_mask(virtio::VIRTIO_NET_F_CSUM));
    ASSERT_TRUE(fe->start(device(*f), memory()));
    auto all = std::make_unique<FakeBackend>(path_, Script{});
    f = fe->connect(kWanted);
    less.reset();
    ASSERT_TRUE(f) << f.error().text;
    EXPECT_EQ(*f, kWanted);
    EXPECT_EQ(fe->stats().fails.total(), 0u);
    // The device laid out for the old features is not restarted onto the new ones.
    const auto s = fe->reconnect();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().fail, FrontendFail::Features) << s.error().text;
    all.reset();
    all = std::make_unique<FakeBackend>(path_, Script{});
    f = fe->connect(kWanted);
    ASSERT_TRUE(f) << f.error().text;
    EXPECT_TRUE(fe->start(device(*f), memory()));
    fe.reset();
}

/// connect() with nothing (or nothing that accepts) at the other end.
void expect_connect_timeout(Frontend& fe, std::string_view needle) {
    const int base = count_fds();
    const auto t0 = Clock::now();
    const auto f = fe.connect(kWanted);
    const auto took = Clock::now() - t0;
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error().fail, FrontendFail::Connect) << f.error().text;
    EXPECT_NE(f.error().text.find(needle), std::string::npos) << f.error().text;
    EXPECT_NE(f.error().text.find(fe.path()), std::string::npos) << f.error().text;
    EXPECT_GE(took, 290ms);
    EXPECT_LT(took, kBound);
    EXPECT_EQ(fe.stats().fails.get(FrontendFail::Connect), 1u);
    EXPECT_EQ(fe.stats().losses.get(), 0u);
    EXPECT_EQ(count_fds(), base);
}

TEST_F(FrontendHostile, ConnectTimeoutWhenNothingListens) {
    auto fe = make(false, 300);
    expect_connect_timeout(*fe, "no back-end listening");
    std::unique_ptr<FakeBackend> none;
    serves_good_backend(fe, none, Script{});
}

TEST_F(FrontendHostile, ConnectTimeoutWhenTheBacklogIsFull) {
    // A wedged back-end: it listens, never accepts, and its backlog is full.
    const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(l, 0), 0);
    FrontEnd filler(path_);
    ASSERT_TRUE(filler.connected());
    auto fe = make(false, 300);
    expect_connect_timeout(*fe, "no back-end listening");
    filler.close();
    ::close(l);
    std::unique_ptr<FakeBackend> none;
    serves_good_backend(fe, none, Script{});
}

TEST_F(FrontendHostile, ServerConnectTimeoutWhenNoBackendConnects) {
    auto fe = make(true, 300);
    expect_connect_timeout(*fe, "no back-end connected");
    std::unique_ptr<FakeBackend> none;
    serves_good_backend(fe, none, Script{.client = true});
}

// ---- Random defects ----------------------------------------------------------------------

// Any defect (random bytes among them) at any request: an error with a reason or a
// harmless answer, never a crash, a hang or a kept fd; the next back-end is served.
TEST_F(FrontendHostile, RandomDefectsAtRandomRequests) {
    using R = Request;
    constexpr R kAt[] = {
        R::GetFeatures,  R::GetProtocolFeatures, R::SetProtocolFeatures, R::GetQueueNum,
        R::SetOwner,     R::SetFeatures,         R::GetInflightFd,       R::SetInflightFd,
        R::SetMemTable,  R::SetVringNum,         R::SetVringBase,        R::SetVringAddr,
        R::SetVringKick, R::SetVringCall,        R::SetVringEnable,      R::GetVringBase};
    std::mt19937_64 rng(14);
    for (int i = 0; i < 60; ++i) {
        auto fe = make();
        const int base = count_fds();
        Script s{.protocol = rng() % 2 ? kProto : kProtoInflight,
                 .at = kAt[rng() % std::size(kAt)],
                 .nth = static_cast<int>(rng() % 2 + 1),
                 .defect = static_cast<Defect>(rng() % static_cast<uint64_t>(Defect::Count)),
                 .value = rng()};
        SCOPED_TRACE(::testing::Message()
                     << "iteration " << i << ": request " << to_string(s.at) << " #" << s.nth
                     << " defect " << static_cast<int>(s.defect) << " seed " << s.value);
        auto be = std::make_unique<FakeBackend>(path_, s);
        const Outcome o = drive(*fe);
        if (!fe->connected()) {
            be.reset();
            EXPECT_EQ(count_fds(), base + (fe->has_inflight() ? 1 : 0));
        }
        EXPECT_LT(o.took, kBound);
        EXPECT_EQ(fe->stats().fails.total(), o.err ? 1u : 0u);
        if (o.err) {
            EXPECT_EQ(fe->stats().fails.get(o.err->fail), 1u);
        }
        serves_good_backend(fe, be, s);
    }
}

TEST_F(FrontendHostile, StartHandsItsEventfdsOverSoTheBackendCannotBlockOurSignals) {
    // Issue 23: the back-end holds the kick and call fds start() sends; it may
    // fill their counts and clear O_NONBLOCK, so from start() on our signals
    // of them are kernel-made (notify/event_fd.h).
    std::vector<notify::EventFd> fresh;
    for (int i = 0; i < 4; ++i) fresh.push_back(std::move(notify::EventFd::create().value()));
    auto fe = make();
    auto be = std::make_unique<FakeBackend>(path_, Script{});
    auto f = fe->connect(kWanted);
    ASSERT_TRUE(f) << f.error().text;
    backend::DeviceSetup d = device(*f);
    for (std::size_t i = 0; i < d.vrings.size(); ++i) {
        d.vrings[i].kick = &fresh[2 * i];
        d.vrings[i].call = &fresh[2 * i + 1];
    }
    for (const auto& e : fresh) EXPECT_FALSE(e.kernel_signalled());
    ASSERT_TRUE(fe->start(d, memory()));
    for (const auto& e : fresh) EXPECT_TRUE(e.kernel_signalled());
    fe.reset();
}

}  // namespace
}  // namespace pvnet::vhost_user::test
