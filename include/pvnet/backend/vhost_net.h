// VhostNet<Port>: the virtio-net device of NetDevice (net_device.h) over a
// concrete port, one port per queue pair (DESIGN.md layer 7; Linux
// drivers/vhost/net.c). The port is a template parameter so the per-packet
// path has no virtual call; only the packet loops, handle_tx.h and
// handle_rx.h, are templates. Everything else — the control plane, the
// worker, signalling and coalescing, busy polling, mergeable rx's buffer
// gathering — is compiled once in src/backend/.
//
// A kick queues handle_tx, a readable port (or an rx kick after a refill)
// queues handle_rx; each handler runs until its ring is empty or it has
// moved the packet weight or the byte weight, then requeues itself behind
// the other work so that neither direction starves the other (seed 001:
// "vhost_net: use packet weight for rx handler, too").
//
// The direct path (seed 002: "write directly when the ring would need a
// kick and the batch is small"): the driver's thread, about to kick an idle
// worker for a small batch, calls process_tx_now() and runs the tx loop
// itself, under the pair's tx_mu.
#pragma once

#include <memory>
#include <new>
#include <span>
#include <vector>

#include "pvnet/backend/net_device.h"
#include "pvnet/port/port.h"

namespace pvnet::backend {

template <port::Port P>
class VhostNet final : public NetDevice {
public:
    /// A device of ports.size() queue pairs (max_virtqueue_pairs), pair i
    /// served by *ports[i], no vring set up: configure it through the
    /// control plane. The ports must outlive the device.
    static Result<std::unique_ptr<VhostNet>, DeviceError> create(
        const VhostNetOptions& opt, std::span<P* const> ports) noexcept;
    /// create() for the pairs `setup` describes (every pair on `port`;
    /// pvnet's in-process pairing has one), then configure(setup).
    static Result<std::unique_ptr<VhostNet>, DeviceError> create(const DeviceSetup& setup,
                                                                 const VhostNetOptions& opt,
                                                                 P& port) noexcept;

    ~VhostNet() override { stop(); }

    P& port(uint16_t pair = 0) noexcept { return *ports_[pair]; }

private:
    explicit VhostNet(const VhostNetOptions& opt) noexcept : NetDevice(opt) {}

    uint32_t run_tx(Pair& p, bool direct) noexcept override;
    void run_rx(Pair& p) noexcept override;
    bool port_rx_pending(Pair& p) noexcept override { return ports_[p.index]->rx_pending(); }
    bool apply_port_features(uint64_t features) noexcept override {
        if constexpr (port::HasGuestFeatures<P>) {
            for (P* port : ports_) {
                if (!port->set_guest_features(features)) return false;
            }
        }
        return true;
    }
    void port_session(Pair& p, bool start) noexcept override {
        if constexpr (port::HasSession<P>) {
            if (start) {
                ports_[p.index]->session_start();
            } else {
                ports_[p.index]->session_end();
            }
        }
    }
    /// One mergeable packet: gather, recv, num_buffers, used entries.
    /// Ok: `bytes` written (0: dropped) in `used` entries staged; Empty:
    /// `given_back` chains were too few for a packet of known length (0:
    /// no buffers at all).
    ring::PopStatus recv_mergeable(Pair& p, uint32_t& bytes, uint32_t& used,
                                   uint16_t& given_back) noexcept;
    /// HasSendBatch: hands the staged packets to the port in one call and
    /// stages the used entries of those it took; the rest and the `after`
    /// chains popped since (unused) go back to the ring, in order. Returns
    /// the staged chains given back (0: all taken); `bytes` loses theirs.
    uint32_t flush_tx_batch(Pair& p, uint16_t after, uint32_t& sent, uint64_t& sent_bytes,
                            uint64_t& bytes) noexcept;
    /// recv_mergeable's fast path for a packet of known length `need`: the
    /// next chain alone holds it. True: handled (`st`, `bytes`, `used` as
    /// recv_mergeable's); false: that chain is given back untouched, for the
    /// general path (a bad chain, one too small, or a header split over pieces).
    bool recv_one_buffer(Pair& p, uint32_t need, ring::PopStatus& st, uint32_t& bytes,
                         uint32_t& used) noexcept;
    /// HASH_REPORT: the port receives into `chain` without the hash fields,
    /// which are then filled in. The chain's length (report_hash's).
    uint32_t recv_hashed(Pair& p, std::span<const iovec> chain) noexcept;

    std::vector<P*> ports_;
};

template <port::Port P>
Result<std::unique_ptr<VhostNet<P>>, DeviceError> VhostNet<P>::create(
    const VhostNetOptions& opt, std::span<P* const> ports) noexcept {
    if (ports.empty() || ports.size() > 0x8000u) return unexpected(DeviceError::BadVring);
    std::unique_ptr<VhostNet> d(new (std::nothrow) VhostNet(opt));
    if (!d) return unexpected(DeviceError::NoMemory);
    std::vector<PortFds> fds(ports.size());
    std::vector<uint32_t> max_frames(ports.size(), 0);
    for (std::size_t i = 0; i < ports.size(); ++i) {
        if constexpr (port::HasRxFd<P>) fds[i].rx_fd = ports[i]->rx_fd();
        if constexpr (port::HasTxFd<P>) fds[i].tx_fd = ports[i]->tx_fd();
        if constexpr (port::HasMaxFrame<P>) max_frames[i] = ports[i]->max_frame_bytes();
    }
    d->ports_.assign(ports.begin(), ports.end());
    if (auto st = d->init(fds, max_frames, port::HasSendBatch<P>); !st) {
        return unexpected(st.error());
    }
    // No session yet: a port takes traffic for the guest once its rx vring starts.
    if constexpr (port::HasSession<P>) {
        for (P* port : d->ports_) port->session_end();
    }
    return d;
}

template <port::Port P>
Result<std::unique_ptr<VhostNet<P>>, DeviceError> VhostNet<P>::create(const DeviceSetup& setup,
                                                                      const VhostNetOptions& opt,
                                                                      P& port) noexcept {
    const std::size_t pairs = std::max<std::size_t>(1, setup.vrings.size() / 2u);
    const std::vector<P*> ports(pairs, &port);
    auto d = create(opt, std::span<P* const>(ports));
    if (!d) return d;
    if (auto st = (*d)->configure(setup); !st) return unexpected(st.error());
    return d;
}

}  // namespace pvnet::backend

#include "pvnet/backend/handle_rx.h"
#include "pvnet/backend/handle_tx.h"
