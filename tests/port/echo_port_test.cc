// EchoPort: a request of flow f, sequence s comes back as a response of
// flow f, sequence s; a full response queue is a Retry that leaves no trace
// but its counter; every request and response is accounted for.
#include "pvnet/port/echo_port.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

namespace pvnet::port {
namespace {

constexpr uint32_t kHdr = EchoPort::kHdrBytes;

// A request as the guest would send it: zeroed header + a valid frame.
std::vector<std::byte> request(uint16_t flow, uint64_t seq) {
    auto fmt = FrameFormat::create(64, flow);
    EXPECT_TRUE(fmt.has_value());
    FrameGen gen(*fmt);
    std::vector<std::byte> buf(kHdr + 64);
    EXPECT_EQ(gen.write_frame(seq, buf.data() + kHdr, 64), 64u);
    return buf;
}

SendResult send_result(EchoPort& p, std::vector<std::byte>& buf) {
    const iovec v{buf.data(), buf.size()};
    return p.send(std::span<const iovec>(&v, 1), static_cast<uint32_t>(buf.size()));
}

uint32_t send(EchoPort& p, std::vector<std::byte>& buf) {
    return send_result(p, buf) == SendResult::Sent ? 1u : 0u;
}

/// requests = responses + drop_no_room + unanswered + pending() + drop_session_end.
void expect_accounted(const EchoPort& p) {
    EXPECT_EQ(p.requests.get(), p.responses.get() + p.drop_no_room.get() + p.unanswered.get() +
                                    p.pending() + p.drop_session_end.get());
}

TEST(EchoPort, RespondsWithTheSameFlowAndSequence) {
    auto p = EchoPort::create(64, 4);
    ASSERT_TRUE(p.has_value());
    EchoPort& port = **p;
    EXPECT_FALSE(port.rx_pending());
    auto r = request(3, 77);
    EXPECT_EQ(send(port, r), 1u);
    ASSERT_TRUE(port.rx_pending());

    std::array<std::byte, 2048> rx{};
    const iovec v{rx.data(), rx.size()};
    ASSERT_EQ(port.recv(std::span<const iovec>(&v, 1)), kHdr + 64);
    EXPECT_FALSE(port.rx_pending());
    for (uint32_t i = 0; i < kHdr; ++i) EXPECT_EQ(rx[i], std::byte{0});

    auto fmt = FrameFormat::create(64, 3);
    ASSERT_TRUE(fmt.has_value());
    FrameSink sink(*fmt, 77);
    EXPECT_EQ(sink.check_frame(rx.data() + kHdr, 64), SinkResult::InOrder);
    EXPECT_EQ(port.requests.get(), 1u);
    EXPECT_EQ(port.responses.get(), 1u);
}

TEST(EchoPort, RejectsUnknownFlowAndShortFrames) {
    auto p = EchoPort::create(64, 2);
    ASSERT_TRUE(p.has_value());
    auto r = request(5, 1);
    EXPECT_EQ(send(**p, r), 0u);
    std::vector<std::byte> shortbuf(kHdr + 20);
    EXPECT_EQ(send(**p, shortbuf), 0u);
    EXPECT_EQ((*p)->drop_bad_request.get(), 2u);
    EXPECT_FALSE((*p)->rx_pending());
}

TEST(EchoPort, FullQueueIsRetryUntilRecvMakesRoom) {
    auto p = EchoPort::create(64, 1);
    ASSERT_TRUE(p.has_value());
    auto r = request(0, 1);
    for (std::size_t i = 0; i < EchoPort::kMaxPending; ++i) ASSERT_EQ(send(**p, r), 1u);
    // Not taken: no request, no drop, only the retry counted.
    for (int i = 0; i < 5; ++i) EXPECT_EQ(send_result(**p, r), SendResult::Retry);
    EXPECT_EQ((*p)->requests.get(), EchoPort::kMaxPending);
    EXPECT_EQ((*p)->retry_queue_full.get(), 5u);
    EXPECT_EQ((*p)->drop_bad_request.get(), 0u);
    std::array<std::byte, 2048> rx{};
    const iovec v{rx.data(), rx.size()};
    ASSERT_EQ((*p)->recv(std::span<const iovec>(&v, 1)), kHdr + 64);
    EXPECT_EQ(send_result(**p, r), SendResult::Sent) << "room again after one recv";
    EXPECT_EQ((*p)->pending(), EchoPort::kMaxPending);
    expect_accounted(**p);
}

TEST(EchoPort, RetryOfAnAnswerEveryRequestDoesNotCountItTwice) {
    // answer_every 2: the second request of a flow is answered. A Retry of
    // it must not advance the flow's count, or the answer would be skipped.
    auto p = EchoPort::create(64, 1, 2);
    ASSERT_TRUE(p.has_value());
    auto r = request(0, 1);
    for (std::size_t i = 0; i < 2 * EchoPort::kMaxPending; ++i) ASSERT_EQ(send(**p, r), 1u);
    ASSERT_EQ((*p)->pending(), EchoPort::kMaxPending);
    EXPECT_EQ(send(**p, r), 1u);  // unanswered: needs no room
    EXPECT_EQ(send_result(**p, r), SendResult::Retry);
    EXPECT_EQ(send_result(**p, r), SendResult::Retry);
    std::array<std::byte, 2048> rx{};
    const iovec v{rx.data(), rx.size()};
    ASSERT_NE((*p)->recv(std::span<const iovec>(&v, 1)), 0u);
    EXPECT_EQ(send_result(**p, r), SendResult::Sent);
    EXPECT_EQ((*p)->pending(), EchoPort::kMaxPending) << "the retried request was answered";
    EXPECT_EQ((*p)->unanswered.get(), EchoPort::kMaxPending + 1);
    expect_accounted(**p);
}

TEST(EchoPort, CountsResponseThatDoesNotFit) {
    auto p = EchoPort::create(64, 1);
    ASSERT_TRUE(p.has_value());
    auto r = request(0, 9);
    send(**p, r);
    std::array<std::byte, 40> small{};
    const iovec v{small.data(), small.size()};
    EXPECT_EQ((*p)->recv(std::span<const iovec>(&v, 1)), 0u);
    EXPECT_EQ((*p)->drop_no_room.get(), 1u);
    EXPECT_FALSE((*p)->rx_pending());
    expect_accounted(**p);
}

TEST(EchoPort, RecvIntoNoBuffersConsumesTheResponseAndCountsIt) {
    auto p = EchoPort::create(64, 1);
    ASSERT_TRUE(p.has_value());
    auto a = request(0, 1);
    auto b = request(0, 2);
    send(**p, a);
    send(**p, b);
    EXPECT_EQ((*p)->recv({}), 0u);
    EXPECT_EQ((*p)->drop_no_room.get(), 1u);
    // The next recv gets the second response, not the first again.
    std::array<std::byte, 2048> rx{};
    const iovec v{rx.data(), rx.size()};
    ASSERT_EQ((*p)->recv(std::span<const iovec>(&v, 1)), kHdr + 64);
    auto fmt = FrameFormat::create(64, 0);
    ASSERT_TRUE(fmt.has_value());
    FrameSink sink(*fmt, 2);
    EXPECT_EQ(sink.check_frame(rx.data() + kHdr, 64), SinkResult::InOrder);
    EXPECT_EQ((*p)->recv({}), 0u) << "empty: nothing to drop";
    EXPECT_EQ((*p)->drop_no_room.get(), 1u);
    expect_accounted(**p);
}

TEST(EchoPort, MaxFrameIsTheResponseSize) {
    auto p = EchoPort::create(300, 3);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ((*p)->max_frame_bytes(), 300u);
}

TEST(EchoPort, AnswersEveryKthRequestOfAFlow) {
    auto p = EchoPort::create(64, 2, 2);
    ASSERT_TRUE(p.has_value());
    for (uint64_t s = 0; s < 5; ++s) {
        auto a = request(0, s);
        auto b = request(1, s);
        send(**p, a);
        send(**p, b);
    }
    std::array<std::byte, 2048> rx{};
    const iovec v{rx.data(), rx.size()};
    uint32_t answered = 0;
    while ((*p)->rx_pending()) answered += (*p)->recv(std::span<const iovec>(&v, 1)) != 0;
    EXPECT_EQ((*p)->requests.get(), 10u);
    EXPECT_EQ(answered, 4u);  // seqs 1 and 3 of each flow
    EXPECT_EQ((*p)->unanswered.get(), 6u);
    expect_accounted(**p);
}

// Issue 23, item 5: responses queued when a session ends are the departed
// guest's; the next session gets none of them, and each flow counts anew.
TEST(EchoPort, SessionEndDropsQueuedResponsesAndRestartsTheFlows) {
    auto p = EchoPort::create(64, 1, 2);
    ASSERT_TRUE(p.has_value());
    EchoPort& port = **p;
    for (uint64_t s = 0; s < 3; ++s) {  // the 2nd is answered, the 3rd waits for a 4th
        auto r = request(0, s);
        send(port, r);
    }
    ASSERT_EQ(port.pending(), 1u);
    port.session_end();
    EXPECT_FALSE(port.rx_pending());
    EXPECT_EQ(port.drop_session_end.get(), 1u);
    expect_accounted(port);
    port.session_start();
    auto r = request(0, 10);
    send(port, r);
    EXPECT_FALSE(port.rx_pending());  // the new session's first request: not answered
    auto r2 = request(0, 11);
    send(port, r2);
    std::array<std::byte, 2048> rx{};
    const iovec v{rx.data(), rx.size()};
    ASSERT_EQ(port.recv(std::span<const iovec>(&v, 1)), kHdr + 64);
    auto fmt = FrameFormat::create(64, 0);
    ASSERT_TRUE(fmt.has_value());
    FrameSink sink(*fmt, 11);
    EXPECT_EQ(sink.check_frame(rx.data() + kHdr, 64), SinkResult::InOrder);
    expect_accounted(port);
}

}  // namespace
}  // namespace pvnet::port
