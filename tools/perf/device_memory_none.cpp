// A kizuna-perf built without CUDA: --device cuda is an error naming why.
#include <kizuna/error.hpp>

#include "device_memory.hpp"

namespace kizuna::perf {

int cuda_device_count() {
  throw Error(ErrorCode::InvalidArgument,
              "--device cuda: this kizuna-perf was built without CUDA (no nvcc when it was configured)");
}

std::unique_ptr<DeviceMemory> make_device_memory(int, std::size_t) { return nullptr; }

}  // namespace kizuna::perf
