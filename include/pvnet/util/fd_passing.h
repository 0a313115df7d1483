// File descriptors over unix sockets (SCM_RIGHTS): what the vhost-user
// server, the grant connection and the tests' peers share.
#pragma once

#include <sys/socket.h>

#include <cstring>
#include <span>
#include <vector>

namespace pvnet {

/// Attaches one SCM_RIGHTS message carrying `fds` to `mh`, in `cbuf`, which
/// holds at least CMSG_SPACE(sizeof(int) * fds.size()) bytes (cmsghdr-aligned).
/// No fds: no control message.
inline void put_rights(msghdr& mh, char* cbuf, std::span<const int> fds) noexcept {
    if (fds.empty()) return;
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
}

/// Appends the fds of every SCM_RIGHTS message `mh` received to `fds` (the
/// caller owns them, and closes them if it refuses the message).
inline void take_rights(msghdr& mh, std::vector<int>& fds) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < k; ++i) {
            int fd = -1;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            fds.push_back(fd);
        }
    }
}

}  // namespace pvnet
