// kizuna/types.hpp: the element types and reduction operators that every
// collective, reduction and wire message speaks in.
//
// DataType and ReduceOp are plain enums with fixed numeric values: they cross
// sockets and shared memory (in fingerprints and step tables) and the C ABI,
// so their values never change. parse_* accept the spellings people type
// ("float32", "f32", "fp32", "bf16", "half", ...) and throw
// kizuna::Error(InvalidArgument) naming the accepted spellings otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kizuna {

// A receive's source: whichever rank's matching message comes first
// (Communicator::recv, Work::source).
inline constexpr int kAnySource = -1;

enum class DataType : std::uint8_t {
  Int8 = 0,
  UInt8 = 1,
  Int32 = 2,
  UInt32 = 3,
  Int64 = 4,
  UInt64 = 5,
  Float16 = 6,
  BFloat16 = 7,
  Float32 = 8,
  Float64 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : std::uint8_t {
  Sum = 0,
  Prod = 1,
  Min = 2,
  Max = 3,
  Avg = 4,  // Sum, then divided by the number of ranks (floating types only)
};
inline constexpr int kNumReduceOps = 5;

// Size of one element in bytes.
constexpr std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::UInt8: return 1;
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::UInt32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::UInt64:
    case DataType::Float64: return 8;
  }
  return 0;
}

constexpr bool is_floating(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}

constexpr bool is_valid(DataType t) { return static_cast<int>(t) < kNumDataTypes; }
constexpr bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

// A CUDA stream (cudaStream_t) passed opaquely: public headers never
// include the CUDA runtime. A null handle: no stream (host memory).
struct DeviceStream {
  void* handle = nullptr;
};

// Canonical names: "int8", "uint8", "int32", "uint32", "int64", "uint64",
// "float16", "bfloat16", "float32", "float64"; "sum", "prod", "min", "max", "avg".
std::string_view name(DataType t);
std::string_view name(ReduceOp op);

// Parse a type or operator name, case-insensitively. Throws InvalidArgument
// listing the accepted names when `text` is none of them.
DataType parse_data_type(std::string_view text);
ReduceOp parse_reduce_op(std::string_view text);

}  // namespace kizuna
