#include "pvnet/vhost_user/protocol.h"

namespace pvnet::vhost_user {

std::string_view to_string(Request r) noexcept {
    static constexpr std::string_view kNames[] = {
        "NONE", "GET_FEATURES", "SET_FEATURES", "SET_OWNER", "RESET_OWNER", "SET_MEM_TABLE",
        "SET_LOG_BASE", "SET_LOG_FD", "SET_VRING_NUM", "SET_VRING_ADDR", "SET_VRING_BASE",
        "GET_VRING_BASE", "SET_VRING_KICK", "SET_VRING_CALL", "SET_VRING_ERR",
        "GET_PROTOCOL_FEATURES", "SET_PROTOCOL_FEATURES", "GET_QUEUE_NUM", "SET_VRING_ENABLE",
        "SEND_RARP", "NET_SET_MTU", "SET_BACKEND_REQ_FD", "IOTLB_MSG", "SET_VRING_ENDIAN",
        "GET_CONFIG", "SET_CONFIG", "CREATE_CRYPTO_SESSION", "CLOSE_CRYPTO_SESSION",
        "POSTCOPY_ADVISE", "POSTCOPY_LISTEN", "POSTCOPY_END", "GET_INFLIGHT_FD",
        "SET_INFLIGHT_FD", "GPU_SET_SOCKET", "RESET_DEVICE", "VRING_KICK", "GET_MAX_MEM_SLOTS",
        "ADD_MEM_REG", "REM_MEM_REG", "SET_STATUS", "GET_STATUS"};
    static_assert(std::size(kNames) == static_cast<std::size_t>(Request::Max));
    const auto i = static_cast<uint32_t>(r);
    return i < std::size(kNames) ? kNames[i] : "UNKNOWN";
}

}  // namespace pvnet::vhost_user
