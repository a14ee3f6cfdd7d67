// A program outside the kizuna tree, built against an installed kizuna.
#include <kizuna/config.hpp>
#include <kizuna/error.hpp>
#include <kizuna/types.hpp>

#include <cstdio>

int main() {
  const kizuna::DataType t = kizuna::parse_data_type("bf16");
  if (kizuna::size_of(t) != 2) return 1;
  try {
    kizuna::parse_reduce_op("nope");
    return 2;
  } catch (const kizuna::Error& e) {
    if (e.code() != kizuna::ErrorCode::InvalidArgument) return 3;
  }
  std::printf("consumer: kizuna %s, %s is %zu bytes, CUDA %d\n", KIZUNA_VERSION_STRING,
              kizuna::name(t).data(), kizuna::size_of(t), KIZUNA_HAS_CUDA);
  return 0;
}
