// mlp/trainer.hpp: data-parallel training of the MLP, one Trainer per rank.
//
// What torch.nn.parallel.DistributedDataParallel plus a training loop do,
// for this model. Every rank holds the whole model; each epoch the
// DistributedSampler (set_epoch(e) every epoch) gives each rank a disjoint
// 1/world of the shuffled training set; each step:
//
//   gather this rank's batch (B, inputs)      B = options.batch_size, per rank
//   forward                                   mean loss over the local batch
//   backward, last layer first: each gradient, once final, goes to
//     Reducer::mark_ready -> a full bucket starts its all-reduce on the
//     communicator's worker thread while backward goes on (overlap)
//   Reducer::finalize                         waits; gradients = mean over ranks
//   fp16: loss scaler (skip on overflow)      mlp/precision.hpp
//   optimizer step with lr(step)              mlp/optimizer.hpp
//
// Since each rank's loss is the mean over its B samples and the Reducer
// averages over ranks, the update equals that of one rank with batch
// B x world: the sampler interleaves ranks (rank r takes positions r,
// r + world, ... of the permutation), so step s of N ranks sees exactly the
// samples that step s of one rank with batch N x B sees. Only the order of
// floating-point sums differs.
//
// Determinism: the initial weights come from Rng(seed) on every rank (and
// the Reducer broadcasts rank 0's anyway); one BLAS thread makes the GEMMs
// reproducible; the all-reduce is deterministic for a given world size. So
// a seeded run repeats its loss curve bit for bit, and resuming from a
// checkpoint gives exactly the parameters of the uninterrupted run.
//
// Checkpoints (kizuna/checkpoint.hpp, the DDP layer's helpers): after every
// epoch, rank 0 writes model, optimizer state, step, epoch, RNG state, loss
// scaler and the options atomically (temporary file + rename) while the
// others wait; resume() loads it on every rank and refuses one written with
// options that would change the run.
//
// Collective: the constructor, train(), evaluate(), save_checkpoint(),
// resume() and measure_communication() must be called by every rank in the
// same order. Not thread-safe; one thread per Trainer. Errors are
// kizuna::Error (a peer lost, a bad checkpoint, bad options); the
// communicator is then unusable.
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/reducer.hpp>
#include <kizuna/reducer_options.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mlp/dataset.hpp"
#include "mlp/model.hpp"
#include "mlp/optimizer.hpp"
#include "mlp/precision.hpp"
#include "mlp/rng.hpp"

namespace kizuna::mlp {

struct TrainOptions {
  std::vector<int> hidden = {512, 256};
  int epochs = 10;
  int batch_size = 64;  // per rank
  float lr = 0.05f;
  OptimizerOptions optimizer;
  ScheduleKind schedule = ScheduleKind::Cosine;
  std::int64_t warmup_steps = 0;
  int step_epochs = 0;    // step schedule: epochs between decays (0: a third of the run)
  float step_gamma = 0.1f;
  float min_lr = 0.0f;    // cosine's floor
  // DDP: bucket caps in bytes (kizuna/reducer_options.hpp's defaults) and
  // what the gradients travel as.
  std::size_t bucket_cap_bytes = ReducerOptions::kDefaultBucketCapBytes;
  std::size_t first_bucket_bytes = ReducerOptions::kDefaultFirstBucketBytes;
  Compression compression = Compression::None;
  Precision precision = Precision::Float32;
  LossScalerOptions loss_scale;
  std::uint64_t seed = 0;
  // Evaluate every this many steps as well as after every epoch (0: epochs only).
  std::int64_t eval_every = 0;
  // Report progress every this many steps (0: about 20 times per epoch).
  std::int64_t log_every = 0;
  // Written after every epoch when not empty.
  std::string checkpoint;
  // A description of the data, part of the checkpoint's identity
  // ("fashion-mnist", "random:10:5:8192", "fashion-mnist[:10000]").
  std::string data_tag;
  // Elastic training (docs/trainer.md#elastic-training): a collective that
  // fails with PeerLost or Aborted shrinks the group to its survivors
  // (Communicator::shrink), and every step starts by admitting processes
  // waiting to join (Communicator::grow); either way the group takes rank
  // 0's state and goes on.
  bool elastic = false;
  // This process joins a running elastic group (its communicator came from
  // Communicator::join): the constructor receives the group's state.
  bool joining = false;
};

// Progress, every log_every steps and at the end of each epoch (rank 0's
// view; the loss is the mean over every rank's batches since the last one).
struct StepReport {
  std::int64_t step = 0;            // steps done
  int epoch = 0;                    // 0-based epoch in progress
  std::int64_t step_in_epoch = 0;   // steps done in it
  std::int64_t steps_per_epoch = 0;
  double loss = 0;
  double samples_per_s = 0;         // all ranks together, over the window
  double comm_wait_s = 0;           // time this rank waited in finalize, window
  double step_s = 0;                // mean step time, window
  float lr = 0;
  float loss_scale = 1;
  std::int64_t skipped_steps = 0;   // fp16 overflow skips so far
};

struct EvalReport {
  std::int64_t step = 0;
  int epoch = 0;          // epochs completed
  double epochs = 0;      // the same with the fraction of the current one
  double loss = 0;        // mean test loss
  double accuracy = -1;   // classification only (-1 for regression)
  std::uint64_t samples = 0;
};

// The group changed (elastic training): shrunk after a loss, or grown by
// processes that joined.
struct RegroupReport {
  bool grew = false;
  int world_before = 0;
  int world_after = 0;
  std::int64_t step = 0;  // steps done, the step the group goes on from
  int epoch = 0;          // 0-based epoch in progress
  double seconds = 0;     // from the failure (or the grow) to going on
  std::string cause;      // the error that started a shrink
};

struct TrainerCallbacks {
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EvalReport&)> on_eval;
  std::function<void(int epoch, const std::string& path)> on_checkpoint;
  std::function<void(const RegroupReport&)> on_regroup;
  // Test hook: runs after the all-reduce, before the loss scaler looks at
  // the gradients (step = steps done before this one).
  std::function<void(std::int64_t step, float* grads, std::size_t n)> after_reduce;
};

// Where the time of the steps so far went, on this rank.
struct TrainStats {
  std::int64_t steps = 0;
  std::uint64_t samples = 0;        // this rank's
  double wall_s = 0;                // inside train steps
  double comm_wait_s = 0;           // blocked in finalize (exposed communication)
  int shrinks = 0, grows = 0;       // elastic training's regroupings
  // The samples of the last complete epoch the group trained on in steps
  // that counted (each position of the epoch's permutation once, however
  // the group changed; a step lost to a failure is done again).
  std::uint64_t last_epoch_samples = 0;
};

class Trainer {
  using Clock_point = std::chrono::steady_clock::time_point;

 public:
  // `data` must outlive the Trainer. comm may be a one-rank communicator.
  Trainer(std::shared_ptr<Communicator> comm, const DataSplits& data, const TrainOptions& options);
  ~Trainer();

  // Loads options.checkpoint when it exists (on every rank; they must agree
  // on whether it does). Returns false, changing nothing, when there is
  // none. InvalidArgument when it was written by an incompatible run.
  bool resume();

  // Trains until `until_epoch` epochs are complete (default: options.epochs),
  // evaluating and checkpointing as configured.
  void train(const TrainerCallbacks& callbacks = {}, int until_epoch = -1);

  // Test loss and accuracy over the whole test set (each rank evaluates a
  // contiguous 1/world of it; the sums are all-reduced).
  EvalReport evaluate();

  // Collective; rank 0 writes `path` atomically.
  void save_checkpoint(const std::string& path);

  // Communication alone: `iterations` rounds in which every gradient is
  // marked ready at once, with no compute to hide behind; the mean seconds
  // per round. Leaves the gradients undefined.
  double measure_communication(int iterations);

  // How much of the communication backward hides, measured as the DDP
  // benchmark does: `steps` training steps (forward, backward, finalize;
  // no optimizer update, so the parameters stay as they are) three ways,
  //   compute     under Reducer::no_sync(): nothing is communicated
  //   overlapped  as in training: buckets reduce while backward runs
  //   comm        measure_communication(): all-reduces alone
  // each the slowest rank's mean per step, the modes taking turns in five
  // rounds and each reporting its median round. hidden = (compute + comm -
  // overlapped) / comm, clamped to [0, 1]: 1 when the step costs no more
  // than its compute, 0 when it costs compute + comm. Collective; leaves
  // the gradients undefined. Elastic: survives a lost rank as train() does.
  struct Overlap {
    double compute_s = 0, overlapped_s = 0, comm_s = 0;
    double hidden() const;
  };
  Overlap measure_overlap(int steps);

  const Mlp<float>& model() const { return model_; }
  Mlp<float>& model() { return model_; }
  const Optimizer& optimizer() const { return optimizer_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  const Rng& rng() const { return rng_; }
  std::int64_t step() const { return step_; }
  int epochs_done() const { return epoch_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t total_steps() const { return schedule_.total_steps; }
  const TrainStats& stats() const { return stats_; }
  const TrainOptions& options() const { return options_; }
  Communicator& communicator() const { return *comm_; }
  // The options that decide the trajectory, as "key=value" lines; a
  // checkpoint stores them and resume() compares.
  std::string identity() const;

 private:
  void train_epoch(const TrainerCallbacks& callbacks);
  // Gradient memory, steps per epoch and the Reducer, for comm_.
  void attach();
  // Every rank takes rank 0's state: parameters, optimizer, step, epoch,
  // position in the epoch, loss scale, schedule.
  void sync_state();
  // Elastic: on PeerLost or Aborted, shrinks to the survivors and returns
  // true; otherwise false (the caller rethrows).
  bool survive(const Error& e);
  void regroup(std::shared_ptr<Communicator> next, bool grew, Clock_point since, const std::string& cause);
  EvalReport evaluate_once();
  Overlap measure_overlap_once(int steps);
  void gather(const std::vector<std::uint64_t>& indices, std::size_t first, int count);

  std::shared_ptr<Communicator> comm_;
  const DataSplits& data_;
  TrainOptions options_;
  Mlp<float> model_;
  Optimizer optimizer_;
  LossScaler scaler_;
  Rng rng_;
  ScheduleOptions schedule_;
  std::unique_ptr<Reducer> reducer_;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t step_ = 0;
  int epoch_ = 0;  // epochs completed
  // Positions of the current epoch's permutation the group has trained on
  // (elastic or not: step s of W ranks starts at s * batch * W).
  std::uint64_t pos_ = 0;
  std::int64_t epoch_step_ = 0;  // the group's steps in the current epoch (what progress reports count)
  // Where the learning-rate schedule is, in steps of the starting world
  // (base_world_ ranks): step_ while the world has not changed.
  double schedule_step_ = 0;
  int base_world_ = 1;
  // The current epoch_'s training is done; its evaluation (and checkpoint)
  // is not.
  bool evaluating_ = false;
  const TrainerCallbacks* callbacks_ = nullptr;  // during train()
  TrainStats stats_;
  // This rank's batch.
  std::vector<float> batch_x_;
  std::vector<std::int32_t> batch_labels_;
  std::vector<float> batch_targets_;
};

// The total number of training steps: per-rank batches per epoch x epochs,
// with each rank's share the sampler's ceil(size / world).
std::int64_t steps_per_epoch(std::uint64_t dataset_size, int world_size, int batch_size);

}  // namespace kizuna::mlp
