#include "stop_signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace pvnet::app {

int block_stop_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw std::runtime_error("sigmask failed");
    const int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
    return fd;
}

StopDeadline::StopDeadline(std::chrono::milliseconds limit, std::function<void()> last) {
    thread_ = std::thread([this, limit, last = std::move(last)] {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
        std::fprintf(stderr, "pvnet: the stop did not finish in %lld ms; exiting without it\n",
                     static_cast<long long>(limit.count()));
        if (last) last();
        std::fflush(nullptr);
        // Not exit(): its destructors would wait for what is wedged.
        ::_exit(1);
    });
}

StopDeadline::~StopDeadline() {
    {
        const std::lock_guard<std::mutex> lock(mu_);
        done_ = true;
    }
    cv_.notify_one();
    thread_.join();
}

}  // namespace pvnet::app
