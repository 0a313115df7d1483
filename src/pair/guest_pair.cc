// The in-process pairing: memory, doorbells, the guest driver, and the
// device description the backend is configured from.
#include "pvnet/pair/guest_pair.h"

#include <unistd.h>

#include <span>
#include <vector>

#include "pvnet/virtio/virtio_config.h"

namespace pvnet::pair {

std::optional<std::string> SharedMemoryPair::setup_memory(uint64_t bytes, uint16_t nvrings,
                                                          const char* name) noexcept {
    auto g = mem::MemoryRegion::create(bytes, name);
    if (!g) return "guest memory";
    guest_.emplace(std::move(*g));
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer knows memory by address: through two views it would see
    // neither the rings' release/acquire pairs (each side touches its own
    // view's idx) nor, so, the order they give the buffers, and would report
    // a buffer the device wrote on rx and later read on tx from another
    // thread. One view under TSan: both sides' accesses meet at one address,
    // so every ring order is checked and no race hides between the views.
    const std::span<std::byte> backend_bytes = guest_->bytes();
#else
    const int fd = dup(guest_->fd());
    if (fd < 0) return "dup";
    auto v = mem::MemoryRegion::map_fd(fd, guest_->size(), 0);
    if (!v) return "backend mapping";
    backend_view_.emplace(std::move(*v));
    const std::span<std::byte> backend_bytes = backend_view_->bytes();
#endif
    if (!guest_table_.add(mem::GuestAddr(kGuestBase), guest_->bytes()) ||
        !backend_table_.add(mem::GuestAddr(kGuestBase), backend_bytes)) {
        return "memory table";
    }
    for (uint16_t i = 0; i < nvrings; ++i) {
        auto k = notify::EventFd::create();
        auto c = notify::EventFd::create();
        if (!k || !c) return "eventfd";
        kicks_.push_back(std::move(*k));
        calls_.push_back(std::move(*c));
    }
    return std::nullopt;
}

backend::DeviceSetup SharedMemoryPair::device_setup(
    uint64_t features, std::span<const ring::SplitRingAddrs> rings) const {
    backend::DeviceSetup s;
    s.features = features;
    s.mem = &backend_table_;
    for (std::size_t i = 0; i < rings.size() && i < kicks_.size(); ++i) {
        backend::VringSetup v;
        v.addrs = rings[i];
        v.kick = &kicks_[i];
        v.call = &calls_[i];
        s.vrings.push_back(v);
    }
    return s;
}

std::optional<std::string> GuestPair::setup(uint16_t queue_size, bool event_idx) noexcept {
    frontend::VirtioNetConfig fc;
    fc.rx_size = fc.tx_size = queue_size;
    fc.event_idx = event_idx;
    return setup(fc);
}

std::optional<std::string> GuestPair::setup(const frontend::VirtioNetConfig& fc) noexcept {
    const uint16_t nvrings =
        static_cast<uint16_t>(2u * fc.queue_pairs + (fc.ctrl_vq ? 1u : 0u));
    if (auto err = setup_memory(frontend::VirtioNet::area_bytes(fc), nvrings, "pvnet-guest")) {
        return err;
    }
    std::vector<frontend::VirtioNetFds> fds;
    for (uint16_t p = 0; p < fc.queue_pairs; ++p) {
        fds.push_back({&rx_kick(p), &tx_kick(p), &rx_call(p), &tx_call(p)});
    }
    notify::QueueFds ctrl_fds;
    if (fc.ctrl_vq) {
        ctrl_fds = {&kick(backend::ctrl_vring(fc.queue_pairs)),
                    &call(backend::ctrl_vring(fc.queue_pairs))};
    }
    auto f = frontend::VirtioNet::create(guest_table(), mem::GuestAddr(kGuestBase), guest_bytes(),
                                         fc, fds, ctrl_fds);
    if (!f) return "frontend setup";
    fe_ = std::move(*f);
    fc_ = fc;
    return std::nullopt;
}

uint64_t GuestPair::features(uint64_t offloads) const noexcept {
    using namespace virtio;
    uint64_t f = feature_mask(VIRTIO_F_VERSION_1) | offloads;
    if (fc_.event_idx) f |= feature_mask(VIRTIO_RING_F_EVENT_IDX);
    if (fc_.indirect_desc) f |= feature_mask(VIRTIO_RING_F_INDIRECT_DESC);
    if (fc_.mergeable_rx) f |= feature_mask(VIRTIO_NET_F_MRG_RXBUF);
    if (fc_.ctrl_vq) f |= feature_mask(VIRTIO_NET_F_CTRL_VQ) | feature_mask(VIRTIO_NET_F_NOTF_COAL);
    // Steering among the pairs is commanded on the control queue.
    if (fc_.ctrl_vq && fc_.queue_pairs > 1) {
        f |= feature_mask(VIRTIO_NET_F_MQ) | feature_mask(VIRTIO_NET_F_RSS);
    }
    // The driver's header is virtio_net_hdr_v1_hash: the device must agree.
    if (fc_.hash_report) f |= feature_mask(VIRTIO_NET_F_HASH_REPORT);
    return f;
}

backend::DeviceSetup GuestPair::device_setup(uint64_t offloads) const {
    std::vector<ring::SplitRingAddrs> rings;
    for (uint16_t p = 0; p < fc_.queue_pairs; ++p) {
        rings.push_back(fe_->queue_pair(p).rx_addrs());
        rings.push_back(fe_->queue_pair(p).tx_addrs());
    }
    if (fc_.ctrl_vq) rings.push_back(fe_->ctrl_addrs());
    return SharedMemoryPair::device_setup(features(offloads), rings);
}

bool GuestPair::any_broken(const backend::NetDevice& dev) const noexcept {
    if (dev.status() != 0) return true;
    for (uint16_t p = 0; p < fc_.queue_pairs; ++p) {
        const frontend::QueuePair& q = fe_->queue_pair(p);
        if (q.rx_queue().broken() || q.tx_queue().broken()) return true;
    }
    return false;
}

}  // namespace pvnet::pair
