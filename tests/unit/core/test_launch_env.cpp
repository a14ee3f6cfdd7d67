#include <catch2/catch.hpp>

#include <kizuna/error.hpp>

#include <map>

#include "core/launch_env.hpp"

using namespace kizuna;
using namespace kizuna::core;

namespace {
LaunchEnv launch(std::map<std::string, std::string> vars) {
  return LaunchEnv::parse([vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}
}  // namespace

TEST_CASE("torchrun-style variables", "[launch_env]") {
  const LaunchEnv e = launch({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                              {"LOCAL_WORLD_SIZE", "2"}, {"NODE_RANK", "1"},
                              {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  CHECK(e.source == "RANK/WORLD_SIZE");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.node_rank == 1);
  CHECK(e.store_host == "10.0.0.1");
  CHECK(e.store_port == 29500);
  e.require_rank();
  e.require_store();
}

TEST_CASE("Open MPI and Slurm variables when RANK is absent", "[launch_env]") {
  const LaunchEnv mpi = launch({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"SLURM_PROCID", "9"}});
  CHECK(mpi.source == "Open MPI");
  CHECK(mpi.rank == 2);
  CHECK(mpi.world_size == 4);
  CHECK(mpi.local_rank == 0);
  const LaunchEnv slurm = launch({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}});
  CHECK(slurm.source == "Slurm");
  CHECK(slurm.rank == 5);
  CHECK(slurm.world_size == 8);
  const LaunchEnv both = launch({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "2"}});
  CHECK(both.source == "RANK/WORLD_SIZE");
}

TEST_CASE("KIZUNA_STORE wins over MASTER_ADDR/MASTER_PORT", "[launch_env]") {
  const LaunchEnv e = launch({{"KIZUNA_STORE", "tcp://[::1]:1234"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}});
  CHECK(e.store_host == "::1");
  CHECK(e.store_port == 1234);
  CHECK(e.store_source == "KIZUNA_STORE");
}

TEST_CASE("malformed launcher variables are named", "[launch_env]") {
  auto error_of = [](std::map<std::string, std::string> vars) -> std::string {
    try {
      launch(std::move(vars));
    } catch (const Error& err) {
      CHECK(err.code() == ErrorCode::InvalidArgument);
      return err.what();
    }
    return "";
  };
  CHECK(error_of({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}).find("RANK='abc'") != std::string::npos);
  CHECK(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("not below world size") != std::string::npos);
  CHECK(error_of({{"MASTER_PORT", "70000"}}).find("MASTER_PORT") != std::string::npos);
  CHECK(error_of({{"KIZUNA_STORE", "nohost"}}).find("KIZUNA_STORE") != std::string::npos);
  const LaunchEnv none = launch({});
  CHECK_THROWS_WITH(none.require_rank(), Catch::Contains("set RANK and WORLD_SIZE"));
  CHECK_THROWS_WITH(none.require_store(), Catch::Contains("MASTER_ADDR"));
}
