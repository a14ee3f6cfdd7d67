// consumer.cpp: a program outside the kizuna tree, built against an
// installed kizuna with CMake (find_package(kizuna), CMakeLists.txt beside
// it). Every rank adds rank + 1 to a million floats; each checks the sum.
// Run it under a launcher:
//   kizuna-run --nproc-per-node 3 -- ./consumer
#include <kizuna/kizuna.hpp>

#include <cstdio>
#include <vector>

int main() {
  try {
    // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (kizuna-run sets them).
    auto comm = kizuna::Communicator::from_env();
    const int rank = comm->rank();
    const int world = comm->size();

    std::vector<float> grad(1 << 20, static_cast<float>(rank + 1));
    comm->all_reduce(grad.data(), grad.size(), kizuna::DataType::Float32, kizuna::ReduceOp::Sum).wait();

    const float expected = world * (world + 1) / 2.0f;  // 1 + 2 + ... + world
    for (std::size_t i = 0; i < grad.size(); ++i) {
      if (grad[i] != expected) {
        std::fprintf(stderr, "consumer: rank %d: element %zu is %g, expected %g\n", rank, i, grad[i], expected);
        return 1;
      }
    }
    std::printf("consumer (C++): rank %d of %d: all_reduce of %zu floats gave %g, kizuna %s\n", rank, world,
                grad.size(), expected, KIZUNA_VERSION_STRING);
    return 0;
  } catch (const kizuna::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
