// Child processes for the experiments: the kernel tools (iperf3, sockperf,
// ping, ip, ss), dpdk-testpmd and `pvnet relay` run as children whose
// stdout and stderr are captured (one pipe, in the order written).
//
// Each child leads its own process group, so a stop or a timeout reaches
// whatever it started (`ip netns exec` execs its command; a shell's
// background jobs stay in the group). When the child itself ends, what is
// left of its group is killed before the child is reaped, while its pid
// still names the group. A child also gets SIGKILL if the thread that
// spawned it dies (PR_SET_PDEATHSIG). Every wait is bounded and ends early
// when request_abort() was called.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pvnet/util/result.h"

namespace pvnet::lab {

/// Makes every wait below end early and kill what it waits for (a signal
/// handler may call it); callers then tear down as on any error.
void request_abort() noexcept;
bool abort_requested() noexcept;

/// How a child ended.
struct ExitStatus {
    int code = -1;           ///< exit code; -1 if a signal ended it
    int signal = 0;          ///< the signal that ended it; 0 if it exited
    bool timed_out = false;  ///< killed by us: its deadline passed or an abort was requested
    bool ok() const noexcept { return code == 0; }
    /// "exited with 3", "killed by signal 9 (timed out)".
    std::string to_string() const;
};

struct SpawnOptions {
    /// stdin is one end of a socketpair, written with send() (send_line);
    /// otherwise stdin is /dev/null.
    bool stdin_socket = false;
};

class Child {
public:
    /// Output kept per child; past it, output is read and dropped
    /// (output_truncated()), so a runaway tool cannot fill memory.
    static constexpr std::size_t kMaxOutput = 8u << 20;

    /// Runs argv[0] (searched in PATH when it has no '/'). Fails, with the
    /// reason, when it cannot be found or exec'd.
    static Result<Child, std::string> spawn(const std::vector<std::string>& argv,
                                            SpawnOptions opts = {});
    Child(Child&& o) noexcept;
    Child& operator=(Child&&) = delete;
    Child(const Child&) = delete;
    /// stop(): SIGTERM to the group, then SIGKILL.
    ~Child();

    /// Also its process group id; -1 once reaped.
    pid_t pid() const noexcept { return pid_; }
    /// False once it has ended (it is then reaped; exit_status() says how).
    bool running();
    const ExitStatus& exit_status() const noexcept { return status_; }

    /// Writes `line` and a newline to its stdin (SpawnOptions::stdin_socket);
    /// false if it could not be written whole. Never raises SIGPIPE.
    bool send_line(std::string_view line);
    /// EOF on its stdin.
    void close_stdin() noexcept;

    /// Reads output until a line equal to `line` arrived; false on EOF or timeout.
    bool wait_for_line(std::string_view line, std::chrono::milliseconds timeout);
    /// Reads output until a line `match` accepts arrived, scanning from byte
    /// `from` of output() on; that line, or nullopt on EOF or timeout.
    std::optional<std::string> wait_for_line_if(const std::function<bool(std::string_view)>& match,
                                                std::chrono::milliseconds timeout,
                                                std::size_t from = 0);
    /// Collects output until the child exits; past `timeout` its group is killed.
    ExitStatus finish(std::chrono::milliseconds timeout);
    /// SIGTERM to its group, up to `grace` for it to exit, then SIGKILL;
    /// collects the output. Idempotent.
    ExitStatus stop(std::chrono::milliseconds grace = std::chrono::seconds(3));

    const std::string& output() const noexcept { return out_; }
    bool output_truncated() const noexcept { return truncated_; }
    /// The last `n` bytes of output, for error messages.
    std::string output_tail(std::size_t n = 4096) const;
    /// False once every writer of its output pipe is gone (EOF seen).
    bool output_open() const noexcept { return fd_ >= 0; }

    /// Reads whatever the children have written (waits up to `wait` for the
    /// first byte); reaps those that ended.
    static void drain(std::span<Child* const> kids, std::chrono::milliseconds wait);
    /// drain() until `done()` holds (true) or `until` or an abort (false).
    static bool pump(std::span<Child* const> kids, std::chrono::steady_clock::time_point until,
                     const std::function<bool()>& done);

private:
    Child(pid_t pid, int out_fd, int in_fd) : pid_(pid), fd_(out_fd), in_(in_fd) {}
    void read_available();
    /// Non-blocking: true once it has exited (group killed, child reaped).
    bool reap();
    /// Blocks until reaped after a SIGKILL of its group.
    void kill_and_reap(bool timed_out);

    pid_t pid_ = -1;
    int fd_ = -1;  // read end of its stdout+stderr
    int in_ = -1;  // our end of its stdin (stdin_socket)
    ExitStatus status_;
    std::string out_;
    bool truncated_ = false;
};

/// A command run to its end.
struct RunOutput {
    ExitStatus exit;
    std::string output;
};
/// Runs argv to its end (killed past `timeout`); fails only if it cannot start.
Result<RunOutput, std::string> run(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout);
/// As run(), but anything other than exit code 0 is an error naming the
/// command, how it ended and its output.
Result<std::string, std::string> run_ok(const std::vector<std::string>& argv,
                                        std::chrono::milliseconds timeout);

/// `name` if it contains '/' and is executable, else its first executable
/// match in PATH.
Result<std::string, std::string> find_executable(const std::string& name);

}  // namespace pvnet::lab
