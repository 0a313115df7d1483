// The PROT_NONE guards around every mapping of a frontend page (issue 13):
// a touch one byte outside a mapped grant, or of a slot whose grant was
// unmapped, faults. Death tests: no `threads` label, so the TSan stage (which
// reports the expected SEGVs) does not run them; ASan and release do.
#include <gtest/gtest.h>

#include <string>

#include "grant_fixture.h"

namespace pvnet::mem {
namespace {

// Copy mode maps no frontend page: only the two mapping modes run this.
class MappingModes : public ::testing::TestWithParam<Mode> {};

TEST_P(MappingModes, EveryMappingSitsBetweenGuardPages) {
    Granted g;
    auto acc = make(GetParam(), g.source());
    const GrantRef r = g.front.grant(kBack, 5, false).value();
    iovec v{};
    ASSERT_TRUE(acc->map(0, grant_addr(r, 0), kGrantPageBytes, true, v));
    auto* page = static_cast<volatile char*>(v.iov_base);
    page[0] = 1;
    page[kGrantPageBytes - 1] = 1;
    EXPECT_DEATH({ (void)page[-1]; }, "");
    EXPECT_DEATH({ (void)page[kGrantPageBytes]; }, "");
    acc->unmap(0, 0);
    if (GetParam() == Mode::Map) {
        EXPECT_DEATH({ (void)page[0]; }, "") << "unmapped: the guard is back";
    }
}

INSTANTIATE_TEST_SUITE_P(Grants, MappingModes, ::testing::Values(Mode::Map, Mode::Persistent),
                         [](const ::testing::TestParamInfo<Mode>& p) {
                             return std::string(p.param == Mode::Map ? "Map" : "Persistent");
                         });

}  // namespace
}  // namespace pvnet::mem
