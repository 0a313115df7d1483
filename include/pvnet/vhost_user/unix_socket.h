// The unix-socket ends both vhost-user sides share: the address of a path,
// and a listening socket that replaces a stale socket file (a dead
// process's) but never a live one or a file that is not a socket.
#pragma once

#include <sys/un.h>

#include <optional>
#include <string>

#include "pvnet/util/result.h"

namespace pvnet::vhost_user {

/// The address of `path`; nullopt when it is empty or too long for sun_path.
std::optional<sockaddr_un> unix_addr(const std::string& path) noexcept;

/// Binds and listens on `path` (SOCK_CLOEXEC, plus SOCK_NONBLOCK with
/// `nonblock`): the fd, or a sentence naming the path. The caller unlinks
/// the file when done.
Result<int, std::string> listen_unix(const std::string& path, bool nonblock, int backlog);

}  // namespace pvnet::vhost_user
