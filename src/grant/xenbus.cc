// xenbus states, their legal moves, and the grant-mode negotiation.
#include "pvnet/grant/xenbus.h"

#include "pvnet/grant/store.h"

namespace pvnet::grant {

int xenbus_step(XenbusState s) {
    switch (s) {
        case XenbusState::Unknown:
            return 0;
        case XenbusState::Initialising:
            return 1;
        case XenbusState::InitWait:
        case XenbusState::Initialised:
            return 2;
        case XenbusState::Connected:
            return 3;
        case XenbusState::Closing:
            return 4;
        case XenbusState::Closed:
            return 5;
    }
    return 0;
}

const char* to_string(XenbusState state) {
    switch (state) {
        case XenbusState::Unknown:
            return "Unknown";
        case XenbusState::Initialising:
            return "Initialising";
        case XenbusState::InitWait:
            return "InitWait";
        case XenbusState::Initialised:
            return "Initialised";
        case XenbusState::Connected:
            return "Connected";
        case XenbusState::Closing:
            return "Closing";
        case XenbusState::Closed:
            return "Closed";
    }
    return "Invalid";
}

const char* to_string(Side side) { return side == Side::Backend ? "backend" : "frontend"; }

Result<XenbusState, std::string> parse_xenbus_state(std::string_view text) {
    const std::optional<uint32_t> v = parse_uint(text);
    if (!v || *v > static_cast<uint32_t>(XenbusState::Closed)) {
        return unexpected("bad xenbus state " + quote(text));
    }
    return static_cast<XenbusState>(*v);
}

bool legal_transition(Side side, XenbusState from, XenbusState to) {
    const XenbusState others_wait =
        side == Side::Backend ? XenbusState::Initialised : XenbusState::InitWait;
    if (to == others_wait) return false;
    if (from == to) return true;
    if (to == XenbusState::Unknown) return false;
    if (to == XenbusState::Closing) return true;
    // Reconnect: Closed starts the path again, up to the side's wait state
    // (Connected needs the peer, so it cannot have been skipped to).
    if (from == XenbusState::Closed) return xenbus_step(to) <= 2;
    return xenbus_step(to) > xenbus_step(from);
}

bool legal_transition(XenbusState from, XenbusState to) {
    return legal_transition(Side::Backend, from, to) || legal_transition(Side::Frontend, from, to);
}

const char* to_string(GrantMode mode) {
    switch (mode) {
        case GrantMode::Map:
            return "map";
        case GrantMode::Copy:
            return "copy";
        case GrantMode::Persistent:
            return "persistent";
    }
    return "invalid";
}

Result<GrantMode, std::string> parse_grant_mode(std::string_view text) {
    for (GrantMode m : {GrantMode::Map, GrantMode::Copy, GrantMode::Persistent}) {
        if (text == to_string(m)) return m;
    }
    return unexpected("bad grant mode " + quote(text));
}

GrantMode negotiate(GrantMode backend_fallback, bool backend_offers_persistent,
                    bool frontend_offers_persistent) {
    if (backend_offers_persistent && frontend_offers_persistent) return GrantMode::Persistent;
    return backend_fallback;
}

}  // namespace pvnet::grant
