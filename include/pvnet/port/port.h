// The Port contract: what backend::VhostNet moves packets to and from
// (DESIGN.md layer 6). A port is a template parameter of the device, so
// the per-packet calls below are direct calls, never virtual.
//
// Every packet crosses as hdr + frame: a 12-byte virtio_net_hdr (num_buffers
// included) in front of the Ethernet frame, in both directions.
//
// Accounting (DESIGN.md "A packet is never lost silently"): every frame a
// port takes from the world is either delivered by recv() or counted by the
// port as a drop with a reason; every send() is Sent, or Dropped and
// counted by the port, or Retry (not taken: the device gives the chain back
// and offers the same packet again later, as vhost's handle_tx does on
// EAGAIN with vhost_discard_vq_desc).
#pragma once

#include <sys/uio.h>

#include <concepts>
#include <cstdint>
#include <span>

namespace pvnet::port {

/// What became of one send().
enum class SendResult : uint8_t {
    Sent,     ///< taken by the world
    Dropped,  ///< rejected for good (bad header, oversize, link gone); counted by the port
    Retry,    ///< no room now (EAGAIN/ENOBUFS): offer the same packet again later
};

/// The calls every port provides.
///   rx_pending(): a frame waits (may be a syscall; the device asks once per burst step).
///   recv(dst):    reads one hdr+frame into dst; returns the bytes written, or 0
///                 when nothing was delivered (none waiting, or dropped: the port
///                 counted why — e.g. the frame did not fit dst).
///   send(src, len): writes one hdr+frame of len bytes (the sum of src's lengths).
template <typename P>
concept Port = requires(P& p, std::span<const iovec> iov, uint32_t len) {
    { p.rx_pending() } noexcept -> std::same_as<bool>;
    { p.recv(iov) } noexcept -> std::same_as<uint32_t>;
    { p.send(iov, len) } noexcept -> std::same_as<SendResult>;
};

/// Optional: a recv() that finds nothing waiting costs no more than asking
/// rx_pending() would (a tap's read that says EAGAIN), and says so: it
/// returns 0 and recv_was_empty() is then true (false after any other recv).
/// The device tries the read instead of asking first: one syscall less per
/// packet, as vhost's handle_rx takes "no frame" from the socket's recvmsg.
template <typename P>
concept HasRecvEmpty = requires(const P& p) {
    { p.recv_was_empty() } noexcept -> std::same_as<bool>;
};

/// One packet of a send_batch(): hdr+frame over `iov`, `len` bytes in all.
struct TxFrame {
    std::span<const iovec> iov;
    uint32_t len = 0;
};

/// What send_batch() did with a burst. frames[0, taken) are done, each Sent
/// or Dropped (counted by the port) as send() would have said; `sent` and
/// `sent_bytes` are the Sent ones. With `retry`, frames[taken] found no room
/// (Retry) and neither it nor any later frame was taken: the device gives
/// them back in order and offers them again. Without it, taken == frames.size().
struct SendBatchResult {
    uint32_t taken = 0;
    uint32_t sent = 0;
    uint64_t sent_bytes = 0;
    bool retry = false;
};

/// Optional: sends a burst in order as one call (a tap's io_uring writes in
/// one enter), so handle_tx hands its burst over at once instead of a send()
/// per packet. The iovecs may be reused once it returns.
template <typename P>
concept HasSendBatch = requires(P& p, std::span<const TxFrame> frames) {
    { p.send_batch(frames) } noexcept -> std::same_as<SendBatchResult>;
};

/// Optional: an fd that is readable while a frame waits, for event mode's
/// epoll (without one the worker polls rx_pending() when it wakes).
template <typename P>
concept HasRxFd = requires(const P& p) {
    { p.rx_fd() } noexcept -> std::convertible_to<int>;
};

/// Optional: an fd that becomes writable when a send() that said Retry may
/// succeed (EPOLLOUT on a tap); without one the device retries on its next pass.
template <typename P>
concept HasTxFd = requires(const P& p) {
    { p.tx_fd() } noexcept -> std::convertible_to<int>;
};

/// Optional: called once at the end of each tx burst that sent anything, so
/// a port that stages what send() took publishes it once per burst.
template <typename P>
concept HasTxFlush = requires(P& p) {
    { p.flush_tx() } noexcept -> std::same_as<void>;
};

/// Optional: hdr+frame bytes of the next frame, 0 if unknown (vhost's
/// peek_head_len), so mergeable rx gathers exactly the buffers it needs.
template <typename P>
concept HasPeekLen = requires(P& p) {
    { p.peek_len() } noexcept -> std::convertible_to<uint32_t>;
};

/// Optional: the largest Ethernet frame (no virtio header) the port can hand
/// over when the guest accepts no GSO (its MTU plus the Ethernet and 802.1Q
/// headers). Without it the device assumes a 1500-byte MTU.
template <typename P>
concept HasMaxFrame = requires(const P& p) {
    { p.max_frame_bytes() } noexcept -> std::convertible_to<uint32_t>;
};

/// Optional: told the features the guest negotiated (every vring stopped),
/// so that the port hands over only what the guest accepts: a tap's
/// TUNSETOFFLOAD, as QEMU applies the guest's offloads to its tap. False:
/// the port refused them, and the device refuses the features.
template <typename P>
concept HasGuestFeatures = requires(P& p, uint64_t features) {
    { p.set_guest_features(features) } noexcept -> std::same_as<bool>;
};

/// Optional: told where the guest's sessions begin and end, so that one
/// session leaves nothing to the next guest on the same device (another
/// tenant, on a vhost-user socket). session_end() (NetDevice::reset: a
/// disconnect, RESET_OWNER; every vring stopped, no recv() or send() running)
/// drops whatever the port holds for the guest, each frame counted as a drop,
/// and forgets what it learned of it; session_start() (an rx vring started)
/// lets traffic to the guest be queued again. Both may come more than once.
template <typename P>
concept HasSession = requires(P& p) {
    { p.session_start() } noexcept -> std::same_as<void>;
    { p.session_end() } noexcept -> std::same_as<void>;
};

}  // namespace pvnet::port
