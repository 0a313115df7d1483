// The vhost-user wire format (QEMU docs/interop/vhost-user.rst): a 12-byte
// header, a request-specific payload of at most kMaxPayload bytes, and fds
// in SCM_RIGHTS ancillary data. Layouts and numbers only (DESIGN.md layer 9);
// what the backend does with them is in backend_session.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pvnet/virtio/inflight.h"

namespace pvnet::vhost_user {

/// Front-end → back-end requests ("Front-end message types").
enum class Request : uint32_t {
    None = 0,
    GetFeatures = 1,
    SetFeatures = 2,
    SetOwner = 3,
    ResetOwner = 4,
    SetMemTable = 5,
    SetLogBase = 6,
    SetLogFd = 7,
    SetVringNum = 8,
    SetVringAddr = 9,
    SetVringBase = 10,
    GetVringBase = 11,
    SetVringKick = 12,
    SetVringCall = 13,
    SetVringErr = 14,
    GetProtocolFeatures = 15,
    SetProtocolFeatures = 16,
    GetQueueNum = 17,
    SetVringEnable = 18,
    SendRarp = 19,
    NetSetMtu = 20,
    SetBackendReqFd = 21,
    IotlbMsg = 22,
    SetVringEndian = 23,
    GetConfig = 24,
    SetConfig = 25,
    CreateCryptoSession = 26,
    CloseCryptoSession = 27,
    PostcopyAdvise = 28,
    PostcopyListen = 29,
    PostcopyEnd = 30,
    GetInflightFd = 31,
    SetInflightFd = 32,
    GpuSetSocket = 33,
    ResetDevice = 34,
    VringKick = 35,
    GetMaxMemSlots = 36,
    AddMemReg = 37,
    RemMemReg = 38,
    SetStatus = 39,
    GetStatus = 40,
    Max = 41,  ///< one past the last known request
};

std::string_view to_string(Request r) noexcept;

/// Header flags: bits 0-1 the version (1), REPLY on answers, NEED_REPLY when
/// the front-end asks for a REPLY_ACK answer.
inline constexpr uint32_t kVersionMask = 0x3;
inline constexpr uint32_t kVersion = 0x1;
inline constexpr uint32_t kFlagReply = 1u << 2;
inline constexpr uint32_t kFlagNeedReply = 1u << 3;

struct MsgHeader {
    uint32_t request = 0;
    uint32_t flags = 0;
    uint32_t size = 0;  ///< payload bytes that follow
};
static_assert(sizeof(MsgHeader) == 12);

/// At most 8 regions travel in one SET_MEM_TABLE without
/// CONFIGURE_MEM_SLOTS, and that is the largest fixed payload.
inline constexpr std::size_t kMaxMemRegions = 8;
/// Fds one message may carry (SET_MEM_TABLE: one per region).
inline constexpr std::size_t kMaxFds = kMaxMemRegions;

/// The virtio feature bit that says the back-end speaks protocol features
/// (VHOST_USER_F_PROTOCOL_FEATURES) and the one for dirty logging.
inline constexpr unsigned kFProtocolFeatures = 30;
inline constexpr unsigned kFLogAll = 26;

/// VHOST_USER_PROTOCOL_F_* bit numbers.
enum ProtocolFeature : unsigned {
    kProtoMq = 0,
    kProtoLogShmfd = 1,
    kProtoRarp = 2,
    kProtoReplyAck = 3,
    kProtoNetMtu = 4,
    kProtoBackendReq = 5,
    kProtoCrossEndian = 6,
    kProtoCryptoSession = 7,
    kProtoPagefault = 8,
    kProtoConfig = 9,
    kProtoBackendSendFd = 10,
    kProtoHostNotifier = 11,
    kProtoInflightShmfd = 12,
    kProtoResetDevice = 13,
    kProtoInbandNotifications = 14,
    kProtoConfigureMemSlots = 15,
    kProtoStatus = 16,
};

constexpr uint64_t bit(unsigned b) noexcept { return uint64_t{1} << b; }

/// "A vring state description": SET_VRING_NUM/BASE/ENABLE, GET_VRING_BASE's reply.
struct VringState {
    uint32_t index = 0;
    uint32_t num = 0;
};
static_assert(sizeof(VringState) == 8);

/// "A vring address description": addresses in the front-end's user space.
struct VringAddr {
    uint32_t index = 0;
    uint32_t flags = 0;  ///< bit 0: VHOST_VRING_F_LOG (log_guest_addr valid)
    uint64_t desc_user_addr = 0;
    uint64_t used_user_addr = 0;
    uint64_t avail_user_addr = 0;
    uint64_t log_guest_addr = 0;
};
static_assert(sizeof(VringAddr) == 40);
inline constexpr uint32_t kVringFLog = 1u << 0;

/// One memory region of SET_MEM_TABLE: guest-physical range, the
/// front-end's user address of it, and where it starts in its fd.
struct MemRegion {
    uint64_t guest_phys_addr = 0;
    uint64_t memory_size = 0;
    uint64_t userspace_addr = 0;
    uint64_t mmap_offset = 0;
};
static_assert(sizeof(MemRegion) == 32);

/// SET_MEM_TABLE's payload: nregions, padding, then nregions entries (the
/// front-end sends only those: payload size 8 + 32 * nregions).
struct MemTable {
    uint32_t nregions = 0;
    uint32_t padding = 0;
    MemRegion regions[kMaxMemRegions];
};
static_assert(sizeof(MemTable) == 8 + 32 * kMaxMemRegions);

/// SET_VRING_KICK/CALL/ERR's u64: the vring index in bits 0-7; bit 8 set
/// means no fd travels (polling, or no interrupts).
inline constexpr uint64_t kVringIdxMask = 0xff;
inline constexpr uint64_t kVringNoFdMask = 1u << 8;

/// GET_INFLIGHT_FD's request and reply and SET_INFLIGHT_FD's payload
/// (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD): the shared buffer in which the
/// back-end records the descriptors it has popped and not yet used, so a
/// restarted back-end knows them. The front-end keeps the fd across the
/// back-end's restarts and never reads the buffer.
struct InflightInfo {
    uint64_t mmap_size = 0;
    uint64_t mmap_offset = 0;
    uint16_t num_queues = 0;
    uint16_t queue_size = 0;
};
static_assert(sizeof(InflightInfo) == 24);

/// The buffer holds one split-ring log per queue (layout in
/// virtio/inflight.h), queue i at i * inflight_queue_bytes(queue_size).
using virtio::DescStateSplit;
using virtio::inflight_queue_bytes;
using virtio::QueueRegionSplit;

/// The largest payload a request of this protocol carries (SET_MEM_TABLE).
inline constexpr std::size_t kMaxPayload = sizeof(MemTable);

/// The protocol features pvnet's back-end offers: MQ, REPLY_ACK, NET_MTU,
/// INFLIGHT_SHMFD and STATUS. Everything else is refused (backend_session.h
/// says how).
inline constexpr uint64_t kBackendProtocolFeatures = bit(kProtoMq) | bit(kProtoReplyAck) |
                                                     bit(kProtoNetMtu) |
                                                     bit(kProtoInflightShmfd) | bit(kProtoStatus);

/// GET_INFLIGHT_FD allocates at most this much (num_queues *
/// inflight_queue_bytes(queue_size)): 256 pairs of 32768-entry rings.
inline constexpr uint64_t kMaxInflightBytes = uint64_t{256} << 20;

}  // namespace pvnet::vhost_user
