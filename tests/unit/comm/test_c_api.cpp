// The C ABI (kizuna.h) from threads: a communicator aborted by one thread
// while another is blocked in a call on it.
#include <catch2/catch.hpp>

#include <kizuna/comm.hpp>
#include <kizuna/kizuna.h>
#include <kizuna/tcp_store.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "processes.hpp"

TEST_CASE("kzCommAbort from another thread fails a call blocked on the communicator, which stays valid until it returns",
          "[comm][c_api]") {
  // Rank 0 through the C ABI (it hosts the store); rank 1 through C++ in
  // this same process, named as the C ABI names its first communicator
  // (two default-named ranks in one process would count apart).
  const int port = kizuna::test::free_port();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  kzComm_t comm = nullptr;
  kzResult_t made = kzInternalError;
  std::thread init([&] { made = kzCommInitRank(&comm, 2, store.c_str(), 0); });
  kizuna::TcpStoreOptions client;
  client.port = port;
  kizuna::CommOptions options;
  options.store = std::make_shared<kizuna::TcpStore>(client);
  options.rank = 1;
  options.world_size = 2;
  options.name = "kizuna/comm0";
  std::shared_ptr<kizuna::Communicator> other = kizuna::Communicator::create(options);
  init.join();
  REQUIRE(made == kzSuccess);

  // Rank 0 calls an all-reduce that rank 1 never joins; the main thread
  // aborts rank 0's communicator (and frees its handle) meanwhile.
  std::vector<float> data(1000, 1.0f);
  kzResult_t blocked = kzSuccess;
  std::thread caller([&] { blocked = kzAllReduce(data.data(), data.data(), data.size(), kzFloat32, kzSum, comm, nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(kzCommAbort(comm) == kzSuccess);
  caller.join();
  CHECK(blocked == kzAborted);
  CHECK(kzCommDestroy(nullptr) == kzSuccess);
  other->abort("the test is over");
}
