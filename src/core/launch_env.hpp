// core/launch_env.hpp: who this process is in the job, from the launcher's
// environment.
//
// Sources, in order of precedence:
//   1. torchrun / kizuna-run: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//      NODE_RANK (or GROUP_RANK)
//   2. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//      OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   3. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID
// The store address is KIZUNA_STORE=host:port, else MASTER_ADDR and
// MASTER_PORT. A malformed value (RANK=abc, RANK >= WORLD_SIZE, a port out of
// range) is an InvalidArgument naming the variable; missing values stay
// unset (-1 / empty) and require() explains what is missing.
#pragma once

#include <string>

#include "core/env.hpp"

namespace kizuna::core {

struct LaunchEnv {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;        // -1 when the launcher did not say
  int local_world_size = -1;  // -1 when the launcher did not say
  int node_rank = -1;
  std::string source;         // "RANK/WORLD_SIZE", "Open MPI", "Slurm" or "" (none)

  std::string store_host;     // "" when not given
  int store_port = -1;        // -1 when not given
  std::string store_source;   // "KIZUNA_STORE" or "MASTER_ADDR/MASTER_PORT"

  static LaunchEnv parse(const Env::Lookup& lookup);
  static LaunchEnv from_process() { return parse(process_lookup()); }

  // Throws InvalidArgument saying which variables to set when the rank, the
  // world size or the store address is missing.
  void require_rank() const;
  void require_store() const;
};

// "host:port" -> host and port; IPv6 as "[::1]:29500". InvalidArgument
// naming `what` on a malformed address.
void split_host_port(std::string_view what, std::string_view address, std::string& host, int& port);

}  // namespace kizuna::core
