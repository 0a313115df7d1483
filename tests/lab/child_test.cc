// The child runner: output capture, exit status, and a timeout that kills
// the child's whole process group (a grandchild included). The test makes
// itself a subreaper so the grandchild's end can be observed by waitpid.
#include "pvnet/lab/child.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace pvnet::lab {
namespace {

using std::chrono::milliseconds;

TEST(Child, CapturesStdoutAndStderrAndExitCode) {
    auto r = run({"sh", "-c", "echo out; echo err >&2; exit 3"}, milliseconds(10'000));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->exit.code, 3);
    EXPECT_EQ(r->exit.signal, 0);
    EXPECT_FALSE(r->exit.timed_out);
    EXPECT_EQ(r->output, "out\nerr\n");
}

TEST(Child, ReportsTheSignalThatEndedIt) {
    auto r = run({"sh", "-c", "kill -TERM $$"}, milliseconds(10'000));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->exit.signal, SIGTERM);
    EXPECT_EQ(r->exit.code, -1);
    EXPECT_FALSE(r->exit.ok());
}

TEST(Child, RunOkNamesTheFailure) {
    auto r = run_ok({"sh", "-c", "echo why; exit 2"}, milliseconds(10'000));
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("exited with 2"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("why"), std::string::npos) << r.error();
}

TEST(Child, MissingProgramIsASpawnError) {
    auto c = Child::spawn({"pvnet-no-such-program-xyz"});
    ASSERT_FALSE(c.has_value());
    EXPECT_NE(c.error().find("pvnet-no-such-program-xyz"), std::string::npos) << c.error();
}

TEST(Child, TimeoutKillsTheWholeGroup) {
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    // sh starts a grandchild in its group, says its pid, and waits on it.
    auto c = Child::spawn({"sh", "-c", "sleep 100 & echo $!; wait"});
    ASSERT_TRUE(c.has_value()) << c.error();
    const pid_t leader = c->pid();
    const ExitStatus st = c->finish(milliseconds(500));
    EXPECT_TRUE(st.timed_out);
    EXPECT_EQ(st.signal, SIGKILL);
    EXPECT_EQ(c->pid(), -1);
    const pid_t grandchild = static_cast<pid_t>(std::stol(c->output()));
    ASSERT_GT(grandchild, 0);
    ASSERT_NE(grandchild, leader);
    // Reparented to us (subreaper): it must have died of SIGKILL. Bounded wait.
    int ws = 0;
    pid_t got = 0;
    for (int i = 0; i < 500 && got == 0; ++i) {
        got = ::waitpid(grandchild, &ws, WNOHANG);
        if (got == 0) std::this_thread::sleep_for(milliseconds(10));
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
    ASSERT_EQ(got, grandchild) << "sleep 100 outlived its group's kill";
    EXPECT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
}

TEST(Child, StopEndsALongRunningChild) {
    auto c = Child::spawn({"sleep", "100"});
    ASSERT_TRUE(c.has_value()) << c.error();
    EXPECT_TRUE(c->running());
    const ExitStatus st = c->stop(milliseconds(2000));
    EXPECT_EQ(st.signal, SIGTERM);
    EXPECT_FALSE(c->running());
}

TEST(Child, WaitForLineMatchesWholeLinesOnly) {
    auto c = Child::spawn({"sh", "-c", "echo not-ready; echo ready; sleep 100"});
    ASSERT_TRUE(c.has_value()) << c.error();
    EXPECT_TRUE(c->wait_for_line("ready", milliseconds(10'000)));
    auto d = Child::spawn({"sh", "-c", "printf ready"});  // no newline, then EOF
    ASSERT_TRUE(d.has_value()) << d.error();
    EXPECT_FALSE(d->wait_for_line("ready", milliseconds(10'000)));
}

TEST(Child, StdinSocketCarriesLines) {
    auto c = Child::spawn({"sh", "-c", "read a; echo got:$a"}, {.stdin_socket = true});
    ASSERT_TRUE(c.has_value()) << c.error();
    ASSERT_TRUE(c->send_line("hello"));
    EXPECT_TRUE(c->finish(milliseconds(10'000)).ok());
    EXPECT_EQ(c->output(), "got:hello\n");
}

TEST(Child, OutputIsCappedNotUnbounded) {
    // ~9 MiB of output: more than kMaxOutput is read and dropped.
    auto r = Child::spawn({"sh", "-c", "head -c 9437184 /dev/zero"});
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_TRUE(r->finish(milliseconds(20'000)).ok());
    EXPECT_EQ(r->output().size(), Child::kMaxOutput);
    EXPECT_TRUE(r->output_truncated());
}

}  // namespace
}  // namespace pvnet::lab
