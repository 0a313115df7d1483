// The xenbus state machine and the grant-mode negotiation, as frontend and
// backend publish them in the Store. State values and names are Linux's
// (include/xen/interface/io/xenbus.h, xenbus_strstate).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pvnet/util/result.h"

namespace pvnet::grant {

enum class XenbusState : uint8_t {
    Unknown = 0,
    Initialising = 1,
    InitWait = 2,
    Initialised = 3,
    Connected = 4,
    Closing = 5,
    Closed = 6,
};

enum class Side : uint8_t { Backend, Frontend };

const char* to_string(XenbusState state);
const char* to_string(Side side);

/// A state as the store holds it: its decimal value ("4"), parsed strictly.
/// Anything else ("7", "x", "", "04") is an error quoting the text.
Result<XenbusState, std::string> parse_xenbus_state(std::string_view text);

/// Whether `side` may be seen moving from `from` to `to`. The path is
///   Initialising -> InitWait (backend) / Initialised (frontend) -> Connected
///   -> Closing -> Closed -> Initialising (reconnect),
/// any state may go to Closing, and staying put is fine. A reader polls and
/// may miss states, so a forward skip along the path is legal too (the
/// backend seen going Closed -> InitWait missed its Initialising); moving
/// back, to Unknown, or into the other side's wait state is not.
bool legal_transition(Side side, XenbusState from, XenbusState to);
/// Position on the path: Unknown 0, Initialising 1, InitWait / Initialised 2
/// (one per side), Connected 3, Closing 4, Closed 5.
int xenbus_step(XenbusState s);
/// Legal for either side.
bool legal_transition(XenbusState from, XenbusState to);

/// How the backend reaches the frontend's granted pages.
enum class GrantMode : uint8_t { Map, Copy, Persistent };

const char* to_string(GrantMode mode);  // "map", "copy", "persistent"
Result<GrantMode, std::string> parse_grant_mode(std::string_view text);

/// Persistent iff both sides offer it; otherwise the backend's configured
/// non-persistent mode, `backend_fallback` (Map or Copy).
GrantMode negotiate(GrantMode backend_fallback, bool backend_offers_persistent,
                    bool frontend_offers_persistent);

}  // namespace pvnet::grant
