// Child processes: fork and exec (the path resolved before the fork, so the
// child only makes async-signal-safe calls), a CLOEXEC pipe that carries
// exec's errno back, the output pipe kept drained with poll. Ends are
// detected with waitid(WNOWAIT) so the group can be killed while the
// leader's pid still names it, then the leader is reaped.
#include "pvnet/lab/child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace pvnet::lab {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_abort{false};

// After the child ended: how long its output may take to reach EOF (a
// process outside its group may still hold the pipe; it is not waited for).
constexpr milliseconds kEofGrace{200};
// CLOSE_RANGE_CLOEXEC (linux/close_range.h), not in every libc's headers.
constexpr unsigned kCloseRangeCloexec = 1U << 2;

void close_fd(int& fd) noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

ExitStatus status_of(int wstatus, bool timed_out) {
    ExitStatus s;
    s.timed_out = timed_out;
    if (WIFEXITED(wstatus)) {
        s.code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
        s.signal = WTERMSIG(wstatus);
    }
    return s;
}

void reap_blocking(pid_t pid, int& wstatus) {
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
}

}  // namespace

void request_abort() noexcept { g_abort.store(true, std::memory_order_relaxed); }
bool abort_requested() noexcept { return g_abort.load(std::memory_order_relaxed); }

std::string ExitStatus::to_string() const {
    std::string s = signal != 0 ? "killed by signal " + std::to_string(signal)
                                : "exited with " + std::to_string(code);
    if (timed_out) s += " (timed out)";
    return s;
}

Result<std::string, std::string> find_executable(const std::string& name) {
    if (name.empty()) return unexpected(std::string("no command"));
    if (name.find('/') != std::string::npos) {
        if (::access(name.c_str(), X_OK) == 0) return name;
        return unexpected(name + ": " + std::strerror(errno));
    }
    const char* path = std::getenv("PATH");
    std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
    for (;;) {
        const auto colon = rest.find(':');
        const std::string_view dir = rest.substr(0, colon);
        std::string cand(dir.empty() ? std::string_view(".") : dir);
        cand += '/';
        cand += name;
        struct stat st {};
        if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            ::access(cand.c_str(), X_OK) == 0) {
            return cand;
        }
        if (colon == std::string_view::npos) break;
        rest.remove_prefix(colon + 1);
    }
    return unexpected(name + ": not found in PATH");
}

Result<Child, std::string> Child::spawn(const std::vector<std::string>& argv, SpawnOptions opts) {
    if (argv.empty()) return unexpected(std::string("spawn: no command"));
    auto exe = find_executable(argv[0]);
    if (!exe) return unexpected("cannot run " + exe.error());
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);

    int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1};
    const auto fail = [&](const char* what) {
        const int e = errno;
        for (int* fd : {&out[0], &out[1], &err[0], &err[1], &in[0], &in[1]}) close_fd(*fd);
        return unexpected(std::string(what) + ": " + std::strerror(e));
    };
    if (::pipe2(out, O_CLOEXEC) != 0) return fail("pipe");
    if (::pipe2(err, O_CLOEXEC) != 0) return fail("pipe");
    if (opts.stdin_socket) {
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) return fail("socketpair");
    } else {
        in[1] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in[1] < 0) return fail("/dev/null");
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return fail("fork");
    if (pid == 0) {
        // Only async-signal-safe calls from here to exec.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
        ::setpgid(0, 0);
        // No blocked signals and default dispositions, whatever the parent
        // (a relay, a bench with handlers) set for itself.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
        if (::dup2(in[1], 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(out[1], 2) < 0) ::_exit(127);
        // Descriptors the parent opened without O_CLOEXEC stay with it.
        ::syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec);
        ::execve(exe->c_str(), args.data(), environ);
        const int e = errno;
        (void)!::write(err[1], &e, sizeof e);
        ::_exit(127);
    }
    // Also here: no window in which a kill of the group misses the child.
    ::setpgid(pid, pid);
    close_fd(out[1]);
    close_fd(err[1]);
    close_fd(in[1]);
    int exec_errno = 0;
    ssize_t n;
    while ((n = ::read(err[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    close_fd(err[0]);
    if (n > 0) {
        int st = 0;
        reap_blocking(pid, st);
        close_fd(out[0]);
        close_fd(in[0]);
        return unexpected("cannot run " + *exe + ": " + std::strerror(exec_errno));
    }
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    if (in[0] >= 0) ::fcntl(in[0], F_SETFL, O_NONBLOCK);
    return Child(pid, out[0], in[0]);
}

Child::Child(Child&& o) noexcept
    : pid_(o.pid_),
      fd_(o.fd_),
      in_(o.in_),
      status_(o.status_),
      out_(std::move(o.out_)),
      truncated_(o.truncated_) {
    o.pid_ = -1;
    o.fd_ = -1;
    o.in_ = -1;
}

Child::~Child() {
    stop();
    close_fd(fd_);
    close_fd(in_);
}

void Child::read_available() {
    char buf[8192];
    while (fd_ >= 0) {
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n > 0) {
            const std::size_t keep = std::min(static_cast<std::size_t>(n), kMaxOutput - out_.size());
            out_.append(buf, keep);
            if (keep < static_cast<std::size_t>(n)) truncated_ = true;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        close_fd(fd_);  // EOF (every writer gone) or a broken pipe
    }
}

bool Child::reap() {
    if (pid_ < 0) return true;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        // ECHILD: not our child (cannot happen for a pid we forked): gone.
        pid_ = -1;
        return true;
    }
    if (info.si_pid == 0) return false;
    // Unreaped, the leader keeps its pid, and so the group id, from reuse.
    ::kill(-pid_, SIGKILL);
    int st = 0;
    reap_blocking(pid_, st);
    status_ = status_of(st, false);
    pid_ = -1;
    return true;
}

void Child::kill_and_reap(bool timed_out) {
    if (pid_ < 0) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);  // in case it had left its group
    int st = 0;
    reap_blocking(pid_, st);
    status_ = status_of(st, timed_out);
    pid_ = -1;
}

bool Child::running() { return !reap(); }

bool Child::send_line(std::string_view line) {
    if (in_ < 0) return false;
    std::string s(line);
    s += '\n';
    std::size_t done = 0;
    while (done < s.size()) {
        const ssize_t n = ::send(in_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;  // EAGAIN included: it does not read its stdin
        done += static_cast<std::size_t>(n);
    }
    return true;
}

void Child::close_stdin() noexcept { close_fd(in_); }

std::string Child::output_tail(std::size_t n) const {
    return out_.size() > n ? out_.substr(out_.size() - n) : out_;
}

void Child::drain(std::span<Child* const> kids, milliseconds wait) {
    std::vector<pollfd> fds;
    std::vector<Child*> who;
    for (Child* c : kids) {
        if (c->fd_ >= 0) {
            fds.push_back({c->fd_, POLLIN, 0});
            who.push_back(c);
        }
    }
    const int ms = static_cast<int>(std::max<milliseconds::rep>(0, wait.count()));
    if (::poll(fds.data(), fds.size(), ms) > 0) {
        for (std::size_t i = 0; i < fds.size(); ++i) {
            if (fds[i].revents != 0) who[i]->read_available();
        }
    }
    for (Child* c : kids) c->reap();
}

bool Child::pump(std::span<Child* const> kids, Clock::time_point until,
                 const std::function<bool()>& done) {
    for (;;) {
        if (done()) return true;
        const auto now = Clock::now();
        if (now >= until || abort_requested()) return false;
        const auto left = std::chrono::duration_cast<milliseconds>(until - now);
        drain(kids, std::clamp(left, milliseconds(1), milliseconds(20)));
    }
}

std::optional<std::string> Child::wait_for_line_if(
    const std::function<bool(std::string_view)>& match, milliseconds timeout, std::size_t from) {
    std::size_t scanned = std::min(from, out_.size());
    std::optional<std::string> found;
    Child* self = this;
    pump({&self, 1}, Clock::now() + timeout, [&] {
        // Whole lines only: a line is matched once its newline arrived.
        for (std::size_t nl; (nl = out_.find('\n', scanned)) != std::string::npos; scanned = nl + 1) {
            const std::string_view l = std::string_view(out_).substr(scanned, nl - scanned);
            if (match(l)) {
                found.emplace(l);
                return true;
            }
        }
        return fd_ < 0;  // EOF: the unterminated rest cannot be the line
    });
    return found;
}

bool Child::wait_for_line(std::string_view line, milliseconds timeout) {
    return wait_for_line_if([line](std::string_view l) { return l == line; }, timeout).has_value();
}

ExitStatus Child::finish(milliseconds timeout) {
    Child* self = this;
    if (!pump({&self, 1}, Clock::now() + timeout, [this] { return pid_ < 0; })) {
        kill_and_reap(true);
    }
    pump({&self, 1}, Clock::now() + kEofGrace, [this] { return fd_ < 0; });
    return status_;
}

ExitStatus Child::stop(milliseconds grace) {
    Child* self = this;
    if (pid_ >= 0 && !reap()) {
        ::kill(-pid_, SIGTERM);
        if (!pump({&self, 1}, Clock::now() + grace, [this] { return pid_ < 0; })) {
            kill_and_reap(false);
        }
    }
    if (fd_ >= 0) pump({&self, 1}, Clock::now() + kEofGrace, [this] { return fd_ < 0; });
    return status_;
}

Result<RunOutput, std::string> run(const std::vector<std::string>& argv, milliseconds timeout) {
    auto c = Child::spawn(argv);
    if (!c) return unexpected(c.error());
    RunOutput r;
    r.exit = c->finish(timeout);
    r.output = c->output();
    return r;
}

Result<std::string, std::string> run_ok(const std::vector<std::string>& argv,
                                        milliseconds timeout) {
    auto r = run(argv, timeout);
    if (!r) return unexpected(r.error());
    if (!r->exit.ok()) {
        std::string cmd;
        for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
        return unexpected(cmd + ": " + r->exit.to_string() + ": " + r->output);
    }
    return std::move(r->output);
}

}  // namespace pvnet::lab
