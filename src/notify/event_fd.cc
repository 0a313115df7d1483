// eventfd(2) doorbells; the header says why peer-held ones never block.
#include "pvnet/notify/event_fd.h"

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string_view>
#include <utility>

namespace pvnet::notify {

/// An io_uring whose completions signal one eventfd (IORING_REGISTER_EVENTFD):
/// a signal is one NOP, and the kernel adds to the count with
/// eventfd_signal(), which saturates instead of blocking.
class KernelSignal {
public:
    /// nullptr when io_uring is unavailable (old kernel, disabled, seccomp).
    static KernelSignal* create(int efd) noexcept {
        auto* k = new (std::nothrow) KernelSignal;
        if (k == nullptr) return nullptr;
        // One NOP in flight at most: an SQ of 1 (the kernel makes the CQ 2).
        if (io_uring_queue_init(1, &k->ring_, 0) != 0) {
            delete k;
            return nullptr;
        }
        k->live_ = true;
        if (io_uring_register_eventfd(&k->ring_, efd) != 0) {
            delete k;
            return nullptr;
        }
        return k;
    }
    ~KernelSignal() {
        if (live_) io_uring_queue_exit(&ring_);
    }
    KernelSignal(const KernelSignal&) = delete;
    KernelSignal& operator=(const KernelSignal&) = delete;

    void signal() noexcept {
        // One submitter at a time: the SQ and CQ heads are ours to move.
        const std::lock_guard<std::mutex> lock(mu_);
        // No SQE free: the last signal's NOP was never submitted; it is this one.
        if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) io_uring_prep_nop(sqe);
        (void)io_uring_submit(&ring_);
        // Nothing is waited for: the completion's only job was the signal.
        io_uring_cq_advance(&ring_, io_uring_cq_ready(&ring_));
    }

private:
    KernelSignal() = default;
    io_uring ring_{};
    bool live_ = false;
    std::mutex mu_;
};

namespace {

bool is_eventfd(int fd) noexcept {
    char path[48];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    constexpr std::string_view kName = "anon_inode:[eventfd]";
    char link[64];
    const ssize_t n = readlink(path, link, sizeof link);
    return n == static_cast<ssize_t>(kName.size()) && kName == std::string_view(link, kName.size());
}

/// fdinfo's "eventfd-semaphore:" (printed by kernels after 6.1): 1 or 0, -1 when absent.
int fdinfo_semaphore(int fd) noexcept {
    char path[48];
    std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    const int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return -1;
    char buf[1024];
    const ssize_t n = read(f, buf, sizeof buf - 1);
    close(f);
    if (n <= 0) return -1;
    buf[n] = '\0';
    const char* at = std::strstr(buf, "eventfd-semaphore:");
    if (at == nullptr) return -1;
    return std::strtol(at + std::strlen("eventfd-semaphore:"), nullptr, 10) != 0 ? 1 : 0;
}

void log_once_no_uring() noexcept {
    static std::once_flag once;
    std::call_once(once, [] {
        std::fprintf(stderr,
                     "pvnet notify: io_uring unavailable: eventfds shared with a peer are "
                     "signalled by write() on O_NONBLOCK, which a peer clearing O_NONBLOCK "
                     "can block\n");
    });
}

}  // namespace

bool semaphore_by_probe(const EventFd& e) noexcept {
    // A semaphore read takes 1 whatever the count; any other takes it all (>= 2).
    e.signal();
    e.signal();
    const uint64_t got = e.consume();
    if (got > 2) e.signal();  // a kick pending before the probe stays pending
    return got == 1;
}

Result<EventFd, NotifyError> EventFd::create() noexcept {
    const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        std::fprintf(stderr, "pvnet notify: eventfd: %s\n", std::strerror(errno));
        return unexpected(NotifyError::SystemError);
    }
    return EventFd(fd);
}

Result<EventFd, NotifyError> EventFd::from_peer(int fd, PeerUse use) noexcept {
    EventFd e(fd);  // owns fd from here: a refused one is closed
    if (fd < 0 || !is_eventfd(fd)) return unexpected(NotifyError::NotEventFd);
    e.hand_over();
    if (use == PeerUse::Kick) {
        // EFD_SEMAPHORE is fixed at eventfd(2) time: checked once, for good.
        const int sem = fdinfo_semaphore(fd);
        if (sem == 1 || (sem < 0 && semaphore_by_probe(e))) {
            return unexpected(NotifyError::Semaphore);
        }
    }
    return e;
}

EventFd::EventFd(EventFd&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), ks_(o.ks_.exchange(nullptr, std::memory_order_relaxed)) {}

EventFd& EventFd::operator=(EventFd&& o) noexcept {
    if (this != &o) {
        release();
        fd_ = std::exchange(o.fd_, -1);
        ks_.store(o.ks_.exchange(nullptr, std::memory_order_relaxed), std::memory_order_relaxed);
    }
    return *this;
}

EventFd::~EventFd() { release(); }

void EventFd::release() noexcept {
    delete ks_.exchange(nullptr, std::memory_order_relaxed);
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
}

void EventFd::hand_over() const noexcept {
    if (fd_ < 0 || kernel_signalled()) return;
    KernelSignal* k = KernelSignal::create(fd_);
    if (k == nullptr) {
        log_once_no_uring();
        const int fl = fcntl(fd_, F_GETFL);
        if (fl >= 0) (void)fcntl(fd_, F_SETFL, fl | O_NONBLOCK);
        return;
    }
    KernelSignal* none = nullptr;
    // ORDER: release publishes the ring's setup to signal()'s acquire load.
    if (!ks_.compare_exchange_strong(none, k, std::memory_order_release,
                                     std::memory_order_relaxed)) {
        delete k;  // another hand_over() won
    }
}

void EventFd::signal() const noexcept {
    // ORDER: acquire; pairs with hand_over()'s release.
    if (KernelSignal* k = ks_.load(std::memory_order_acquire)) {
        k->signal();
        return;
    }
    const uint64_t one = 1;
    // EAGAIN means the counter is saturated: the peer is already woken.
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof one);
}

uint64_t EventFd::consume() const noexcept {
    uint64_t v = 0;
    iovec iov{&v, sizeof v};
    // RWF_NOWAIT: EAGAIN on an empty count even if a peer cleared O_NONBLOCK.
    ssize_t n = preadv2(fd_, &iov, 1, -1, RWF_NOWAIT);
    // Kernels before 5.12 take no RWF_NOWAIT on an eventfd: read(), which
    // blocks on an empty count if a peer cleared O_NONBLOCK.
    if (n < 0 && errno == EOPNOTSUPP) n = read(fd_, &v, sizeof v);
    if (n != static_cast<ssize_t>(sizeof v)) return 0;
    return v;
}

bool EventFd::wait(int64_t timeout_us) const noexcept {
    pollfd p{fd_, POLLIN, 0};
    timespec ts{};
    timespec* tsp = nullptr;
    if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1'000'000;
        ts.tv_nsec = (timeout_us % 1'000'000) * 1000;
        tsp = &ts;
    }
    for (;;) {
        const int r = ppoll(&p, 1, tsp, nullptr);
        if (r >= 0) return r > 0;
        if (errno != EINTR) return false;
    }
}

}  // namespace pvnet::notify
