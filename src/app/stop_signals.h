// SIGINT/SIGTERM for the long-running commands (relay, serve).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace pvnet::app {

/// SIGINT and SIGTERM as a readable fd. Blocked before any thread starts, so
/// every thread inherits the mask and only the signalfd sees them.
int block_stop_signals();

/// Bounds the orderly stop that follows a stop signal: if this object still
/// lives `limit` after it was made (a thread wedged where the stop waits for
/// it), logs, runs `last` (what must not be left behind, e.g. socket files)
/// and ends the process with status 1, so a stop signal always ends it.
class StopDeadline {
public:
    StopDeadline(std::chrono::milliseconds limit, std::function<void()> last);
    ~StopDeadline();  // the stop finished in time
    StopDeadline(const StopDeadline&) = delete;
    StopDeadline& operator=(const StopDeadline&) = delete;

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

}  // namespace pvnet::app
