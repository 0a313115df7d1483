// Testbed: what every in-process experiment sets up — guest memory mapped
// twice (the guest's view and, separately, the backend's), the four
// doorbells (two more with a control virtqueue), and the guest driver. The two sides share bytes, never
// pointers, so what is measured here is what two processes would pay.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/notify/event_fd.h"

namespace pvnet::bench {

inline constexpr uint64_t kGuestBase = 0x100000;

inline uint64_t now_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// CPU time a thread has used (CLOCK_THREAD_CPUTIME_ID of that thread).
inline uint64_t thread_cpu_ns(pthread_t t) noexcept {
    clockid_t c;
    if (pthread_getcpuclockid(t, &c) != 0) return 0;
    timespec ts{};
    clock_gettime(c, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

struct Testbed {
    std::optional<mem::MemoryRegion> guest;
    std::optional<mem::MemoryRegion> backend_view;
    mem::MemoryTable guest_table;
    mem::MemoryTable backend_table;
    std::optional<notify::EventFd> rx_kick, tx_kick, rx_call, tx_call;
    std::optional<notify::EventFd> ctrl_kick, ctrl_call;  ///< with fc.ctrl_vq only
    std::unique_ptr<frontend::VirtioNet> fe;
    bool mergeable_rx = false;   ///< fc.mergeable_rx: the backend gets it too
    bool indirect_desc = false;  ///< fc.indirect_desc: the backend's rings accept it

    /// One queue pair of `queue_size` on both rings.
    std::optional<std::string> setup(uint16_t queue_size, bool event_idx) noexcept {
        frontend::VirtioNetConfig fc;
        fc.rx_size = fc.tx_size = queue_size;
        fc.event_idx = event_idx;
        return setup(fc);
    }

    /// Builds everything; on failure returns a message.
    std::optional<std::string> setup(const frontend::VirtioNetConfig& fc) noexcept {
        const uint64_t area = frontend::VirtioNet::area_bytes(fc);
        auto g = mem::MemoryRegion::create(area, "pvnet-guest");
        if (!g) return "guest memory";
        guest.emplace(std::move(*g));
        auto v = mem::MemoryRegion::map_fd(dup(guest->fd()), guest->size(), 0);
        if (!v) return "backend mapping";
        backend_view.emplace(std::move(*v));
        if (!guest_table.add(mem::GuestAddr(kGuestBase), guest->bytes()) ||
            !backend_table.add(mem::GuestAddr(kGuestBase), backend_view->bytes())) {
            return "memory table";
        }
        auto make_fd = [](std::optional<notify::EventFd>& fd) {
            auto e = notify::EventFd::create();
            if (e) fd.emplace(std::move(*e));
            return e.has_value();
        };
        for (auto* fd : {&rx_kick, &tx_kick, &rx_call, &tx_call}) {
            if (!make_fd(*fd)) return "eventfd";
        }
        if (fc.ctrl_vq && (!make_fd(ctrl_kick) || !make_fd(ctrl_call))) return "eventfd";
        const frontend::VirtioNetFds fds{&*rx_kick, &*tx_kick, &*rx_call, &*tx_call};
        auto f = frontend::VirtioNet::create(guest_table, mem::GuestAddr(kGuestBase), guest->size(),
                                             fc, std::span<const frontend::VirtioNetFds>(&fds, 1),
                                             backend_ctrl_fds());
        if (!f) return "frontend setup";
        fe = std::move(*f);
        mergeable_rx = fc.mergeable_rx;
        indirect_desc = fc.indirect_desc;
        return std::nullopt;
    }

    backend::VhostNetFds backend_fds() const noexcept {
        return {&*rx_kick, &*tx_kick, &*rx_call, &*tx_call};
    }
    /// The control queue's doorbells (null without fc.ctrl_vq).
    notify::QueueFds backend_ctrl_fds() const noexcept {
        return {ctrl_kick ? &*ctrl_kick : nullptr, ctrl_call ? &*ctrl_call : nullptr};
    }

    /// The one queue pair the experiments use.
    frontend::QueuePair& qp() noexcept { return fe->queue_pair(0); }

    /// The rings as the guest programmed them, for the backend; with a
    /// control virtqueue, VIRTIO_NET_F_NOTF_COAL is taken as negotiated, and
    /// MRG_RXBUF and INDIRECT_DESC as the guest set them.
    backend::VhostNetConfig backend_config(bool event_idx) const noexcept {
        backend::VhostNetConfig bc;
        bc.rx.addrs = fe->queue_pair(0).rx_addrs();
        bc.tx.addrs = fe->queue_pair(0).tx_addrs();
        bc.rx.event_idx = bc.tx.event_idx = event_idx;
        bc.mergeable_rx = mergeable_rx;
        bc.rx.indirect = bc.tx.indirect = indirect_desc;
        if (fe->ctrl_queue() != nullptr) {
            bc.ctrl.emplace();
            bc.ctrl->ring.addrs = fe->ctrl_addrs();
            bc.ctrl->ring.event_idx = event_idx;
            bc.ctrl->notf_coal = true;
        }
        return bc;
    }

    bool any_broken(const ring::SplitDeviceQueue& rx, const ring::SplitDeviceQueue& tx) const noexcept {
        const frontend::QueuePair& q = fe->queue_pair(0);
        return rx.broken() || tx.broken() || q.rx_queue().broken() || q.tx_queue().broken();
    }
};

}  // namespace pvnet::bench
