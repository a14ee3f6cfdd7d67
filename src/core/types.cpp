#include <kizuna/types.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

#include "core/check.hpp"

namespace kizuna {
namespace {

struct DataTypeName {
  std::string_view spelling;
  DataType type;
};

// Every spelling parse_data_type accepts; the first of each type is canonical.
constexpr std::array kDataTypeNames{
    DataTypeName{"int8", DataType::Int8},        DataTypeName{"i8", DataType::Int8},
    DataTypeName{"char", DataType::Int8},        DataTypeName{"uint8", DataType::UInt8},
    DataTypeName{"u8", DataType::UInt8},         DataTypeName{"byte", DataType::UInt8},
    DataTypeName{"int32", DataType::Int32},      DataTypeName{"i32", DataType::Int32},
    DataTypeName{"int", DataType::Int32},        DataTypeName{"uint32", DataType::UInt32},
    DataTypeName{"u32", DataType::UInt32},       DataTypeName{"int64", DataType::Int64},
    DataTypeName{"i64", DataType::Int64},        DataTypeName{"long", DataType::Int64},
    DataTypeName{"uint64", DataType::UInt64},    DataTypeName{"u64", DataType::UInt64},
    DataTypeName{"float16", DataType::Float16},  DataTypeName{"f16", DataType::Float16},
    DataTypeName{"fp16", DataType::Float16},     DataTypeName{"half", DataType::Float16},
    DataTypeName{"bfloat16", DataType::BFloat16}, DataTypeName{"bf16", DataType::BFloat16},
    DataTypeName{"float32", DataType::Float32},  DataTypeName{"f32", DataType::Float32},
    DataTypeName{"fp32", DataType::Float32},     DataTypeName{"float", DataType::Float32},
    DataTypeName{"float64", DataType::Float64},  DataTypeName{"f64", DataType::Float64},
    DataTypeName{"fp64", DataType::Float64},     DataTypeName{"double", DataType::Float64},
};

constexpr std::array<std::pair<std::string_view, ReduceOp>, 7> kReduceOpNames{{
    {"sum", ReduceOp::Sum},
    {"prod", ReduceOp::Prod},
    {"product", ReduceOp::Prod},
    {"min", ReduceOp::Min},
    {"max", ReduceOp::Max},
    {"avg", ReduceOp::Avg},
    {"mean", ReduceOp::Avg},
}};

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string_view name(DataType t) {
  switch (t) {
    case DataType::Int8: return "int8";
    case DataType::UInt8: return "uint8";
    case DataType::Int32: return "int32";
    case DataType::UInt32: return "uint32";
    case DataType::Int64: return "int64";
    case DataType::UInt64: return "uint64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
  }
  return "invalid";
}

std::string_view name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "invalid";
}

DataType parse_data_type(std::string_view text) {
  const std::string key = lower(text);
  for (const auto& entry : kDataTypeNames)
    if (entry.spelling == key) return entry.type;
  std::string accepted;
  for (const auto& entry : kDataTypeNames) {
    if (!accepted.empty()) accepted += ", ";
    accepted += entry.spelling;
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "unknown data type '", text,
               "'; accepted: ", accepted);
}

ReduceOp parse_reduce_op(std::string_view text) {
  const std::string key = lower(text);
  for (const auto& [spelling, op] : kReduceOpNames)
    if (spelling == key) return op;
  std::string accepted;
  for (const auto& [spelling, op] : kReduceOpNames) {
    if (!accepted.empty()) accepted += ", ";
    accepted += spelling;
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "unknown reduction '", text, "'; accepted: ", accepted);
}

}  // namespace kizuna
