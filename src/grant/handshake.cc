// The backend's and the frontend's halves of the xenbus handshake.
#include "pvnet/grant/handshake.h"

namespace pvnet::grant {

namespace {

Side other(Side side) { return side == Side::Backend ? Side::Frontend : Side::Backend; }

Status<std::string> set_state(const Store& store, Side side, uint16_t domid, XenbusState s) {
    return store.write(side_key(side, domid, "state"), std::to_string(static_cast<int>(s)));
}

// A side that gives up says so, as xenbus_dev_fatal does, so the peer fails
// now instead of at its deadline; the error returned is the original one.
Unexpected<std::string> fail(const Store& store, Side side, uint16_t domid, std::string why) {
    (void)set_state(store, side, domid, XenbusState::Closing);
    return unexpected(std::string(to_string(side)) + " " + std::to_string(domid) + ": " + why);
}

// feature-persistent-grants: absent reads as 0 (xenbus_read_unsigned's
// default); only "0" and "1" mean anything.
Result<bool, std::string> read_feature(const Store& store, Side side, uint16_t domid) {
    const std::string key = side_key(side, domid, "feature-persistent-grants");
    auto v = store.read_uint(key, 0);
    if (!v) return unexpected(v.error());
    if (*v > 1) return unexpected("key " + key + " is " + std::to_string(*v) + ", not 0 or 1");
    return *v == 1;
}

Status<std::string> write_feature(const Store& store, Side side, uint16_t domid, bool offer) {
    return store.write(side_key(side, domid, "feature-persistent-grants"), offer ? "1" : "0");
}

}  // namespace

Status<std::string> check_domid(uint16_t domid) {
    if (domid == 0 || domid >= kDomidFirstReserved) {
        return unexpected("domid " + std::to_string(domid) + " is not in 1..0x7fef");
    }
    return {};
}

std::string side_key(Side side, uint16_t domid, std::string_view leaf) {
    std::string key = to_string(side);
    key += '/';
    key += std::to_string(domid);
    key += '/';
    key += leaf;
    return key;
}

Result<XenbusState, std::string> wait_peer_state(const Store& store, Side peer, uint16_t domid,
                                                 XenbusState target, Clock::time_point deadline) {
    const std::string key = side_key(peer, domid, "state");
    std::optional<XenbusState> seen;
    bool stale = false;  // a Closed left by the peer's previous session
    XenbusState reached = XenbusState::Unknown;
    auto done = [&](const std::optional<std::string>& v) -> Result<bool, std::string> {
        XenbusState s = XenbusState::Unknown;  // absent: the peer has not started
        if (v) {
            auto parsed = parse_xenbus_state(*v);
            if (!parsed) return unexpected(key + ": " + parsed.error());
            s = *parsed;
        }
        const XenbusState from = seen.value_or(XenbusState::Unknown);
        if (!legal_transition(peer, from, s)) {
            return unexpected(std::string(to_string(peer)) + " went " + to_string(from) + " -> " +
                              to_string(s) + ", an illegal transition");
        }
        if (!seen && s == XenbusState::Closed) stale = true;
        if (s != XenbusState::Closed) stale = false;
        seen = s;
        if (stale) return false;
        if (s == XenbusState::Closing || s == XenbusState::Closed) {
            return unexpected(std::string(to_string(peer)) + " is " + to_string(s) +
                              " while waiting for " + to_string(target));
        }
        reached = s;
        return xenbus_step(s) >= xenbus_step(target);  // s is before Closing here
    };
    const std::string what = std::string(to_string(peer)) + " state " + to_string(target);
    auto r = store.wait_until(key, what, done, deadline);
    if (!r) return unexpected(r.error());
    return reached;
}

Result<GrantMode, std::string> backend_handshake(const Store& store, uint16_t domid,
                                                 GrantMode fallback, bool offer_persistent,
                                                 Clock::time_point deadline) {
    if (auto st = check_domid(domid); !st) return unexpected(st.error());
    if (fallback == GrantMode::Persistent) {
        return unexpected(std::string("backend fallback must be map or copy"));
    }
    constexpr Side self = Side::Backend;
    // A mode left from an earlier session must not pass for this one's.
    if (auto st = store.remove(side_key(self, domid, "mode")); !st) {
        return fail(store, self, domid, st.error());
    }
    if (auto st = write_feature(store, self, domid, offer_persistent); !st) {
        return fail(store, self, domid, st.error());
    }
    if (auto st = set_state(store, self, domid, XenbusState::InitWait); !st) {
        return fail(store, self, domid, st.error());
    }

    auto peer = wait_peer_state(store, other(self), domid, XenbusState::Initialised, deadline);
    if (!peer) return fail(store, self, domid, peer.error());
    if (*peer != XenbusState::Initialised) {
        return fail(store, self, domid,
                    std::string("frontend went ") + to_string(*peer) + " before the backend");
    }
    auto frontend_offers = read_feature(store, other(self), domid);
    if (!frontend_offers) return fail(store, self, domid, frontend_offers.error());

    const GrantMode mode = negotiate(fallback, offer_persistent, *frontend_offers);
    if (auto st = store.write(side_key(self, domid, "mode"), to_string(mode)); !st) {
        return fail(store, self, domid, st.error());
    }
    if (auto st = set_state(store, self, domid, XenbusState::Connected); !st) {
        return fail(store, self, domid, st.error());
    }
    return mode;
}

Result<GrantMode, std::string> frontend_handshake(const Store& store, uint16_t domid,
                                                  bool offer_persistent,
                                                  Clock::time_point deadline) {
    if (auto st = check_domid(domid); !st) return unexpected(st.error());
    constexpr Side self = Side::Frontend;
    if (auto st = set_state(store, self, domid, XenbusState::Initialising); !st) {
        return fail(store, self, domid, st.error());
    }

    // The backend publishes its feature before InitWait, so it is there to read.
    auto peer = wait_peer_state(store, other(self), domid, XenbusState::InitWait, deadline);
    if (!peer) return fail(store, self, domid, peer.error());
    auto backend_offers = read_feature(store, other(self), domid);
    if (!backend_offers) return fail(store, self, domid, backend_offers.error());

    if (auto st = write_feature(store, self, domid, offer_persistent); !st) {
        return fail(store, self, domid, st.error());
    }
    if (auto st = set_state(store, self, domid, XenbusState::Initialised); !st) {
        return fail(store, self, domid, st.error());
    }

    peer = wait_peer_state(store, other(self), domid, XenbusState::Connected, deadline);
    if (!peer) return fail(store, self, domid, peer.error());
    const std::string mode_key = side_key(other(self), domid, "mode");
    auto text = store.read(mode_key);
    if (!text) return fail(store, self, domid, text.error());
    if (!*text) return fail(store, self, domid, "backend Connected without " + mode_key);
    auto mode = parse_grant_mode(**text);
    if (!mode) return fail(store, self, domid, mode_key + ": " + mode.error());
    // The backend chooses, but only what the two offers allow.
    const bool both = *backend_offers && offer_persistent;
    if (both != (*mode == GrantMode::Persistent)) {
        return fail(store, self, domid,
                    std::string("backend chose ") + to_string(*mode) +
                        " but persistent grants were " + (both ? "" : "not ") +
                        "offered by both sides");
    }
    if (auto st = set_state(store, self, domid, XenbusState::Connected); !st) {
        return fail(store, self, domid, st.error());
    }
    return *mode;
}

Status<std::string> close_side(const Store& store, Side side, uint16_t domid) {
    if (auto st = check_domid(domid); !st) return st;
    if (auto st = set_state(store, side, domid, XenbusState::Closing); !st) return st;
    return set_state(store, side, domid, XenbusState::Closed);
}

}  // namespace pvnet::grant
