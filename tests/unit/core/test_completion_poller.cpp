// CompletionPoller (core/completion_poller.hpp): how device work's
// completion is found without CUDA host functions. A point that never
// completes (a kernel fault, a peer that died: CUDA never calls a host
// function after an error) ends in Timeout by its deadline, naming the
// call; an error while polling fails only that call; callbacks run once,
// on the poller's thread, and may watch more; what is pending at
// destruction fails with Aborted.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/completion_poller.hpp"

using namespace kizuna;
using namespace std::chrono_literals;
using core::CompletionPoller;

namespace {

struct Outcome {
  std::promise<std::exception_ptr> promise;
  std::atomic<int> calls{0};
  std::thread::id thread;
  std::function<void(std::exception_ptr)> callback() {
    return [this](std::exception_ptr e) {
      thread = std::this_thread::get_id();
      if (calls.fetch_add(1) == 0) promise.set_value(e);
    };
  }
  std::exception_ptr get() {
    auto f = promise.get_future();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
  }
};

ErrorCode code_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.code();
  }
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& err) {
    return err.what();
  }
}

}  // namespace

TEST_CASE("completion poller: a point that completes ends the call, on the poller's thread", "[core][cuda]") {
  CompletionPoller poller;
  std::atomic<bool> reached{false};
  Outcome out;
  poller.watch({[&] { return reached.load(); }, CompletionPoller::Clock::now() + 30s, "all_reduce #1",
                out.callback(), nullptr});
  std::this_thread::sleep_for(5ms);
  CHECK(out.calls == 0);
  reached = true;
  CHECK(out.get() == nullptr);
  CHECK(out.thread != std::this_thread::get_id());
  std::this_thread::sleep_for(5ms);
  CHECK(out.calls == 1);
  CHECK(poller.pending() == 0);
}

TEST_CASE("completion poller: a point that never completes is a Timeout naming the call, and raises the abort",
          "[core][cuda]") {
  CompletionPoller poller;
  std::atomic<bool> expired{false};
  Outcome out;
  const auto start = CompletionPoller::Clock::now();
  poller.watch({[] { return false; }, start + 100ms, "all_reduce #7 on device (ring) on rank 0 of kizuna/comm0",
                out.callback(), [&] { expired = true; }});
  const std::exception_ptr e = out.get();
  REQUIRE(e != nullptr);
  CHECK(code_of(e) == ErrorCode::Timeout);
  CHECK(message_of(e).find("all_reduce #7 on device (ring) on rank 0 of kizuna/comm0 timed out") !=
        std::string::npos);
  CHECK(expired);
  CHECK(CompletionPoller::Clock::now() - start >= 100ms);
}

TEST_CASE("completion poller: an error while polling fails that call alone", "[core][cuda]") {
  CompletionPoller poller;
  Outcome bad, good;
  std::atomic<bool> reached{false};
  poller.watch({[]() -> bool { throw Error(ErrorCode::CudaError, "an illegal memory access was encountered"); },
                CompletionPoller::Clock::now() + 30s, "broadcast #2", bad.callback(), nullptr});
  poller.watch({[&] { return reached.load(); }, CompletionPoller::Clock::now() + 30s, "broadcast #3",
                good.callback(), nullptr});
  const std::exception_ptr e = bad.get();
  CHECK(code_of(e) == ErrorCode::CudaError);
  CHECK(message_of(e).find("illegal memory access") != std::string::npos);
  reached = true;
  CHECK(good.get() == nullptr);
}

TEST_CASE("completion poller: a callback may watch more, and destruction fails what is pending", "[core][cuda]") {
  Outcome first, second, never;
  {
    CompletionPoller poller;
    poller.watch({[] { return true; }, CompletionPoller::Clock::now() + 30s, "first",
                  [&](std::exception_ptr e) {
                    poller.watch({[] { return true; }, CompletionPoller::Clock::now() + 30s, "second",
                                  second.callback(), nullptr});
                    first.callback()(e);
                  },
                  nullptr});
    CHECK(first.get() == nullptr);
    CHECK(second.get() == nullptr);
    poller.watch({[] { return false; }, CompletionPoller::Clock::now() + 1h, "reduce #9", never.callback(),
                  nullptr});
  }
  const std::exception_ptr e = never.get();
  CHECK(code_of(e) == ErrorCode::Aborted);
  CHECK(message_of(e).find("reduce #9") != std::string::npos);
}

TEST_CASE("completion poller: what a call that timed out holds lives until the device is past it", "[core][cuda]") {
  // The buffers a stalled copy still writes into must not be freed (or
  // reused) when its call is reported timed out.
  CompletionPoller poller;
  std::atomic<bool> reached{false};
  auto buffer = std::make_shared<int>(7);
  std::weak_ptr<int> watched = buffer;
  Outcome out;
  poller.watch({[&] { return reached.load(); }, CompletionPoller::Clock::now() + 50ms, "all_reduce #3 (staged)",
                [buffer = std::move(buffer), done = out.callback()](std::exception_ptr e) { done(e); }, nullptr});
  CHECK(code_of(out.get()) == ErrorCode::Timeout);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(watched.expired());
  CHECK(poller.pending() == 0);  // reported; only kept
  reached = true;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!watched.expired() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(watched.expired());
  CHECK(out.calls == 1);
}
