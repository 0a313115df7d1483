// The xenbus handshake that agrees on a GrantMode through the Store, with
// each side's keys under `backend/<domid>/` and `frontend/<domid>/`:
//
//   backend                               frontend
//                                         state = Initialising
//   feature-persistent-grants = 0|1
//   state = InitWait              ──────> (waits for InitWait or later)
//                                         feature-persistent-grants = 0|1
//   (waits for Initialised)       <────── state = Initialised
//   mode = map|copy|persistent
//   state = Connected             ──────> (waits for Connected, checks mode)
//                                         state = Connected
//
// Everything read from the peer is checked: a bad state or feature value, an
// illegal transition, a peer closing mid-handshake, a mode that contradicts
// the offers, or no answer by the deadline is an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pvnet/grant/store.h"
#include "pvnet/grant/xenbus.h"
#include "pvnet/util/result.h"

namespace pvnet::grant {

/// Xen's DOMID_FIRST_RESERVED: frontend domids are 1 .. 0x7fef (0 is the backend's).
inline constexpr uint16_t kDomidFirstReserved = 0x7ff0;

Status<std::string> check_domid(uint16_t domid);

/// "<backend|frontend>/<domid>/<leaf>".
std::string side_key(Side side, uint16_t domid, std::string_view leaf);

/// Waits until `peer`'s state is `target` or later on its path (before
/// Closing) and returns it. Errors: an unparsable state, an illegal
/// transition, Closing or Closed (a Closed left from an earlier session is
/// waited past until the peer starts again), or the deadline.
Result<XenbusState, std::string> wait_peer_state(const Store& store, Side peer, uint16_t domid,
                                                 XenbusState target, Clock::time_point deadline);

/// The backend's half; `fallback` (Map or Copy) is used unless both sides
/// offer persistent grants. Leaves the backend Connected.
Result<GrantMode, std::string> backend_handshake(const Store& store, uint16_t domid,
                                                 GrantMode fallback, bool offer_persistent,
                                                 Clock::time_point deadline);

/// The frontend's half: the mode the backend chose, once checked against the
/// two offers. Leaves the frontend Connected.
Result<GrantMode, std::string> frontend_handshake(const Store& store, uint16_t domid,
                                                  bool offer_persistent,
                                                  Clock::time_point deadline);

/// `side` goes Closing, then Closed.
Status<std::string> close_side(const Store& store, Side side, uint16_t domid);

}  // namespace pvnet::grant
