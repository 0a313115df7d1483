// A fresh directory under /tmp for one test, removed with everything in it
// when the guard goes out of scope (a failed ASSERT included), and a Store in one.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "pvnet/grant/store.h"

namespace pvnet::grant::test {

class TempDir {
public:
    TempDir() {
        char name[] = "/tmp/pvnet-grant-XXXXXX";
        if (::mkdtemp(name) != nullptr) path_ = name;
    }
    ~TempDir() {
        if (path_.empty()) return;
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    bool ok() const { return !path_.empty(); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

/// A Store in a fresh TempDir, for the store and handshake tests.
class StoreFixture : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(tmp_.ok());
        auto s = Store::open(tmp_.path() + "/xs");
        ASSERT_TRUE(s) << s.error();
        store_.emplace(std::move(s).value());
    }

    TempDir tmp_;
    std::optional<Store> store_;
};

}  // namespace pvnet::grant::test
