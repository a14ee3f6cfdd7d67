// Every Store operation, through each implementation alike: HashStore,
// TcpStore (with its server in this process), and PrefixStore over both.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <kizuna/hash_store.hpp>
#include <kizuna/prefix_store.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include "store_test_util.hpp"

using namespace kizuna;
using namespace std::chrono_literals;

namespace {

Bytes b(std::string_view s) { return Bytes(s.begin(), s.end()); }

struct HashFixture {
  static constexpr const char* kName = "HashStore";
  std::shared_ptr<Store> store = std::make_shared<HashStore>();
  // A second handle on the same keys, as another rank would have.
  std::shared_ptr<Store> other() { return store; }
};

struct TcpFixture {
  static constexpr const char* kName = "TcpStore";
  TcpStoreServer server{[] {
    TcpStoreOptions o;
    o.token = "";
    return o;
  }()};
  std::shared_ptr<Store> store = connect();
  std::shared_ptr<Store> connect() {
    TcpStoreOptions o;
    o.port = server.port();
    o.token = "";
    o.timeout = 60s;
    return std::make_shared<TcpStore>(o);
  }
  std::shared_ptr<Store> other() { return connect(); }
};

struct PrefixOverTcpFixture {
  static constexpr const char* kName = "PrefixStore over TcpStore";
  TcpFixture tcp;
  std::shared_ptr<Store> store = std::make_shared<PrefixStore>("job/7", tcp.store);
  std::shared_ptr<Store> other() { return std::make_shared<PrefixStore>("job/7", tcp.other()); }
};

struct PrefixOverHashFixture {
  static constexpr const char* kName = "PrefixStore over HashStore";
  std::shared_ptr<Store> base = std::make_shared<HashStore>();
  std::shared_ptr<Store> store =
      std::make_shared<PrefixStore>("a", std::make_shared<PrefixStore>("b", base));
  std::shared_ptr<Store> other() { return store; }
};

}  // namespace

#define STORE_FIXTURES HashFixture, TcpFixture, PrefixOverTcpFixture, PrefixOverHashFixture

TEMPLATE_TEST_CASE("set and get", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  s.set("k", b("v1"));
  CHECK(s.get("k") == b("v1"));
  s.set("k", b("second value"));
  CHECK(s.get_string("k") == "second value");
  s.set("empty", Bytes{});
  CHECK(s.get("empty").empty());
  Bytes binary(1000);
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<std::uint8_t>(i * 7);
  s.set("bin", binary);
  CHECK(s.get("bin") == binary);
  CHECK(f.other()->get("bin", 10s) == binary);
}

TEMPLATE_TEST_CASE("a large value round-trips", "[store]", STORE_FIXTURES) {
  TestType f;
  Bytes big(5 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i ^ (i >> 9));
  f.store->set("big", big);
  CHECK(f.other()->get("big") == big);
}

TEMPLATE_TEST_CASE("add counts from zero and stores decimal text", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  CHECK(s.add("c", 5) == 5);
  CHECK(s.add("c", -7) == -2);
  CHECK(s.add("c", 0) == -2);
  CHECK(s.get_string("c") == "-2");
  s.set("n", std::string_view("40"));
  CHECK(s.add("n", 2) == 42);
  s.set("text", std::string_view("forty"));
  try {
    s.add("text", 1);
    FAIL("add on a non-integer value succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
    CHECK_THAT(e.what(), Catch::Contains("not an integer"));
  }
  s.set("max", std::string_view("9223372036854775807"));
  CHECK_THROWS_AS(s.add("max", 1), Error);
  CHECK(s.get_string("max") == "9223372036854775807");
}

TEMPLATE_TEST_CASE("compare_set", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  // Missing key and empty expected: sets.
  CHECK(s.compare_set("cs", {}, b("one")) == b("one"));
  // Wrong expected: unchanged, returns the current value.
  CHECK(s.compare_set("cs", b("zero"), b("two")) == b("one"));
  CHECK(s.get("cs") == b("one"));
  // Right expected: swaps.
  CHECK(s.compare_set("cs", b("one"), b("two")) == b("two"));
  CHECK(s.get("cs") == b("two"));
  // Missing key and non-empty expected: stays missing.
  CHECK(s.compare_set("absent", b("x"), b("y")).empty());
  CHECK_FALSE(s.check({"absent"}));
}

TEMPLATE_TEST_CASE("check, delete_key and num_keys", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  const std::int64_t before = s.num_keys();
  CHECK_FALSE(s.check({"a"}));
  CHECK(s.check({}));
  s.set("a", b("1"));
  s.set("b", b("2"));
  CHECK(s.check({"a"}));
  CHECK(s.check({"a", "b"}));
  CHECK_FALSE(s.check({"a", "c"}));
  CHECK(s.num_keys() == before + 2);
  CHECK(s.delete_key("a"));
  CHECK_FALSE(s.delete_key("a"));
  CHECK_FALSE(s.check({"a"}));
  CHECK(s.num_keys() == before + 1);
}

TEMPLATE_TEST_CASE("multi_set and multi_get", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  s.multi_set({"m1", "m2", "m3"}, {b("x"), b(""), b("zzz")});
  const auto values = s.multi_get({"m3", "m1", "m2", "m1"});
  REQUIRE(values.size() == 4);
  CHECK(values[0] == b("zzz"));
  CHECK(values[1] == b("x"));
  CHECK(values[2].empty());
  CHECK(values[3] == b("x"));
  CHECK(s.multi_get({}).empty());
  CHECK_THROWS_AS(s.multi_set({"a", "b"}, {b("1")}), Error);
}

TEMPLATE_TEST_CASE("append creates and extends", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  s.append("log", b("ab"));
  s.append("log", b("cd"));
  s.append("log", Bytes{});
  CHECK(s.get_string("log") == "abcd");
}

TEMPLATE_TEST_CASE("get, wait and multi_get block until another client sets the key", "[store]",
                   STORE_FIXTURES) {
  TestType f;
  auto writer = f.other();
  std::thread t([&] {
    // The waits below return only once these exist, in whatever order.
    writer->set("late/1", b("one"));
    writer->multi_set({"late/2", "late/3"}, {b("two"), b("three")});
  });
  CHECK(f.store->get("late/1", 30s) == b("one"));
  f.store->wait({"late/1", "late/2", "late/3"}, 30s);
  const auto v = f.store->multi_get({"late/3", "late/2"}, 30s);
  CHECK(v == std::vector<Bytes>{b("three"), b("two")});
  t.join();
}

TEMPLATE_TEST_CASE("a missing key times out naming the key", "[store]", STORE_FIXTURES) {
  TestType f;
  Store& s = *f.store;
  s.set("here", b("1"));
  auto expect_timeout = [](auto&& call, const char* contains) {
    try {
      call();
      FAIL("no timeout");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::Timeout);
      CHECK_THAT(e.what(), Catch::Contains(contains));
      CHECK_THAT(e.what(), Catch::Contains("timed out after 50 ms"));
    }
  };
  expect_timeout([&] { s.get("nope", 50ms); }, "waiting for key '");
  expect_timeout([&] { s.wait({"here", "nope"}, 50ms); }, "nope'");
  expect_timeout([&] { s.multi_get({"nope", "here"}, 50ms); }, "missing '");
  // The store still answers afterwards.
  CHECK(s.get("here", 10s) == b("1"));
}

TEMPLATE_TEST_CASE("keys are checked", "[store]", STORE_FIXTURES) {
  TestType f;
  CHECK_THROWS_AS(f.store->set("", b("x")), Error);
  CHECK_THROWS_AS(f.store->set(std::string(5000, 'k'), b("x")), Error);
  f.store->set(std::string(4000, 'k'), b("ok"));
  CHECK(f.store->get(std::string(4000, 'k')) == b("ok"));
}

TEST_CASE("PrefixStore puts its keys under prefix/", "[store]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore p("comm0", base);
  p.set("rank/1", std::string_view("addr"));
  CHECK(base->get_string("comm0/rank/1") == "addr");
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.add("n", 3);
  CHECK(base->get_string("outer/inner/n") == "3");
  CHECK_FALSE(base->check({"rank/1"}));
  CHECK_THROWS_AS(PrefixStore("x", nullptr), Error);
  CHECK(p.timeout() == base->timeout());
}
