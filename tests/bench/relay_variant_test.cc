// relay_variant: a name's parts are exactly the mechanisms its relay
// arguments turn on, each stated on or off where the relay has both flags.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pvnet/bench/relay_bench.h"

namespace pvnet::bench {
namespace {

using Args = std::vector<std::string>;

Args args_of(const char* name) {
    auto v = relay_variant(name);
    EXPECT_TRUE(v.has_value()) << name << ": " << (v ? "" : v.error());
    return v ? v->relay_args : Args{};
}

TEST(RelayVariant, ArgumentsMatchTheLabel) {
    EXPECT_EQ(args_of("napi"), (Args{"--tx-mode", "napi", "--no-direct"}));
    EXPECT_EQ(args_of("napi+at-rx"), (Args{"--tx-mode", "napi", "--at-rx", "--no-direct"}));
    EXPECT_EQ(args_of("napi+direct"), (Args{"--tx-mode", "napi", "--direct"}));
    EXPECT_EQ(args_of("napi+at-rx+direct"), (Args{"--tx-mode", "napi", "--at-rx", "--direct"}));
    EXPECT_EQ(args_of("napi+coalesce"),
              (Args{"--tx-mode", "napi", "--no-direct", "--tx-frames", "64", "--tx-usecs", "64"}));
    EXPECT_EQ(args_of("napi+at-rx+direct+spin"),
              (Args{"--tx-mode", "napi", "--at-rx", "--direct", "--direct-spin-usecs", "50"}));
    EXPECT_EQ(args_of("plain-nooff"), (Args{"--plain", "--offloads", "off"}));
    auto veth = relay_variant("veth");
    ASSERT_TRUE(veth.has_value());
    EXPECT_TRUE(veth->veth);
}

TEST(RelayVariant, RejectsUnknownRepeatedOrMisorderedParts) {
    for (const char* bad : {"", "napi+", "napi+turbo", "napi+direct+at-rx", "napi+at-rx+at-rx",
                            "napi+spin", "napix", "napi++direct", "veth+direct"}) {
        EXPECT_FALSE(relay_variant(bad).has_value()) << bad;
    }
}

}  // namespace
}  // namespace pvnet::bench
