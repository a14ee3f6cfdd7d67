#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <kizuna/types.hpp>

using namespace kizuna;

TEST_CASE("DataType sizes and names round-trip", "[types]") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    CAPTURE(i);
    CHECK(parse_data_type(name(t)) == t);
    CHECK((size_of(t) == 1 || size_of(t) == 2 || size_of(t) == 4 || size_of(t) == 8));
  }
  CHECK(size_of(DataType::BFloat16) == 2);
  CHECK(size_of(DataType::Float64) == 8);
  CHECK(is_floating(DataType::Float16));
  CHECK_FALSE(is_floating(DataType::Int64));
}

TEST_CASE("DataType parses common spellings", "[types]") {
  CHECK(parse_data_type("float32") == DataType::Float32);
  CHECK(parse_data_type("f32") == DataType::Float32);
  CHECK(parse_data_type("FP32") == DataType::Float32);
  CHECK(parse_data_type("float") == DataType::Float32);
  CHECK(parse_data_type("bf16") == DataType::BFloat16);
  CHECK(parse_data_type("half") == DataType::Float16);
  CHECK(parse_data_type("fp16") == DataType::Float16);
  CHECK(parse_data_type("double") == DataType::Float64);
  CHECK(parse_data_type("int8") == DataType::Int8);
  CHECK(parse_data_type("uint8") == DataType::UInt8);
  CHECK(parse_data_type("i64") == DataType::Int64);
}

TEST_CASE("an unknown type name lists the accepted names", "[types]") {
  try {
    parse_data_type("float128");
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
    const std::string what = e.what();
    CHECK(what.find("float128") != std::string::npos);
    CHECK(what.find("bfloat16") != std::string::npos);
    CHECK(what.find("float32") != std::string::npos);
  }
}

TEST_CASE("ReduceOp names round-trip and unknown ones are rejected", "[types]") {
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    CHECK(parse_reduce_op(name(op)) == op);
  }
  CHECK(parse_reduce_op("PRODUCT") == ReduceOp::Prod);
  CHECK(parse_reduce_op("mean") == ReduceOp::Avg);
  CHECK_THROWS_AS(parse_reduce_op("xor"), Error);
}
