// kizuna/comm_options.hpp: how to create a Communicator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace kizuna {

class Store;

// The all-reduce algorithm (and, for broadcast and reduce, Ring = pipelined
// chain, Tree = binomial tree). OneShot: every rank sends its buffer to all
// others and reduces locally (all-reduce only; small buffers). TwoShot: a
// reduce-scatter and an all-gather of one round of direct messages each
// (all-reduce only). Doubling: recursive doubling, log2 N rounds in which
// pairs of ranks swap and fold their buffers (all-reduce only; small
// buffers). Auto: KIZUNA_ALGO, else the cost model chooses per call.
enum class Algorithm { Auto, Ring, Tree, OneShot, TwoShot, Doubling };

// How ranks of one host talk. Auto: KIZUNA_TRANSPORT, else shared memory
// between ranks of the same host and TCP across hosts.
enum class Transport { Auto, Tcp, Shm };

struct CommOptions {
  // The rendezvous store; every rank of the communicator uses the same one.
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
  // Keys of this communicator live under "<name>/" in the store. Ranks must
  // agree; empty: "kizuna/comm<N>", N counting the communicators this
  // process has created from that store (the same on every rank when every
  // rank creates its communicators in the same order). TcpStores count by
  // their server: one re-created against the same server goes on counting,
  // so a new communicator never meets an earlier one's keys.
  std::string name;
  // Deadline of every collective; 0: KIZUNA_TIMEOUT (default 300 s).
  std::chrono::milliseconds timeout{0};
  // Deadline of set-up (rendezvous and connections); 0: KIZUNA_STORE_TIMEOUT.
  std::chrono::milliseconds setup_timeout{0};
  Algorithm algorithm = Algorithm::Auto;
  Transport transport = Transport::Auto;
  // Pipelining unit in bytes; 0: KIZUNA_SLICE_BYTES (default 512 KiB).
  std::uint64_t slice_bytes = 0;
  // The smallest all-reduce, in bytes, that runs on symmetric memory's own
  // path when its buffers are such memory (Communicator::allocate_symmetric);
  // unset: KIZUNA_SYMMETRIC_FROM (default: by measurement, see docs/env.md).
  std::optional<std::size_t> symmetric_from;
  // The smallest all-reduce, in bytes, of private buffers that runs on that
  // path through the staging memory, when every rank shares one node;
  // unset: KIZUNA_STAGED_FROM (default: by measurement, see docs/env.md).
  std::optional<std::size_t> staged_from;
  // How that path, and the all-reduce on symmetric memory, write what
  // peers read (the staging memory; an output's reduced chunks): "cache"
  // (ordinary stores), "stream" (streaming stores, past the caches into
  // memory, which a peer in another cache domain reads faster) or "auto"
  // (probed at the first two such calls and every 64th after, when every
  // rank has a core of its own; else stream). This rank's own choice.
  // Empty: KIZUNA_STAGED_STORES (default auto).
  std::string staged_stores;
  // The largest all-reduce, in bytes, that runs through the mailboxes (every
  // rank reads every peer's input from one shared cache line or a few) when
  // every rank shares one node; 0 turns them off. Unset:
  // KIZUNA_MAILBOX_UPTO (default: by measurement, see docs/env.md).
  std::optional<std::size_t> mailbox_upto;
  // A tuning profile written by kizuna-perf --calibrate (docs/tuning.md#tuner):
  // rank 0's is read and shared with every rank at creation; the others'
  // are ignored. Empty: KIZUNA_TUNING_FILE (default none).
  std::string tuning_file;
  // Exchange call fingerprints before each collective; unset: KIZUNA_CHECK.
  std::optional<bool> check;
  // Where the buffers of stream calls live: "cpu", "cuda" (the GPU
  // LOCAL_RANK picks) or "cuda:N". Empty: KIZUNA_DEVICE (default cpu).
  std::string device;
  // This rank's index on its node, to pick its GPU; -1: LOCAL_RANK.
  int local_rank = -1;
};

}  // namespace kizuna
