// grant::Store: key and value rules, hostile files left by the peer, strict
// numbers, atomic writes and bounded waits.
#include "pvnet/grant/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"

namespace pvnet::grant {
namespace {

using test::TempDir;
using namespace std::chrono_literals;

class StoreTest : public test::StoreFixture {
protected:
    // Writes a file behind the store's back, as a hostile peer would.
    void plant(const std::string& key, const std::string& bytes) {
        const std::filesystem::path p = store_->dir() + "/" + key;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary) << bytes;
    }

};

TEST_F(StoreTest, OpenCreatesNestedDirectories) {
    auto s = Store::open(tmp_.path() + "/a/b/c/");
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s->dir(), tmp_.path() + "/a/b/c");
    EXPECT_TRUE(std::filesystem::is_directory(tmp_.path() + "/a/b/c"));
    // Opening again is fine; a file in the way is not.
    EXPECT_TRUE(Store::open(tmp_.path() + "/a/b/c"));
    std::ofstream(tmp_.path() + "/file") << "x";
    auto bad = Store::open(tmp_.path() + "/file/sub");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("file"), std::string::npos) << bad.error();
    EXPECT_FALSE(Store::open(""));
}

TEST_F(StoreTest, GoodKeysRoundTrip) {
    const std::vector<std::string> keys = {"state", "backend/3/state",
                                           "frontend/3/feature-persistent-grants", "a_b/C-9/x",
                                           std::string(200, 'k')};
    for (const std::string& key : keys) {
        EXPECT_TRUE(check_key(key)) << key;
        auto w = store_->write(key, "v:" + key.substr(0, 8));
        ASSERT_TRUE(w) << w.error();
        auto r = store_->read(key);
        ASSERT_TRUE(r) << r.error();
        ASSERT_TRUE(r->has_value()) << key;
        EXPECT_EQ(**r, "v:" + key.substr(0, 8));
    }
}

TEST_F(StoreTest, BadKeysRejectedByEveryCall) {
    const std::vector<std::string> bad = {"",
                                          "/a",
                                          "a/",
                                          "/",
                                          "a//b",
                                          ".",
                                          "..",
                                          "a/./b",
                                          "a/../b",
                                          "../x",
                                          "a b",
                                          "a\tb",
                                          "a.b",
                                          "a\\b",
                                          "caf\xc3\xa9",
                                          std::string("a\0b", 3),
                                          std::string(201, 'k'),
                                          "x/" + std::string(199, 'k')};
    for (const std::string& key : bad) {
        SCOPED_TRACE(quote(key));
        auto c = check_key(key);
        ASSERT_FALSE(c);
        EXPECT_NE(c.error().find("bad store key"), std::string::npos) << c.error();
        EXPECT_NE(c.error().find(quote(key)), std::string::npos) << c.error();
        EXPECT_FALSE(store_->write(key, "v"));
        EXPECT_FALSE(store_->read(key));
        EXPECT_FALSE(store_->remove(key));
        EXPECT_FALSE(store_->read_uint(key, 0));
    }
    // Nothing escaped the store's directory or landed in it.
    EXPECT_TRUE(std::filesystem::is_empty(store_->dir()));
    EXPECT_FALSE(std::filesystem::exists(tmp_.path() + "/x"));
}

TEST_F(StoreTest, ValueLimits) {
    EXPECT_TRUE(store_->write("k/full", std::string(kMaxValueBytes, 'v')));
    auto full = store_->read("k/full");
    ASSERT_TRUE(full && full->has_value());
    EXPECT_EQ((*full)->size(), kMaxValueBytes);

    EXPECT_TRUE(store_->write("k/empty", ""));
    auto empty = store_->read("k/empty");
    ASSERT_TRUE(empty && empty->has_value());
    EXPECT_EQ(**empty, "");

    auto too_long = store_->write("k/long", std::string(kMaxValueBytes + 1, 'v'));
    ASSERT_FALSE(too_long);
    EXPECT_NE(too_long.error().find("k/long"), std::string::npos);
    auto nul = store_->write("k/nul", std::string("1\0", 2));
    ASSERT_FALSE(nul);
    EXPECT_NE(nul.error().find("NUL"), std::string::npos);
    for (const char* key : {"k/long", "k/nul"}) {
        auto r = store_->read(key);
        ASSERT_TRUE(r);
        EXPECT_FALSE(r->has_value()) << key << " was written";
    }
}

TEST_F(StoreTest, AbsentAndRemove) {
    auto r = store_->read("backend/1/state");
    ASSERT_TRUE(r) << r.error();
    EXPECT_FALSE(r->has_value());
    EXPECT_TRUE(store_->remove("backend/1/state"));  // absent: fine

    ASSERT_TRUE(store_->write("backend/1/state", "2"));
    ASSERT_TRUE(store_->remove("backend/1/state"));
    r = store_->read("backend/1/state");
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->has_value());
}

TEST_F(StoreTest, OverwriteReplacesWholeValueAndLeavesNoTempFiles) {
    ASSERT_TRUE(store_->write("a/b", std::string(1000, 'x')));
    ASSERT_TRUE(store_->write("a/b", "short"));
    auto r = store_->read("a/b");
    ASSERT_TRUE(r && r->has_value());
    EXPECT_EQ(**r, "short");
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(store_->dir() + "/a")) {
        names.push_back(e.path().filename().string());
    }
    EXPECT_EQ(names, std::vector<std::string>{"b"});
}

TEST_F(StoreTest, HostileFilesAreErrorsOnRead) {
    plant("frontend/1/state", std::string(2048, '4'));
    auto big = store_->read("frontend/1/state");
    ASSERT_FALSE(big);
    EXPECT_NE(big.error().find("frontend/1/state"), std::string::npos) << big.error();
    EXPECT_FALSE(store_->read_uint("frontend/1/state"));

    plant("frontend/1/just-over", std::string(kMaxValueBytes + 1, 'a'));
    EXPECT_FALSE(store_->read("frontend/1/just-over"));

    plant("frontend/1/nul", std::string("4\0", 2));
    EXPECT_FALSE(store_->read("frontend/1/nul"));

    // A directory or a FIFO where a value belongs: an error, not a hang.
    std::filesystem::create_directories(store_->dir() + "/frontend/1/dir");
    EXPECT_FALSE(store_->read("frontend/1/dir"));
    ASSERT_EQ(::mkfifo((store_->dir() + "/frontend/1/fifo").c_str(), 0600), 0);
    EXPECT_FALSE(store_->read("frontend/1/fifo"));

    // A symlink is not followed.
    std::filesystem::create_symlink("/etc/hostname", store_->dir() + "/frontend/1/link");
    EXPECT_FALSE(store_->read("frontend/1/link"));
}

TEST_F(StoreTest, ReadUintIsStrict) {
    const std::vector<std::pair<std::string, uint32_t>> good = {
        {"0", 0}, {"1", 1}, {"7\n", 7}, {"4294967295", 4294967295u}, {"1000", 1000}};
    for (const auto& [text, want] : good) {
        ASSERT_TRUE(store_->write("n/good", text));
        auto v = store_->read_uint("n/good");
        ASSERT_TRUE(v) << quote(text) << ": " << v.error();
        EXPECT_EQ(*v, want) << quote(text);
    }
    const std::vector<std::string> bad = {
        "",    "\n", "-1",    "+1",  " 1",  "1 ",         "01",          "00",
        "0x1", "1a", "1\n\n", "\n1", "1.0", "4294967296", "99999999999", "1\r\n"};
    for (const std::string& text : bad) {
        ASSERT_TRUE(store_->write("n/bad", text));
        auto v = store_->read_uint("n/bad");
        ASSERT_FALSE(v) << quote(text) << " parsed as " << *v;
        EXPECT_NE(v.error().find("n/bad"), std::string::npos) << v.error();
        EXPECT_NE(v.error().find(quote(text)), std::string::npos) << v.error();
        EXPECT_FALSE(parse_uint(text)) << quote(text);
    }
    // Absent: an error, unless a default is given.
    auto absent = store_->read_uint("n/absent");
    ASSERT_FALSE(absent);
    EXPECT_NE(absent.error().find("n/absent"), std::string::npos);
    auto dflt = store_->read_uint("n/absent", 9);
    ASSERT_TRUE(dflt);
    EXPECT_EQ(*dflt, 9u);
}

// A reader racing a writer sees one whole value or the other, never a mix
// or a truncated file.
TEST_F(StoreTest, WriteIsAtomicForReaders) {
    const std::string a(kMaxValueBytes, 'a');
    const std::string b(kMaxValueBytes, 'b');
    ASSERT_TRUE(store_->write("race/v", a));
    std::atomic<bool> stop{false};
    std::atomic<int> write_errors{0};
    std::thread writer([&] {
        for (int i = 0; !stop.load(std::memory_order_relaxed) && i < 20000; ++i) {
            if (!store_->write("race/v", (i & 1) ? a : b)) write_errors.fetch_add(1);
        }
    });
    int seen_a = 0;
    int seen_b = 0;
    for (int i = 0; i < 3000; ++i) {
        auto r = store_->read("race/v");
        ASSERT_TRUE(r) << r.error();
        ASSERT_TRUE(r->has_value());
        if (**r == a) {
            ++seen_a;
        } else if (**r == b) {
            ++seen_b;
        } else {
            stop = true;
            writer.join();
            FAIL() << "torn value of " << (*r)->size() << " bytes";
        }
    }
    stop = true;
    writer.join();
    EXPECT_EQ(write_errors.load(), 0);
    EXPECT_EQ(seen_a + seen_b, 3000);
}

TEST_F(StoreTest, WaitUntilTimesOutWithAnError) {
    int calls = 0;
    auto r = store_->wait_until(
        "backend/1/state", "backend InitWait",
        [&](const std::optional<std::string>& v) -> Result<bool, std::string> {
            ++calls;
            EXPECT_FALSE(v.has_value());
            return false;
        },
        Clock::now() + 50ms);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("timed out"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("backend/1/state"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("backend InitWait"), std::string::npos) << r.error();
    EXPECT_GE(calls, 1);

    // A deadline already past still looks once.
    ASSERT_TRUE(store_->write("backend/1/state", "2"));
    auto now = store_->wait_until(
        "backend/1/state", "anything",
        [](const std::optional<std::string>& v) -> Result<bool, std::string> {
            return v.has_value();
        },
        Clock::now() - 1s);
    ASSERT_TRUE(now) << now.error();
    EXPECT_EQ(now->value_or(""), "2");
}

TEST_F(StoreTest, WaitUntilSeesAnotherThreadsWriteAndStopsOnPredicateError) {
    std::thread writer([&] {
        std::this_thread::sleep_for(5ms);
        (void)store_->write("w/k", "ready");
    });
    auto r = store_->wait_until(
        "w/k", "ready",
        [](const std::optional<std::string>& v) -> Result<bool, std::string> {
            return v.has_value() && *v == "ready";
        },
        Clock::now() + 10s);
    writer.join();
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->value_or(""), "ready");

    auto e = store_->wait_until(
        "w/k", "never",
        [](const std::optional<std::string>&) -> Result<bool, std::string> {
            return unexpected(std::string("peer misbehaved"));
        },
        Clock::now() + 10s);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error(), "peer misbehaved");

    // A hostile value under the awaited key ends the wait with the read's error.
    plant("w/big", std::string(2048, 'x'));
    auto big = store_->wait_until(
        "w/big", "small",
        [](const std::optional<std::string>&) -> Result<bool, std::string> { return false; },
        Clock::now() + 10s);
    ASSERT_FALSE(big);
    EXPECT_EQ(big.error().find("timed out"), std::string::npos) << big.error();
}

TEST(Quote, EscapesAndCuts) {
    EXPECT_EQ(quote("abc"), "'abc'");
    EXPECT_EQ(quote(std::string("a\0\n'", 4)), "'a\\x00\\x0a\\x27'");
    EXPECT_EQ(quote(std::string(100, 'x')), "'" + std::string(64, 'x') + "'...");
}

}  // namespace
}  // namespace pvnet::grant
