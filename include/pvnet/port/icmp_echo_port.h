// IcmpEchoPort: a host at one IPv4 address behind a vhost-user socket, as
// testpmd's icmpecho forwarding: it answers ARP requests for its address
// and ICMPv4 echo requests to it, and drops everything else, counting why
// (drops, per IcmpDrop). Replies go back to the guest (recv → handle_rx)
// with a zeroed virtio_net_hdr (the device offers no offloads with it).
//
// Everything in a frame is the guest's: the headers are copied once into
// the port's memory and only the copy is checked and used (ARP fields,
// IPv4 version/IHL/total length/fragment bits/header checksum, ICMP length).
// The echo reply's ICMP checksum is updated incrementally (RFC 1624) for
// the type change, so the payload is never read; the IPv4 checksum is
// recomputed over the rewritten header.
//
// Accounting: every send() is taken (tx_pkts = replies + drops.total()) or
// a Retry (a reply found the queue full: queue().stats.retry_full).
// Port contract: include/pvnet/port/port.h.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "pvnet/port/port.h"
#include "pvnet/port/reply_queue.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::port {

/// Why a frame got no reply.
enum class IcmpDrop : uint8_t {
    Short,            ///< shorter than hdr + Ethernet header, or iovecs short of len
    Oversize,         ///< frame longer than max_frame_bytes()
    OtherEthertype,   ///< neither IPv4 nor ARP (802.1Q included)
    ArpMalformed,     ///< too short, or not Ethernet/IPv4 hardware and protocol sizes
    ArpNotRequest,    ///< an ARP reply or other opcode
    ArpNotForUs,      ///< target protocol address is not ours
    IpMalformed,      ///< version not 4, IHL < 5, total length beyond the frame or below IHL
    IpBadChecksum,    ///< IPv4 header checksum wrong
    IpFragment,       ///< MF set or a fragment offset: not reassembled
    IpNotForUs,       ///< destination is not our address
    NotIcmp,          ///< another IP protocol
    IcmpMalformed,    ///< shorter than an ICMP echo header
    IcmpNotEcho,      ///< not an echo request (type 8 code 0)
    Count
};

std::string_view to_string(IcmpDrop d) noexcept;

class IcmpEchoPort {
public:
    static constexpr uint32_t kHdrBytes = sizeof(virtio::virtio_net_hdr);
    static constexpr uint32_t kDefaultSlots = 256;
    using Ipv4 = std::array<uint8_t, 4>;
    using Mac = std::array<uint8_t, 6>;

    static Result<std::unique_ptr<IcmpEchoPort>, PortError> create(
        Ipv4 addr, Mac mac, uint32_t max_frame_bytes, uint32_t slots = kDefaultSlots,
        ReplyQueue::Publish publish = ReplyQueue::Publish::EachFrame) noexcept;

    bool rx_pending() noexcept { return q_->pending(); }
    uint32_t peek_len() noexcept { return q_->peek_len(); }
    uint32_t recv(std::span<const iovec> dst) noexcept { return q_->pop(dst); }
    /// Answers an ARP request or echo request (Sent, reply queued); drops
    /// anything else (Dropped, counted); Retry when a reply finds the queue full.
    SendResult send(std::span<const iovec> src, uint32_t len) noexcept;
    /// HasTxFlush: publishes the burst's replies (ReplyQueue::Publish::PerBurst).
    void flush_tx() noexcept { q_->publish(); }
    int rx_fd() const noexcept { return q_->rx_fd(); }
    uint32_t max_frame_bytes() const noexcept { return max_frame_; }
    /// HasSession: replies still queued at a session's end are the departed
    /// guest's; they are dropped (queue().stats.drop_session_end), never
    /// handed to the next one.
    void session_start() noexcept {}
    void session_end() noexcept { (void)q_->drain(); }

    const ReplyQueue& queue() const noexcept { return *q_; }

    Counter tx_pkts;       ///< packets taken: answered or dropped (not Retry)
    Counter arp_replies;   ///< ARP replies queued
    Counter echo_replies;  ///< ICMP echo replies queued
    CounterArray<IcmpDrop> drops;

private:
    IcmpEchoPort(std::unique_ptr<ReplyQueue> q, Ipv4 addr, Mac mac, uint32_t max_frame) noexcept
        : q_(std::move(q)), addr_(addr), mac_(mac), max_frame_(max_frame) {}
    SendResult drop(IcmpDrop why) noexcept;
    SendResult arp(std::span<const std::byte> frame) noexcept;
    SendResult icmp(std::span<const iovec> src, uint32_t frame_len,
                    std::span<std::byte> frame) noexcept;

    std::unique_ptr<ReplyQueue> q_;
    Ipv4 addr_;
    Mac mac_;
    uint32_t max_frame_;
};

static_assert(Port<IcmpEchoPort> && HasRxFd<IcmpEchoPort> && HasPeekLen<IcmpEchoPort> &&
              HasMaxFrame<IcmpEchoPort> && HasSession<IcmpEchoPort> &&
              HasTxFlush<IcmpEchoPort>);

}  // namespace pvnet::port
