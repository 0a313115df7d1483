// The xenbus state machine, the grant-mode negotiation, and the handshake:
// the real backend and frontend on two threads over one store directory,
// then each against a hostile peer played by the test.
#include "pvnet/grant/handshake.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "temp_dir.h"

namespace pvnet::grant {
namespace {

using test::TempDir;
using namespace std::chrono_literals;
using S = XenbusState;

// Generous: only a broken handshake comes near it.
Clock::time_point long_deadline() { return Clock::now() + 20s; }

TEST(Xenbus, ParsesEveryStateAndRejectsBadText) {
    for (int v = 0; v <= 6; ++v) {
        auto s = parse_xenbus_state(std::to_string(v));
        ASSERT_TRUE(s) << v;
        EXPECT_EQ(static_cast<int>(*s), v);
    }
    EXPECT_STREQ(to_string(S::Unknown), "Unknown");
    EXPECT_STREQ(to_string(S::InitWait), "InitWait");
    EXPECT_STREQ(to_string(S::Initialised), "Initialised");
    EXPECT_STREQ(to_string(S::Closed), "Closed");
    for (const char* bad :
         {"7", "x", "", "-1", "04", " 4", "4 ", "255", "4294967296", "Connected"}) {
        auto s = parse_xenbus_state(bad);
        ASSERT_FALSE(s) << bad;
        EXPECT_NE(s.error().find(quote(bad)), std::string::npos) << s.error();
    }
}

TEST(Xenbus, TransitionTable) {
    using B = std::tuple<Side, S, S>;
    const Side be = Side::Backend;
    const Side fe = Side::Frontend;
    const std::vector<B> legal = {
        {be, S::Unknown, S::Initialising},
        {fe, S::Unknown, S::Initialising},
        {be, S::Initialising, S::InitWait},
        {fe, S::Initialising, S::Initialised},
        {be, S::InitWait, S::Connected},
        {fe, S::Initialised, S::Connected},
        {be, S::Connected, S::Closing},
        {fe, S::Closing, S::Closed},
        {be, S::Closed, S::Initialising},
        {fe, S::Closed, S::Initialising},
        {be, S::Connected, S::Connected},
        {fe, S::Closed, S::Closed},
        {fe, S::Initialising, S::Closing},
        {be, S::Closed, S::Closing},
        {fe, S::Unknown, S::Closing},
        // Skips a poller may see: it missed the states in between.
        {be, S::Unknown, S::InitWait},
        {fe, S::Unknown, S::Initialised},
        {be, S::Initialising, S::Connected},
        {be, S::Closed, S::InitWait},
        {fe, S::Connected, S::Closed},
    };
    const std::vector<B> illegal = {
        {be, S::Connected, S::Initialising},
        {fe, S::Connected, S::Initialised},
        {be, S::Connected, S::InitWait},
        {fe, S::Initialised, S::Initialising},
        {be, S::Closing, S::Connected},
        {fe, S::Closed, S::Connected},
        {be, S::Closing, S::Initialising},
        {be, S::Connected, S::Unknown},
        {fe, S::Initialising, S::Unknown},
        // Each side's wait state belongs to it alone.
        {be, S::Initialising, S::Initialised},
        {fe, S::Initialising, S::InitWait},
        {be, S::InitWait, S::Initialised},
        {fe, S::Initialised, S::InitWait},
        {fe, S::InitWait, S::InitWait},
        {fe, S::Closed, S::InitWait},
    };
    for (const auto& [side, from, to] : legal) {
        EXPECT_TRUE(legal_transition(side, from, to))
            << to_string(side) << " " << to_string(from) << " -> " << to_string(to);
        EXPECT_TRUE(legal_transition(from, to)) << to_string(from) << " -> " << to_string(to);
    }
    for (const auto& [side, from, to] : illegal) {
        EXPECT_FALSE(legal_transition(side, from, to))
            << to_string(side) << " " << to_string(from) << " -> " << to_string(to);
    }
    // Either side: the union of the two.
    EXPECT_TRUE(legal_transition(S::InitWait, S::Connected));
    EXPECT_TRUE(legal_transition(S::Initialised, S::Connected));
    EXPECT_FALSE(legal_transition(S::InitWait, S::Initialised));
    EXPECT_FALSE(legal_transition(S::Connected, S::Initialising));
    // Anything may close.
    for (int v = 0; v <= 6; ++v) {
        EXPECT_TRUE(legal_transition(static_cast<S>(v), S::Closing)) << v;
    }
}

TEST(GrantModeText, RoundTripsAndRejectsBadText) {
    for (GrantMode m : {GrantMode::Map, GrantMode::Copy, GrantMode::Persistent}) {
        auto p = parse_grant_mode(to_string(m));
        ASSERT_TRUE(p);
        EXPECT_EQ(*p, m);
    }
    EXPECT_STREQ(to_string(GrantMode::Persistent), "persistent");
    for (const char* bad : {"", "Map", "persistent\n", "grant", "1"}) {
        EXPECT_FALSE(parse_grant_mode(bad)) << bad;
    }
}

TEST(Negotiate, PersistentOnlyWhenBothOffer) {
    for (GrantMode fb : {GrantMode::Map, GrantMode::Copy}) {
        EXPECT_EQ(negotiate(fb, true, true), GrantMode::Persistent);
        EXPECT_EQ(negotiate(fb, true, false), fb);
        EXPECT_EQ(negotiate(fb, false, true), fb);
        EXPECT_EQ(negotiate(fb, false, false), fb);
    }
}

TEST(Domid, Bounds) {
    EXPECT_TRUE(check_domid(1));
    EXPECT_TRUE(check_domid(0x7fef));
    EXPECT_FALSE(check_domid(0));
    EXPECT_FALSE(check_domid(0x7ff0));
    EXPECT_FALSE(check_domid(0xffff));
    TempDir tmp;
    ASSERT_TRUE(tmp.ok());
    auto store = Store::open(tmp.path());
    ASSERT_TRUE(store);
    EXPECT_FALSE(backend_handshake(*store, 0, GrantMode::Map, true, long_deadline()));
    EXPECT_FALSE(frontend_handshake(*store, 0x7ff0, true, long_deadline()));
    EXPECT_EQ(side_key(Side::Frontend, 3, "state"), "frontend/3/state");
}

class HandshakeTest : public test::StoreFixture {
protected:
    void put(const std::string& key, const std::string& value) {
        auto st = store_->write(key, value);
        ASSERT_TRUE(st) << st.error();
    }
    std::string get(const std::string& key) {
        auto v = store_->read(key);
        return v && v->has_value() ? **v : "<absent>";
    }

    static constexpr uint16_t kDom = 7;
};

struct Offers {
    GrantMode fallback;
    bool backend;
    bool frontend;
};

class NegotiationMatrix : public HandshakeTest, public ::testing::WithParamInterface<Offers> {};

// Each side opens its own Store on the directory, as two processes would.
TEST_P(NegotiationMatrix, BothSidesAgree) {
    const Offers o = GetParam();
    auto backend_store = Store::open(store_->dir());
    auto frontend_store = Store::open(store_->dir());
    ASSERT_TRUE(backend_store && frontend_store);

    std::optional<Result<GrantMode, std::string>> backend;
    std::thread t([&] {
        backend.emplace(
            backend_handshake(*backend_store, kDom, o.fallback, o.backend, long_deadline()));
    });
    auto frontend = frontend_handshake(*frontend_store, kDom, o.frontend, long_deadline());
    t.join();

    ASSERT_TRUE(backend.has_value());
    ASSERT_TRUE(*backend) << backend->error();
    ASSERT_TRUE(frontend) << frontend.error();
    const GrantMode want = o.backend && o.frontend ? GrantMode::Persistent : o.fallback;
    EXPECT_EQ(**backend, want);
    EXPECT_EQ(*frontend, want);
    EXPECT_EQ(get("backend/7/mode"), to_string(want));
    EXPECT_EQ(get("backend/7/feature-persistent-grants"), o.backend ? "1" : "0");
    EXPECT_EQ(get("frontend/7/feature-persistent-grants"), o.frontend ? "1" : "0");
    EXPECT_EQ(get("backend/7/state"), "4");
    EXPECT_EQ(get("frontend/7/state"), "4");

    ASSERT_TRUE(close_side(*store_, Side::Frontend, kDom));
    ASSERT_TRUE(close_side(*store_, Side::Backend, kDom));
    EXPECT_EQ(get("backend/7/state"), "6");
    EXPECT_EQ(get("frontend/7/state"), "6");
}

std::vector<Offers> all_offers() {
    std::vector<Offers> v;
    for (GrantMode fb : {GrantMode::Map, GrantMode::Copy}) {
        for (bool b : {false, true}) {
            for (bool f : {false, true}) v.push_back({fb, b, f});
        }
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(All, NegotiationMatrix, ::testing::ValuesIn(all_offers()),
                         [](const ::testing::TestParamInfo<Offers>& i) {
                             return std::string(to_string(i.param.fallback)) + "_backend" +
                                    (i.param.backend ? "Offers" : "Declines") + "_frontend" +
                                    (i.param.frontend ? "Offers" : "Declines");
                         });

// Both sides Closed from an earlier session: the handshake runs again.
TEST_F(HandshakeTest, ReconnectsAfterClose) {
    put("backend/7/state", "6");
    put("frontend/7/state", "6");
    put("backend/7/mode", "copy");  // stale: the new session negotiates afresh
    std::optional<Result<GrantMode, std::string>> backend;
    std::thread t([&] {
        backend.emplace(backend_handshake(*store_, kDom, GrantMode::Map, true, long_deadline()));
    });
    auto frontend = frontend_handshake(*store_, kDom, true, long_deadline());
    t.join();
    ASSERT_TRUE(*backend) << backend->error();
    ASSERT_TRUE(frontend) << frontend.error();
    EXPECT_EQ(**backend, GrantMode::Persistent);
    EXPECT_EQ(*frontend, GrantMode::Persistent);
}

TEST_F(HandshakeTest, BackendRejectsPersistentAsFallback) {
    EXPECT_FALSE(backend_handshake(*store_, kDom, GrantMode::Persistent, true, long_deadline()));
}

// --- hostile frontends, against the real backend ---------------------------

TEST_F(HandshakeTest, FrontendFeatureTwoIsAnError) {
    put("frontend/7/feature-persistent-grants", "2");
    put("frontend/7/state", "3");
    auto r = backend_handshake(*store_, kDom, GrantMode::Map, true, long_deadline());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("feature-persistent-grants"), std::string::npos) << r.error();
    EXPECT_EQ(get("backend/7/state"), "5");  // the backend gave up: Closing
    EXPECT_EQ(get("backend/7/mode"), "<absent>");
}

TEST_F(HandshakeTest, FrontendFeatureAbsentMeansNo) {
    put("frontend/7/state", "3");
    auto r = backend_handshake(*store_, kDom, GrantMode::Copy, true, long_deadline());
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(*r, GrantMode::Copy);
}

TEST_F(HandshakeTest, FrontendClosingBeforeInitialisedIsAnError) {
    std::thread frontend([&] {
        (void)store_->write("frontend/7/state", "1");
        // Wait for the backend's InitWait, then give up instead of going on.
        (void)store_->wait_until(
            "backend/7/state", "InitWait",
            [](const std::optional<std::string>& v) -> Result<bool, std::string> {
                return v.has_value() && *v == "2";
            },
            long_deadline());
        (void)store_->write("frontend/7/state", "5");
    });
    auto r = backend_handshake(*store_, kDom, GrantMode::Map, true, long_deadline());
    frontend.join();
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("Closing"), std::string::npos) << r.error();
    EXPECT_EQ(r.error().find("timed out"), std::string::npos) << r.error();
}

TEST_F(HandshakeTest, FrontendInvalidStateIsAnError) {
    put("frontend/7/state", "7");
    auto r = backend_handshake(*store_, kDom, GrantMode::Map, true, long_deadline());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("bad xenbus state '7'"), std::string::npos) << r.error();
}

TEST_F(HandshakeTest, FrontendIllegalTransitionIsAnError) {
    put("frontend/7/state", "2");  // InitWait is the backend's state, not the frontend's
    auto r = backend_handshake(*store_, kDom, GrantMode::Map, true, long_deadline());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("illegal transition"), std::string::npos) << r.error();
}

TEST_F(HandshakeTest, FrontendConnectedBeforeBackendIsAnError) {
    put("frontend/7/state", "4");
    auto r = backend_handshake(*store_, kDom, GrantMode::Map, true, long_deadline());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("Connected"), std::string::npos) << r.error();
}

TEST_F(HandshakeTest, SilentFrontendTimesOut) {
    auto r = backend_handshake(*store_, kDom, GrantMode::Map, true, Clock::now() + 200ms);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("timed out"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("frontend/7/state"), std::string::npos) << r.error();
}

// --- hostile backends, against the real frontend ---------------------------

// A backend already Connected with the given feature and mode.
class HostileBackend : public HandshakeTest {
protected:
    void connected_backend(const std::string& feature, const std::string& mode) {
        put("backend/7/feature-persistent-grants", feature);
        if (!mode.empty()) put("backend/7/mode", mode);
        put("backend/7/state", "4");
    }
};

TEST_F(HostileBackend, PersistentWhenFrontendDidNotOffer) {
    connected_backend("1", "persistent");
    auto r = frontend_handshake(*store_, kDom, false, long_deadline());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("backend chose persistent"), std::string::npos) << r.error();
    EXPECT_EQ(get("frontend/7/state"), "5");
}

TEST_F(HostileBackend, PersistentWhenBackendDidNotOffer) {
    connected_backend("0", "persistent");
    EXPECT_FALSE(frontend_handshake(*store_, kDom, true, long_deadline()));
}

TEST_F(HostileBackend, NotPersistentWhenBothOffered) {
    connected_backend("1", "map");
    auto r = frontend_handshake(*store_, kDom, true, long_deadline());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("backend chose map"), std::string::npos) << r.error();
}

TEST_F(HostileBackend, ConsistentModeIsAccepted) {
    // The control for the cases above: same setup, a mode the offers allow.
    connected_backend("1", "copy");
    auto r = frontend_handshake(*store_, kDom, false, long_deadline());
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(*r, GrantMode::Copy);
    EXPECT_EQ(get("frontend/7/state"), "4");
}

TEST_F(HostileBackend, BadModeOrFeatureIsAnError) {
    connected_backend("1", "bogus");
    auto bogus = frontend_handshake(*store_, kDom, true, long_deadline());
    ASSERT_FALSE(bogus);
    EXPECT_NE(bogus.error().find("bad grant mode 'bogus'"), std::string::npos) << bogus.error();

    ASSERT_TRUE(store_->remove("backend/7/mode"));
    put("frontend/7/state", "1");
    auto missing = frontend_handshake(*store_, kDom, true, long_deadline());
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().find("backend/7/mode"), std::string::npos) << missing.error();

    put("backend/7/feature-persistent-grants", "yes");
    auto feature = frontend_handshake(*store_, kDom, true, long_deadline());
    ASSERT_FALSE(feature);
    EXPECT_NE(feature.error().find("feature-persistent-grants"), std::string::npos)
        << feature.error();
}

TEST_F(HandshakeTest, SilentBackendTimesOut) {
    auto r = frontend_handshake(*store_, kDom, true, Clock::now() + 200ms);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("timed out"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("backend/7/state"), std::string::npos) << r.error();
    EXPECT_EQ(get("frontend/7/state"), "5");
}

// A backend that reaches InitWait and then never connects.
TEST_F(HandshakeTest, BackendStuckInInitWaitTimesOut) {
    put("backend/7/feature-persistent-grants", "1");
    put("backend/7/state", "2");
    auto r = frontend_handshake(*store_, kDom, true, Clock::now() + 200ms);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("timed out"), std::string::npos) << r.error();
    EXPECT_EQ(get("frontend/7/feature-persistent-grants"), "1");
}

}  // namespace
}  // namespace pvnet::grant
