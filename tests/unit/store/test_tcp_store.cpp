// TcpStore and TcpStoreServer under load and under failure: concurrency,
// hundreds of clients, timeouts that leave nothing behind, a server that
// goes away, ports in use, clients that come before the server, joins,
// and the from_url / from_env factories.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <atomic>
#include <cstdlib>
#include <future>
#include <latch>
#include <thread>

#include "core/launch_env.hpp"
#include "store/from_env.hpp"
#include "store/wire.hpp"
#include "store_test_util.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;

namespace {

TcpStoreOptions server_options() {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = "";
  o.timeout = 60s;
  return o;
}

std::unique_ptr<TcpStore> client(int port, std::chrono::milliseconds timeout = 60s) {
  TcpStoreOptions o;
  o.port = port;
  o.token = "";
  o.timeout = timeout;
  return std::make_unique<TcpStore>(o);
}

// A port that was free a moment ago: bound by a server on port 0, which then
// closes. For tests where the client must know the port before the server
// exists.
int recently_free_port() {
  TcpStoreServer probe(server_options());
  return probe.port();
}

ErrorCode code_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  FAIL("no error was thrown");
  return ErrorCode::Internal;
}

}  // namespace

TEST_CASE("16 threads x 1000 add give the exact total", "[tcp_store]") {
  TcpStoreServer server(server_options());
  // Half the threads share one client (calls are serialised on it), half
  // have their own.
  auto shared = client(server.port());
  run_ranks(16, [&](int rank) {
    std::unique_ptr<TcpStore> own;
    TcpStore* s = shared.get();
    if (rank % 2 == 1) {
      own = client(server.port());
      s = own.get();
    }
    for (int i = 0; i < 1000; ++i) s->add("counter", 1);
  });
  CHECK(shared->add("counter", 0) == 16000);
  CHECK(shared->get_string("counter") == "16000");
}

TEST_CASE("512 clients connecting at once all succeed", "[tcp_store]") {
  raise_fd_limit(8192);
  TcpStoreServer server(server_options());
  constexpr int kClients = 512;
  std::latch start(kClients);
  std::latch done(kClients);
  run_ranks(kClients, [&](int rank) {
    start.arrive_and_wait();  // all connect together
    auto s = client(server.port());
    s->set("client/" + std::to_string(rank), std::to_string(rank));
    s->add("connected", 1);
    done.arrive_and_wait();  // all connections open at the same time
    const int next = (rank + 1) % kClients;
    expect(s->get_string("client/" + std::to_string(next)) == std::to_string(next),
           "client/" + std::to_string(next));
  });
  auto s = client(server.port());
  CHECK(s->get_string("connected") == "512");
  CHECK(s->num_keys() == kClients + 1);
}

TEST_CASE("a get that times out throws Timeout, leaves nothing behind, and the server serves on",
          "[tcp_store]") {
  TcpStoreServer server(server_options());
  auto s = client(server.port());
  std::string message;
  CHECK(code_of([&] { s->get("missing", 200ms); }, &message) == ErrorCode::Timeout);
  CHECK_THAT(message, Catch::Contains(
                          "timed out after 200 ms waiting for key 'missing' at store 127.0.0.1:" +
                          std::to_string(server.port())));
  CHECK(server.num_waiters() == 0);
  s->set("missing", std::string_view("now here"));
  CHECK(s->get_string("missing") == "now here");
  auto other = client(server.port());
  CHECK(other->get_string("missing") == "now here");
  // A timeout of zero is a non-blocking probe.
  CHECK(code_of([&] { s->wait({"missing", "absent"}, 0ms); }) == ErrorCode::Timeout);
  CHECK(server.num_waiters() == 0);
}

TEST_CASE("a held get is released when its client disconnects", "[tcp_store]") {
  TcpStoreServer server(server_options());
  {
    RawSocket raw(server.port());
    store::wire::Request get;
    get.op = store::wire::Op::Get;
    get.id = 1;
    get.keys = {"never"};
    get.timeout_ms = 600'000;
    store::wire::Bytes frame;
    store::wire::encode(get, frame);
    REQUIRE(raw.send(frame));
    REQUIRE(eventually([&] { return server.num_waiters() == 1; }));
  }
  REQUIRE(eventually([&] { return server.num_waiters() == 0 && server.num_connections() == 0; }));
  auto s = client(server.port());
  s->set("never", std::string_view("set at last"));
  CHECK(s->get_string("never") == "set at last");
}

TEST_CASE("many clients wait on the same keys and all wake", "[tcp_store]") {
  TcpStoreServer server(server_options());
  constexpr int kRanks = 24;
  run_ranks(kRanks, [&](int rank) {
    auto s = client(server.port());
    s->set("addr/" + std::to_string(rank), "rank" + std::to_string(rank));
    std::vector<std::string> keys;
    for (int r = 0; r < kRanks; ++r) keys.push_back("addr/" + std::to_string(r));
    const auto values = s->multi_get(keys, 60s);
    for (int r = 0; r < kRanks; ++r)
      expect(std::string(values[r].begin(), values[r].end()) == "rank" + std::to_string(r),
             "the value of addr/" + std::to_string(r));
  });
  CHECK(server.num_waiters() == 0);
}

TEST_CASE("a key deleted while a multi-key wait is held is waited for again", "[tcp_store]") {
  TcpStoreServer server(server_options());
  auto waiter = client(server.port());
  auto writer = client(server.port());
  auto result = std::async(std::launch::async, [&] { return waiter->multi_get({"a", "b"}, 60s); });
  REQUIRE(eventually([&] { return server.num_waiters() == 1; }));
  writer->set("a", std::string_view("1"));
  writer->delete_key("a");
  writer->set("b", std::string_view("2"));
  // Still held: "a" is gone again.
  REQUIRE(eventually([&] { return server.num_waiters() == 1; }));
  CHECK(result.wait_for(0s) == std::future_status::timeout);
  writer->set("a", std::string_view("3"));
  REQUIRE(result.wait_for(60s) == std::future_status::ready);
  const auto values = result.get();
  CHECK(values == std::vector<Bytes>{Bytes{'3'}, Bytes{'2'}});
}

TEST_CASE("the server destroyed mid-request: the client throws, it does not hang", "[tcp_store]") {
  auto server = std::make_unique<TcpStoreServer>(server_options());
  auto s = client(server->port());
  s->set("k", std::string_view("v"));
  auto pending = std::async(std::launch::async, [&] { return s->get("never", 600s); });
  REQUIRE(eventually([&] { return server->num_waiters() == 1; }));
  server.reset();
  REQUIRE(pending.wait_for(60s) == std::future_status::ready);  // did not hang
  std::string message;
  const ErrorCode code = code_of([&] { pending.get(); }, &message);
  CHECK((code == ErrorCode::PeerLost || code == ErrorCode::SystemError));
  CHECK_THAT(message, Catch::Contains("store at 127.0.0.1:"));
  // The connection is now unusable, and says so.
  CHECK(code_of([&] { s->set("k", std::string_view("again")); }, &message) == ErrorCode::PeerLost);
  CHECK_THAT(message, Catch::Contains("create a new TcpStore"));
}

TEST_CASE("a port in use is named, with a suggestion", "[tcp_store]") {
  TcpStoreServer first(server_options());
  TcpStoreOptions o = server_options();
  o.port = first.port();
  std::string message;
  CHECK(code_of([&] { TcpStoreServer second(o); }, &message) == ErrorCode::SystemError);
  CHECK_THAT(message, Catch::Contains(std::to_string(first.port())));
  CHECK_THAT(message, Catch::Contains("address already in use"));
  CHECK_THAT(message, Catch::Contains("port 0"));
}

TEST_CASE("a client retries until its deadline when no server is there", "[tcp_store]") {
  const int port = recently_free_port();
  std::string message;
  CHECK(code_of([&] { client(port, 300ms); }, &message) == ErrorCode::Timeout);
  CHECK_THAT(message, Catch::Contains("connecting to store at 127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(message, Catch::Contains("attempts"));
}

TEST_CASE("a client that starts before its server connects once it is up", "[tcp_store]") {
  const int port = recently_free_port();
  auto connecting = std::async(std::launch::async, [&] { return client(port, 60s); });
  // Give the client a head start so that it meets a refused connection
  // first; the test holds whichever way the race goes.
  std::this_thread::sleep_for(100ms);
  TcpStoreOptions o = server_options();
  o.port = port;
  TcpStoreServer server(o);
  REQUIRE(connecting.wait_for(60s) == std::future_status::ready);
  auto s = connecting.get();
  s->set("early", std::string_view("bird"));
  CHECK(s->get_string("early") == "bird");
}

TEST_CASE("world_size: clients return once all have joined", "[tcp_store]") {
  TcpStoreOptions so = server_options();
  so.world_size = 3;
  TcpStoreServer server(so);
  run_ranks(3, [&](int rank) {
    TcpStoreOptions o;
    o.port = server.port();
    o.token = "";
    o.world_size = 3;
    o.timeout = 60s;
    TcpStore s(o);
    expect(server.num_joined() >= 3, "all three joined before the constructor returned");
    s.set("joined/" + std::to_string(rank), std::string_view("yes"));
  });
  CHECK(server.wait_joined(3, 1s));
  // A client that says another world size is refused.
  TcpStoreOptions wrong;
  wrong.port = server.port();
  wrong.token = "";
  wrong.world_size = 5;
  std::string message;
  CHECK(code_of([&] { TcpStore s(wrong); }, &message) == ErrorCode::Mismatch);
  CHECK_THAT(message, Catch::Contains("says world size 5, this store expects 3"));
}

TEST_CASE("world_size: a join short of the world times out naming the count", "[tcp_store]") {
  TcpStoreOptions o = server_options();
  o.is_server = true;
  o.world_size = 2;
  o.timeout = 300ms;
  std::string message;
  CHECK(code_of([&] { TcpStore s(o); }, &message) == ErrorCode::Timeout);
  CHECK_THAT(message, Catch::Contains("waiting for 2 clients to join"));
  CHECK_THAT(message, Catch::Contains("1 of 2"));
}

TEST_CASE("a TcpStore can host its own server", "[tcp_store]") {
  TcpStoreOptions o = server_options();
  o.is_server = true;
  TcpStore host(o);
  REQUIRE(host.port() > 0);
  auto other = client(host.port());
  other->set("from", std::string_view("client"));
  CHECK(host.get_string("from") == "client");
  host.ping();
  CHECK(host.list_keys() == std::vector<std::string>{"from"});
}

TEST_CASE("a hosting TcpStore serves on while other clients use it, and not for ever", "[tcp_store]") {
  TcpStoreOptions o = server_options();
  o.is_server = true;
  auto host = std::make_unique<TcpStore>(o);
  auto active = client(host->port());
  auto quiet = client(host->port());
  quiet->set("here", std::string_view("1"));
  // The host's process is done first (rank 0's half of a split), while
  // another rank still sets up through the store.
  auto leaving = std::async(std::launch::async, [&] { host.reset(); });
  for (int i = 0; i < 40; ++i) {
    active->add("n", 1);
    std::this_thread::sleep_for(25ms);
  }
  CHECK(leaving.wait_for(0s) == std::future_status::timeout);  // still serving
  CHECK(active->add("n", 0) == 40);
  active.reset();
  // Only a quiet client is left: the server goes after its linger (2 s).
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(leaving.wait_for(20s) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - start < 6s);
  CHECK(code_of([&] { quiet->get("here", 5s); }) == ErrorCode::PeerLost);
}

TEST_CASE("list_keys lists by prefix, sorted", "[tcp_store]") {
  TcpStoreServer server(server_options());
  auto s = client(server.port());
  for (const char* k : {"b/2", "a/1", "b/1", "c"}) s->set(k, std::string_view("x"));
  CHECK(s->list_keys() == std::vector<std::string>{"a/1", "b/1", "b/2", "c"});
  CHECK(s->list_keys("b/") == std::vector<std::string>{"b/1", "b/2"});
  CHECK(s->list_keys("b/", 1) == std::vector<std::string>{"b/1"});
}

TEST_CASE("values over the limit are refused before they are sent", "[tcp_store]") {
  TcpStoreOptions so = server_options();
  so.max_value_bytes = 1024;
  TcpStoreServer server(so);
  TcpStoreOptions co;
  co.port = server.port();
  co.token = "";
  co.max_value_bytes = 1024;
  TcpStore s(co);
  std::string message;
  CHECK(code_of([&] { s.set("big", Bytes(2000)); }, &message) == ErrorCode::InvalidArgument);
  CHECK_THAT(message, Catch::Contains("over the limit of 1024"));
  s.set("ok", Bytes(1000));
  // The server enforces its own limit on what grows there.
  CHECK(code_of([&] { s.append("ok", Bytes(100)); }, &message) == ErrorCode::InvalidArgument);
  CHECK_THAT(message, Catch::Contains("over this store's limit"));
  CHECK(s.get("ok").size() == 1000);
}

TEST_CASE("from_url connects to a running server", "[tcp_store]") {
  TcpStoreServer server(server_options());
  auto a = Store::from_url("tcp://127.0.0.1:" + std::to_string(server.port()));
  auto b = Store::from_url("127.0.0.1:" + std::to_string(server.port()));
  a->set("url", std::string_view("works"));
  CHECK(b->get_string("url") == "works");
  CHECK(code_of([] { Store::from_url("http://127.0.0.1:80"); }) == ErrorCode::InvalidArgument);
  CHECK(code_of([] { Store::from_url("no-port"); }) == ErrorCode::InvalidArgument);
  CHECK(code_of([] { Store::from_url("tcp://127.0.0.1:0"); }) == ErrorCode::InvalidArgument);
}

TEST_CASE("from_launch_env: rank 0 hosts, every rank joins", "[tcp_store]") {
  const int port = recently_free_port();
  constexpr int kWorld = 4;
  run_ranks(kWorld, [&](int rank) {
    core::LaunchEnv launch;
    launch.rank = rank;
    launch.world_size = kWorld;
    launch.store_host = "127.0.0.1";
    launch.store_port = port;
    auto s = store::from_launch_env(launch, 60s, "");
    s->set("rank/" + std::to_string(rank), std::to_string(rank * 10));
    // Rank 0's server lives as long as its store, so rank 0 leaves last.
    for (int r = 0; r < kWorld; ++r)
      expect(s->get_string("rank/" + std::to_string(r)) == std::to_string(r * 10),
             "rank/" + std::to_string(r));
    if (s->add("done", 1) == kWorld) s->set("all done", std::string_view("1"));
    if (rank == 0) s->wait({"all done"}, 60s);
  });
}

TEST_CASE("Store::from_env with the launcher's variables", "[tcp_store]") {
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "0", 1);
  ::unsetenv("KIZUNA_STORE");
  auto s = Store::from_env();
  s->set("env", std::string_view("ok"));
  CHECK(s->get_string("env") == "ok");
  ::setenv("WORLD_SIZE", "2", 1);
  std::string message;
  CHECK(code_of([] { Store::from_env(); }, &message) == ErrorCode::InvalidArgument);
  CHECK_THAT(message, Catch::Contains("choose a port"));
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK(code_of([] { Store::from_env(); }) == ErrorCode::InvalidArgument);
}
