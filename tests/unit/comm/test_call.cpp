// One argument check per collective (comm/call.hpp), shared by the host and
// device overloads, the C ABI and the torch plugin; and the code every
// message of a call carries.
#include <catch2/catch.hpp>

#include "comm/call.hpp"
#include "error_of.hpp"

using namespace kizuna;
using namespace kizuna::comm;
using algo::Collective;

namespace {

std::string problem(const Call& c, int rank = 0, int world = 4) {
  const Error e = test::error_of_call([&] { validate(c, rank, world); });
  if (e.code() == ErrorCode::Internal) return "";
  CHECK(e.code() == ErrorCode::InvalidArgument);
  return e.what();
}

Call collective(Collective what, const void* send, void* recv, std::size_t count, DataType t = DataType::Float32,
                ReduceOp op = ReduceOp::Sum, int root = 0) {
  return {CallKind::Collective, what, send, recv, count, t, op, root};
}

}  // namespace

TEST_CASE("calls: valid arguments pass, on every collective", "[comm][call]") {
  float a[8] = {}, b[32] = {};
  CHECK(problem(collective(Collective::AllReduce, a, b, 8)).empty());
  CHECK(problem(collective(Collective::AllReduce, a, a, 8)).empty());
  CHECK(problem(collective(Collective::AllReduce, nullptr, nullptr, 0)).empty());
  CHECK(problem(collective(Collective::Broadcast, nullptr, b, 8, DataType::Float32, ReduceOp::Sum, 1)).empty());
  CHECK(problem(collective(Collective::Reduce, a, nullptr, 8, DataType::Float32, ReduceOp::Sum, 1)).empty());
  CHECK(problem(collective(Collective::AllGather, a, b, 8)).empty());
  CHECK(problem(collective(Collective::ReduceScatter, b, a, 8)).empty());
  CHECK(problem(collective(Collective::Barrier, nullptr, nullptr, 0)).empty());
  CHECK(problem({CallKind::Send, Collective::AllReduce, a, nullptr, 8, DataType::Int8, ReduceOp::Sum, 2}).empty());
  CHECK(problem({CallKind::Recv, Collective::AllReduce, nullptr, b, 8, DataType::Int8, ReduceOp::Sum, 3}).empty());
  // An operator the collective does not use is not looked at.
  CHECK(problem(collective(Collective::Broadcast, a, b, 8, DataType::Int32, ReduceOp::Avg)).empty());
}

TEST_CASE("calls: each wrong argument is named", "[comm][call]") {
  float a[8] = {}, b[32] = {};
  CHECK_THAT(problem(collective(Collective::AllReduce, a, b, 8, static_cast<DataType>(42))),
             Catch::Contains("all_reduce: invalid data type code 42"));
  CHECK_THAT(problem(collective(Collective::Reduce, a, b, 8, DataType::Float32, static_cast<ReduceOp>(9))),
             Catch::Contains("reduce: invalid reduction code 9"));
  CHECK_THAT(problem(collective(Collective::AllReduce, a, b, 8, DataType::Int32, ReduceOp::Avg)),
             Catch::Contains("avg is defined for floating types only, not int32"));
  CHECK_THAT(problem(collective(Collective::AllGather, a, b, SIZE_MAX / 8)),
             Catch::Contains("all_gather: a count of") && Catch::Contains("times the world size"));
  CHECK_THAT(problem(collective(Collective::AllReduce, nullptr, b, 8)),
             Catch::Contains("all_reduce: send buffer is null with count 8"));
  CHECK_THAT(problem(collective(Collective::AllReduce, a, nullptr, 8)),
             Catch::Contains("all_reduce: receive buffer is null with count 8"));
  CHECK_THAT(problem(collective(Collective::Broadcast, nullptr, b, 8)),
             Catch::Contains("broadcast: send buffer is null"));  // on the root
  CHECK_THAT(problem(collective(Collective::Reduce, a, nullptr, 8)),
             Catch::Contains("reduce: receive buffer is null"));  // on the root
  CHECK_THAT(problem(collective(Collective::Broadcast, a, b, 8, DataType::Float32, ReduceOp::Sum, 4)),
             Catch::Contains("broadcast: root 4 is out of range for world size 4"));
  CHECK_THAT(problem({CallKind::Send, Collective::AllReduce, a, nullptr, 8, DataType::Int8, ReduceOp::Sum, 0}),
             Catch::Contains("send: peer 0 is not another rank of a world of 4"));
  CHECK_THAT(problem({CallKind::Recv, Collective::AllReduce, nullptr, nullptr, 8, DataType::Int8, ReduceOp::Sum, 1}),
             Catch::Contains("recv: buffer is null with count 8"));
  CHECK_THAT(problem(collective(Collective::AllReduce, b, b + 4, 8)),
             Catch::Contains("all_reduce: send and recv overlap without being the same buffer"));
}

TEST_CASE("calls: every field every rank must agree on changes the message code", "[comm][call]") {
  const Call base = collective(Collective::Broadcast, nullptr, nullptr, 1000, DataType::Float32, ReduceOp::Sum, 1);
  Call other = base;
  other.collective = Collective::AllReduce;
  CHECK(message_code(other) != message_code(base));
  CHECK_THAT(describe_message_code(message_code(other), message_code(base)), Catch::StartsWith("all_reduce of float32, sum"));
  other = base;
  other.count = 1001;
  CHECK(message_code(other) != message_code(base));
  CHECK_THAT(describe_message_code(message_code(other), message_code(base)), Catch::Contains("another count or root"));
  other = base;
  other.root = 2;
  CHECK(message_code(other) != message_code(base));
  other = base;
  other.dtype = DataType::Int32;
  CHECK(message_code(other) != message_code(base));
  // The operator counts only where the collective reduces.
  other = base;
  other.op = ReduceOp::Max;
  CHECK(message_code(other) == message_code(base));
  Call sum = collective(Collective::AllReduce, nullptr, nullptr, 10);
  Call max = sum;
  max.op = ReduceOp::Max;
  CHECK(message_code(sum) != message_code(max));
  // The root counts only where there is one.
  Call root0 = sum, root1 = sum;
  root1.root = 1;
  CHECK(message_code(root0) == message_code(root1));
  CHECK(message_code({CallKind::Send, Collective::AllReduce, nullptr, nullptr, 10, DataType::Int8, ReduceOp::Sum, 1}) == 0);
}
