// Growing a group, ranks as threads: processes waiting in join() are
// admitted by the members' grow(), after a shrink too, and every result is
// compared with a serial reference.
#include <catch2/catch.hpp>

#include <kizuna/comm.hpp>
#include <kizuna/hash_store.hpp>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "error_of.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// An all-reduce where each rank brings `id + 1` times (i + 1): the sum is
// the ids' weight times (i + 1), whatever the ranks' numbers.
void check_sum(Communicator& c, int id, const std::vector<int>& ids, std::size_t count) {
  std::vector<std::int64_t> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<std::int64_t>((id + 1) * (i + 1));
  c.all_reduce(v.data(), count, DataType::Int64, ReduceOp::Sum).wait();
  const std::int64_t weight = std::accumulate(ids.begin(), ids.end(), 0, [](int s, int r) { return s + r + 1; });
  for (std::size_t i = 0; i < count; ++i) REQUIRE(v[i] == weight * static_cast<std::int64_t>(i + 1));
}

CommOptions options_of(const std::shared_ptr<Store>& store, const std::string& name) {
  CommOptions o;
  o.store = store;
  o.name = name;
  o.setup_timeout = 20s;
  return o;
}

}  // namespace

TEST_CASE("grow with nobody waiting returns nullptr on every rank and the group goes on", "[comm][grow]") {
  const auto comms = make_comms(3);
  run_ranks(3, [&](int r) {
    CHECK(comms[r]->grow() == nullptr);
    check_sum(*comms[r], r, {0, 1, 2}, 1000);
  });
}

TEST_CASE("grow admits the processes waiting in join, numbered after the members in the order they came",
          "[comm][grow]") {
  const auto store = std::make_shared<HashStore>();
  const auto comms = make_comms(3, options_of(store, "test/grow0"));
  std::vector<std::shared_ptr<Communicator>> grown(5);
  std::atomic<int> tickets{0};
  run_ranks(5, [&](int r) {
    if (r >= 3) {
      // the joiners come one after the other, so their order is known
      while (tickets.load() != r - 3) std::this_thread::sleep_for(1ms);
      std::thread mark([&] {
        std::this_thread::sleep_for(50ms);
        ++tickets;
      });
      grown[r] = Communicator::join(options_of(store, "test/grow0"));
      mark.join();
    } else {
      while (tickets.load() < 2) std::this_thread::sleep_for(1ms);
      grown[r] = comms[r]->grow();
      REQUIRE(grown[r]);
    }
    CHECK(grown[r]->size() == 5);
    CHECK(grown[r]->rank() == r);
    check_sum(*grown[r], r, {0, 1, 2, 3, 4}, 65537);
  });
  // The old group stays usable.
  run_ranks(3, [&](int r) { check_sum(*comms[r], r, {0, 1, 2}, 17); });
}

TEST_CASE("grow admits at most `most` and leaves the others waiting for the next", "[comm][grow]") {
  const auto store = std::make_shared<HashStore>();
  const auto comms = make_comms(2, options_of(store, "test/grow1"));
  std::vector<std::shared_ptr<Communicator>> once(4), twice(4);
  std::atomic<int> waiting{0};
  run_ranks(4, [&](int r) {
    if (r >= 2) {
      while (waiting.load() != r - 2) std::this_thread::sleep_for(1ms);
      std::thread mark([&] {
        std::this_thread::sleep_for(50ms);
        ++waiting;
      });
      std::shared_ptr<Communicator> c = Communicator::join(options_of(store, "test/grow1"));
      mark.join();
      if (r == 2) {
        CHECK(c->size() == 3);
        twice[r] = c->grow(1);
      } else {
        CHECK(c->size() == 4);
        twice[r] = c;
      }
    } else {
      while (waiting.load() < 2) std::this_thread::sleep_for(1ms);
      once[r] = comms[r]->grow(1);
      REQUIRE(once[r]->size() == 3);
      twice[r] = once[r]->grow(1);
    }
    REQUIRE(twice[r]);
    CHECK(twice[r]->rank() == r);
    check_sum(*twice[r], r, {0, 1, 2, 3}, 4099);
  });
}

TEST_CASE("after a shrink, a replacement joins and the group is whole again", "[comm][grow][shrink]") {
  const auto store = std::make_shared<HashStore>();
  CommOptions options = options_of(store, "test/grow2");
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  const auto comms = make_comms(4, options);
  std::vector<std::shared_ptr<Communicator>> whole(5);
  std::atomic<bool> shrunk{false};
  run_ranks(5, [&](int r) {
    if (r == 1) {  // dies
      comms[1]->abort("simulated crash");
      return;
    }
    if (r == 4) {  // its replacement, started once the survivors have shrunk
      while (!shrunk.load()) std::this_thread::sleep_for(1ms);
      whole[r] = Communicator::join(options);  // the members' options: the same transport
    } else {
      std::int64_t x = 1;
      CHECK(error_of(comms[r]->all_reduce(&x, 1, DataType::Int64, ReduceOp::Sum)).code() == ErrorCode::PeerLost);
      std::shared_ptr<Communicator> three = comms[r]->shrink();
      REQUIRE(three->size() == 3);
      if (three->rank() == 0) shrunk = true;
      // the survivors ask at every step until it has come
      while (!(whole[r] = three->grow())) {
        check_sum(*three, r, {0, 2, 3}, 100);
        std::this_thread::sleep_for(5ms);
      }
    }
    REQUIRE(whole[r]);
    CHECK(whole[r]->size() == 4);
    // the state the replacement needs comes from a healthy peer
    std::int64_t step = whole[r]->rank() == 0 ? 42 : 0;
    whole[r]->broadcast(&step, 1, DataType::Int64, 0).wait();
    CHECK(step == 42);
    check_sum(*whole[r], r, {0, 2, 3, 4}, 300007);
  });
  CHECK(whole[4]->rank() == 3);
  CHECK(whole[0]->rank() == 0);
  CHECK(whole[2]->rank() == 1);
  CHECK(whole[3]->rank() == 2);
}

TEST_CASE("join with no grow ends with a Timeout saying the group must call grow", "[comm][grow]") {
  CommOptions o = options_of(std::make_shared<HashStore>(), "test/grow3");
  o.setup_timeout = 300ms;
  const auto start = Clock::now();
  const Error e = error_of_call([&] { Communicator::join(o); });
  CHECK(Clock::now() - start < 5s);
  CHECK(e.code() == ErrorCode::Timeout);
  CHECK_THAT(e.what(), Catch::Contains("no member admitted this process (ticket 1) within 300 ms"));
}
