// EchoPort: a request of flow f, sequence s comes back as a response of
// flow f, sequence s; the bounded queue counts overflow.
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

uint32_t send(EchoPort& p, std::vector<std::byte>& buf) {
    const iovec v{buf.data(), buf.size()};
    return p.send(std::span<const iovec>(&v, 1), static_cast<uint32_t>(buf.size())) ? 1u : 0u;
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

TEST(EchoPort, CountsQueueOverflow) {
    auto p = EchoPort::create(64, 1);
    ASSERT_TRUE(p.has_value());
    auto r = request(0, 1);
    for (std::size_t i = 0; i < EchoPort::kMaxPending + 5; ++i) send(**p, r);
    EXPECT_EQ((*p)->requests.get(), EchoPort::kMaxPending + 5);
    EXPECT_EQ((*p)->drop_queue_full.get(), 5u);
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
}

}  // namespace
}  // namespace pvnet::port
