#include "core/launch_env.hpp"

#include "core/check.hpp"

namespace kizuna::core {
namespace {

int read_int(const Env::Lookup& lookup, const char* name, int min, int max) {
  const auto value = lookup(name);
  if (!value) return -1;
  return static_cast<int>(parse_int(name, *value, min, max));
}

constexpr int kMaxRanks = 1 << 20;

}  // namespace

void split_host_port(std::string_view what, std::string_view address, std::string& host, int& port) {
  std::string_view host_part, port_part;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close != std::string_view::npos && close + 1 < address.size() && address[close + 1] == ':') {
      host_part = address.substr(1, close - 1);
      port_part = address.substr(close + 2);
    }
  } else if (const auto colon = address.rfind(':'); colon != std::string_view::npos) {
    host_part = address.substr(0, colon);
    port_part = address.substr(colon + 1);
  }
  if (host_part.empty() || port_part.empty())
    KIZUNA_THROW(ErrorCode::InvalidArgument, what, "='", address,
                 "' is not an address; expected host:port (IPv6 as [addr]:port)");
  host = std::string(host_part);
  port = static_cast<int>(parse_int(what, port_part, 0, 65535));
}

LaunchEnv LaunchEnv::parse(const Env::Lookup& lookup) {
  LaunchEnv env;
  if (lookup("RANK") || lookup("WORLD_SIZE")) {
    env.source = "RANK/WORLD_SIZE";
    env.rank = read_int(lookup, "RANK", 0, kMaxRanks);
    env.world_size = read_int(lookup, "WORLD_SIZE", 1, kMaxRanks);
    env.local_rank = read_int(lookup, "LOCAL_RANK", 0, kMaxRanks);
    env.local_world_size = read_int(lookup, "LOCAL_WORLD_SIZE", 1, kMaxRanks);
    env.node_rank = read_int(lookup, "NODE_RANK", 0, kMaxRanks);
    if (env.node_rank < 0) env.node_rank = read_int(lookup, "GROUP_RANK", 0, kMaxRanks);
  } else if (lookup("OMPI_COMM_WORLD_RANK")) {
    env.source = "Open MPI";
    env.rank = read_int(lookup, "OMPI_COMM_WORLD_RANK", 0, kMaxRanks);
    env.world_size = read_int(lookup, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
    env.local_rank = read_int(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks);
    env.local_world_size = read_int(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks);
    env.node_rank = read_int(lookup, "OMPI_COMM_WORLD_NODE_RANK", 0, kMaxRanks);
  } else if (lookup("SLURM_PROCID")) {
    env.source = "Slurm";
    env.rank = read_int(lookup, "SLURM_PROCID", 0, kMaxRanks);
    env.world_size = read_int(lookup, "SLURM_NTASKS", 1, kMaxRanks);
    env.local_rank = read_int(lookup, "SLURM_LOCALID", 0, kMaxRanks);
    env.node_rank = read_int(lookup, "SLURM_NODEID", 0, kMaxRanks);
  }
  if (env.rank >= 0 && env.world_size > 0 && env.rank >= env.world_size)
    KIZUNA_THROW(ErrorCode::InvalidArgument, "rank ", env.rank, " is not below world size ",
                 env.world_size, " (from ", env.source, ")");
  if (env.local_rank >= 0 && env.local_world_size > 0 && env.local_rank >= env.local_world_size)
    KIZUNA_THROW(ErrorCode::InvalidArgument, "local rank ", env.local_rank,
                 " is not below the local world size ", env.local_world_size);

  if (const auto store = lookup("KIZUNA_STORE")) {
    std::string address = *store;
    if (address.rfind("tcp://", 0) == 0) address = address.substr(6);
    split_host_port("KIZUNA_STORE", address, env.store_host, env.store_port);
    env.store_source = "KIZUNA_STORE";
  } else {
    if (const auto addr = lookup("MASTER_ADDR")) env.store_host = *addr;
    env.store_port = read_int(lookup, "MASTER_PORT", 0, 65535);
    if (!env.store_host.empty() || env.store_port >= 0) env.store_source = "MASTER_ADDR/MASTER_PORT";
  }
  return env;
}

void LaunchEnv::require_rank() const {
  if (rank >= 0 && world_size > 0) return;
  if (source.empty())
    KIZUNA_THROW(ErrorCode::InvalidArgument,
                 "no rank in the environment: set RANK and WORLD_SIZE (kizuna-run and torchrun "
                 "do), or run under mpirun (OMPI_COMM_WORLD_*) or srun (SLURM_*)");
  KIZUNA_THROW(ErrorCode::InvalidArgument, "incomplete launcher environment (", source,
               "): rank ", rank, ", world size ", world_size, "; both must be set");
}

void LaunchEnv::require_store() const {
  if (!store_host.empty() && store_port >= 0) return;
  KIZUNA_THROW(ErrorCode::InvalidArgument,
               "no store address in the environment: set MASTER_ADDR and MASTER_PORT, or "
               "KIZUNA_STORE=host:port");
}

}  // namespace kizuna::core
