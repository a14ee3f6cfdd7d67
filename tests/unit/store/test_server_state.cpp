// ServerState without sockets: held requests are filed, woken, moved on
// to their next missing key and released without a trace.
#include <catch2/catch.hpp>

#include "store/server_state.hpp"

using namespace kizuna::store;
using wire::Op;

namespace {

struct TestWaiter : Waiter {
  int woken = 0;
  void ready() override { ++woken; }
};

wire::Request request(Op op, std::vector<std::string> keys = {},
                      std::vector<wire::Bytes> values = {}) {
  wire::Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

}  // namespace

TEST_CASE("a held multi_get wakes once all its keys exist", "[server_state]") {
  ServerState state(wire::Limits{}, std::nullopt);
  wire::Reply reply;
  const auto get = request(Op::MultiGet, {"a", "b", "c"});
  REQUIRE_FALSE(state.execute(get, reply));
  TestWaiter w;
  state.hold(w, get);
  CHECK(state.num_waiters() == 1);
  CHECK(state.execute(request(Op::Set, {"b"}, {{'2'}}), reply));
  CHECK(state.execute(request(Op::Set, {"a"}, {{'1'}}), reply));
  CHECK(w.woken == 0);
  CHECK(w.held());
  CHECK(state.execute(request(Op::Set, {"c"}, {{'3'}}), reply));
  CHECK(w.woken == 1);
  CHECK_FALSE(w.held());
  CHECK(state.num_waiters() == 0);
  state.answer(get, reply);
  CHECK(reply.values == std::vector<wire::Bytes>{{'1'}, {'2'}, {'3'}});
}

TEST_CASE("a released waiter is forgotten", "[server_state]") {
  ServerState state(wire::Limits{}, std::nullopt);
  wire::Reply reply;
  const auto get = request(Op::Get, {"k"});
  TestWaiter w;
  REQUIRE_FALSE(state.execute(get, reply));
  state.hold(w, get);
  state.release(w);
  state.release(w);  // twice is harmless
  CHECK(state.num_waiters() == 0);
  CHECK(state.execute(request(Op::Set, {"k"}, {{'v'}}), reply));
  CHECK(w.woken == 0);
  state.timed_out(get, reply);
  CHECK(reply.status == wire::Status::Timeout);
  CHECK(reply.keys.empty());  // "k" exists now
}

TEST_CASE("joins complete together at the world size, and a released join is uncounted",
          "[server_state]") {
  ServerState state(wire::Limits{}, std::nullopt);
  wire::Reply reply;
  auto join = request(Op::Join);
  join.number = 3;
  TestWaiter first, quitter, second;
  REQUIRE_FALSE(state.execute(join, reply));
  state.hold(first, join);
  REQUIRE_FALSE(state.execute(join, reply));
  state.hold(quitter, join);
  state.release(quitter);
  CHECK(state.num_joined() == 1);
  REQUIRE_FALSE(state.execute(join, reply));
  state.hold(second, join);
  CHECK(state.execute(join, reply));  // the third one completes the world
  CHECK(reply.number == 3);
  CHECK(first.woken == 1);
  CHECK(second.woken == 1);
  CHECK(quitter.woken == 0);
  auto other = join;
  other.number = 4;
  CHECK(state.execute(other, reply));
  CHECK(reply.status == wire::Status::Mismatch);
}

TEST_CASE("a join with another world size is refused, and so is every join held and to come, naming the client",
          "[server_state]") {
  ServerState state(wire::Limits{}, 2);
  wire::Reply reply;
  auto join = request(Op::Join);
  join.number = 2;
  TestWaiter rank0;
  REQUIRE_FALSE(state.execute(join, reply, "10.0.0.1:4000"));
  state.hold(rank0, join);
  auto wrong = join;
  wrong.number = 3;
  REQUIRE(state.execute(wrong, reply, "10.0.0.2:5000"));
  CHECK(reply.status == wire::Status::Mismatch);
  CHECK(reply.message.find("the client at 10.0.0.2:5000 says world size 3, this store expects 2") !=
        std::string::npos);
  // The held join is answered at once, with the same cause.
  CHECK(rank0.woken == 1);
  CHECK_FALSE(rank0.held());
  state.answer(join, reply);
  CHECK(reply.status == wire::Status::Mismatch);
  CHECK(reply.message.find("10.0.0.2:5000 says world size 3") != std::string::npos);
  CHECK(state.num_joined() == 0);
  CHECK(state.num_waiters() == 0);
  // A later join, even a right one, learns it too.
  REQUIRE(state.execute(join, reply, "10.0.0.3:6000"));
  CHECK(reply.status == wire::Status::Mismatch);
  CHECK(reply.message.find("10.0.0.2:5000") != std::string::npos);
  CHECK(state.num_join_refusals() == 3);  // the wrong one, the held one, the late one
}

TEST_CASE("list_keys, append limits and counters", "[server_state]") {
  wire::Limits limits;
  limits.max_value_bytes = 4;
  ServerState state(limits, std::nullopt);
  wire::Reply reply;
  CHECK(state.execute(request(Op::Append, {"x"}, {{'a', 'b', 'c'}}), reply));
  CHECK(reply.status == wire::Status::Ok);
  CHECK(state.execute(request(Op::Append, {"x"}, {{'d', 'e'}}), reply));
  CHECK(reply.status == wire::Status::TooLarge);
  CHECK(state.execute(request(Op::Append, {"y"}, {{'1', '2', '3', '4', '5'}}), reply));
  CHECK(reply.status == wire::Status::TooLarge);
  CHECK(state.num_keys() == 1);  // the refused append did not create "y"
  auto add = request(Op::Add, {"n"});
  add.number = 5;
  CHECK(state.execute(add, reply));
  CHECK(reply.number == 5);
  auto list = request(Op::ListKeys);
  CHECK(state.execute(list, reply));
  CHECK(reply.keys == std::vector<std::string>{"n", "x"});
}
