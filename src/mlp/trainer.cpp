// mlp/trainer.cpp: see trainer.hpp.
#include "mlp/trainer.hpp"

#include <kizuna/checkpoint.hpp>
#include <kizuna/distributed_sampler.hpp>
#include <kizuna/parameter.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/check.hpp"
#include "core/log.hpp"

namespace kizuna::mlp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

MlpConfig model_config(const DataSplits& data, const TrainOptions& options) {
  KIZUNA_CHECK_ARG(data.train.size > 0, "the training set is empty");
  KIZUNA_CHECK_ARG(data.test.size == 0 || (data.test.features == data.train.features &&
                                           data.test.outputs == data.train.outputs),
                   "the test set's shape differs from the training set's");
  return MlpConfig{data.train.features, options.hidden, data.train.outputs, data.train.task};
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string_view name(Compression c) {
  switch (c) {
    case Compression::None: return "none";
    case Compression::Float16: return "fp16";
    case Compression::BFloat16: return "bf16";
  }
  return "?";
}

}  // namespace

std::int64_t steps_per_epoch(std::uint64_t dataset_size, int world_size, int batch_size) {
  const std::uint64_t per_rank = (dataset_size + world_size - 1) / world_size;
  return static_cast<std::int64_t>((per_rank + batch_size - 1) / batch_size);
}

Trainer::Trainer(std::shared_ptr<Communicator> comm, const DataSplits& data, const TrainOptions& options)
    : comm_(std::move(comm)),
      data_(data),
      options_(options),
      model_(model_config(data, options), std::max(options.batch_size, 1), options.precision),
      optimizer_(options.optimizer, model_.num_parameters()),
      scaler_(options.loss_scale),
      rng_(options.seed) {
  KIZUNA_CHECK_ARG(comm_, "the trainer needs a communicator (a one-rank one to train alone)");
  KIZUNA_CHECK_ARG(options.epochs >= 1, "--epochs must be at least 1, got ", options.epochs);
  KIZUNA_CHECK_ARG(options.batch_size >= 1, "--batch-size must be at least 1, got ", options.batch_size);
  KIZUNA_CHECK_ARG(options.lr > 0, "--lr must be positive, got ", options.lr);
  KIZUNA_CHECK_ARG(options.warmup_steps >= 0, "--warmup must be >= 0, got ", options.warmup_steps);
  model_.init(rng_);
  base_world_ = comm_->size();
  steps_per_epoch_ = mlp::steps_per_epoch(data_.train.size, comm_->size(), options_.batch_size);
  schedule_.kind = options_.schedule;
  schedule_.base_lr = options_.lr;
  schedule_.total_steps = steps_per_epoch_ * options_.epochs;
  schedule_.warmup_steps = options_.warmup_steps;
  const int step_epochs = options_.step_epochs > 0 ? options_.step_epochs : std::max(1, options_.epochs / 3);
  schedule_.step_size = steps_per_epoch_ * step_epochs;
  schedule_.gamma = options_.step_gamma;
  schedule_.min_lr = options_.min_lr;
  // A process joining a running group takes its state (the group's side:
  // regroup() after grow()), then sets up as the members do.
  if (options_.joining) sync_state();
  attach();

  const auto B = static_cast<std::size_t>(options_.batch_size);
  batch_x_.resize(B * data_.train.features);
  if (data_.train.task == Loss::CrossEntropy)
    batch_labels_.resize(B);
  else
    batch_targets_.resize(B * data_.train.outputs);
}

Trainer::~Trainer() = default;

void Trainer::attach() {
  // Gradients in symmetric memory (collective, like the Reducer below):
  // among the ranks of one machine the buckets' all-reduces then read the
  // peers' gradients in place instead of passing them through the
  // shared-memory slots (docs/symmetric-memory.md); elsewhere it is
  // ordinary memory.
  model_.keep_gradients_in(comm_->allocate_symmetric(model_.num_parameters() * sizeof(float)));
  steps_per_epoch_ = mlp::steps_per_epoch(data_.train.size, comm_->size(), options_.batch_size);

  // The Reducer sees the flat gradient buffer through the model's views.
  // Backward marks gradients in exactly the reverse registration order, the
  // order the default buckets are built in, so rebuilding them after the
  // first step would change nothing; it is off, which also keeps the
  // buckets (and hence the reduction order, and the bits) the same after a
  // resume as in an uninterrupted run.
  std::vector<Parameter> views;
  for (const TensorView& v : model_.layout())
    views.push_back({v.name, v.offset * sizeof(float), v.count, DataType::Float32, v.shape});
  ReducerOptions ro;
  ro.bucket_cap_bytes = options_.bucket_cap_bytes;
  ro.first_bucket_bytes = options_.first_bucket_bytes;
  ro.compression = options_.compression;
  ro.rebuild_buckets = false;
  ro.broadcast_parameters = true;  // every rank starts from rank 0's weights
  reducer_.reset();
  reducer_ = std::make_unique<Reducer>(comm_, model_.params(), model_.grads(),
                                       model_.num_parameters() * sizeof(float), std::move(views), ro);
}

void Trainer::sync_state() {
  std::int64_t header[13] = {step_,
                            epoch_,
                            static_cast<std::int64_t>(pos_),
                            optimizer_.steps(),
                            scaler_.good_steps(),
                            scaler_.skipped_steps(),
                            schedule_.total_steps,
                            schedule_.step_size,
                            0,
                            evaluating_ ? 1 : 0,
                            base_world_,
                            0,
                            epoch_step_};
  float scale = scaler_.scale();
  std::memcpy(&header[8], &scale, sizeof scale);
  std::memcpy(&header[11], &schedule_step_, sizeof schedule_step_);
  comm_->broadcast(header, 13, DataType::Int64, 0).wait();
  step_ = header[0];
  epoch_ = static_cast<int>(header[1]);
  pos_ = static_cast<std::uint64_t>(header[2]);
  optimizer_.set_steps(header[3]);
  std::memcpy(&scale, &header[8], sizeof scale);
  scaler_.set_state(scale, header[4], header[5]);
  schedule_.total_steps = header[6];
  schedule_.step_size = header[7];
  evaluating_ = header[9] != 0;
  base_world_ = static_cast<int>(header[10]);
  std::memcpy(&schedule_step_, &header[11], sizeof schedule_step_);
  epoch_step_ = header[12];
  const std::size_t n = model_.num_parameters();
  comm_->broadcast(model_.params(), n, DataType::Float32, 0).wait();
  for (std::size_t i = 0; i < optimizer_.state_names().size(); ++i)
    comm_->broadcast(optimizer_.state(i).data(), n, DataType::Float32, 0).wait();
}

bool Trainer::survive(const Error& e) {
  if (!options_.elastic || (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Aborted)) return false;
  const Clock::time_point since = Clock::now();
  KIZUNA_LOG(Warn) << "rank " << comm_->rank() << " of " << comm_->size() << " lost a peer at step " << step_
                   << "; shrinking the group: " << e.what();
  reducer_.reset();  // its calls on the failed communicator are over
  regroup(comm_->shrink(), false, since, e.what());
  return true;
}

void Trainer::regroup(std::shared_ptr<Communicator> next, bool grew, Clock_point since, const std::string& cause) {
  RegroupReport r;
  r.grew = grew;
  r.world_before = comm_->size();
  r.cause = cause;
  reducer_.reset();
  comm_ = std::move(next);
  sync_state();
  attach();
  (grew ? stats_.grows : stats_.shrinks) += 1;
  r.world_after = comm_->size();
  r.step = step_;
  r.epoch = epoch_;
  r.seconds = seconds_since(since);
  KIZUNA_LOG(Info) << (grew ? "grew" : "shrank") << " from " << r.world_before << " to " << r.world_after
                   << " ranks at step " << step_ << " (epoch " << epoch_ << ", " << pos_ << " samples in) in "
                   << r.seconds << " s";
  if (callbacks_ && callbacks_->on_regroup) callbacks_->on_regroup(r);
}

std::string Trainer::identity() const {
  std::ostringstream o;
  const OptimizerOptions& opt = options_.optimizer;
  o << "data=" << options_.data_tag << "\n";
  o << "model=" << data_.train.features;
  for (int h : options_.hidden) o << "," << h;
  o << "," << data_.train.outputs << "\n";
  o << "world_size=" << comm_->size() << "\n";
  o << "batch_size=" << options_.batch_size << "\n";
  o << "epochs=" << options_.epochs << "\n";
  o << "optimizer=" << name(opt.kind) << " momentum=" << fmt(opt.momentum)
    << " weight_decay=" << fmt(opt.weight_decay) << " betas=" << fmt(opt.beta1) << "," << fmt(opt.beta2)
    << " eps=" << fmt(opt.eps) << "\n";
  o << "lr=" << fmt(options_.lr) << " schedule=" << name(options_.schedule) << " warmup=" << options_.warmup_steps
    << " step_epochs=" << options_.step_epochs << " gamma=" << fmt(options_.step_gamma)
    << " min_lr=" << fmt(options_.min_lr) << "\n";
  o << "buckets=" << options_.first_bucket_bytes << "," << options_.bucket_cap_bytes
    << " compression=" << name(options_.compression) << "\n";
  o << "precision=" << name(options_.precision) << " loss_scale=" << fmt(options_.loss_scale.init_scale) << ","
    << options_.loss_scale.growth_interval << "\n";
  o << "seed=" << options_.seed << "\n";
  return o.str();
}

void Trainer::gather(const std::vector<std::uint64_t>& indices, std::size_t first, int count) {
  const Dataset& d = data_.train;
  const std::size_t F = d.features, O = d.outputs;
  for (int b = 0; b < count; ++b) {
    const std::uint64_t i = indices[first + b];
    std::copy_n(d.inputs.data() + i * F, F, batch_x_.data() + b * F);  // (B, F)
    if (d.task == Loss::CrossEntropy)
      batch_labels_[b] = d.labels[i];  // (B)
    else
      std::copy_n(d.targets.data() + i * O, O, batch_targets_.data() + b * O);  // (B, O)
  }
}

void Trainer::train(const TrainerCallbacks& callbacks, int until_epoch) {
  callbacks_ = &callbacks;
  struct Forget {
    const TrainerCallbacks*& p;
    ~Forget() { p = nullptr; }
  } forget{callbacks_};
  const int last = until_epoch < 0 ? options_.epochs : std::min(until_epoch, options_.epochs);
  // Each epoch: its training, then its evaluation and checkpoint. A
  // failure in either (elastic) regroups, and the group goes on from rank
  // 0's phase, epoch and position, whatever this rank had reached.
  while (epoch_ < last || evaluating_) {
    try {
      if (!evaluating_) {
        train_epoch(callbacks);  // ends with epoch_ + 1 and evaluating_
        continue;
      }
      EvalReport report = evaluate_once();
      if (!options_.checkpoint.empty()) save_checkpoint(options_.checkpoint);
      evaluating_ = false;
      if (callbacks.on_eval) callbacks.on_eval(report);
      if (!options_.checkpoint.empty() && callbacks.on_checkpoint) callbacks.on_checkpoint(epoch_, options_.checkpoint);
    } catch (const Error& e) {
      if (!survive(e)) throw;
    }
  }
}

void Trainer::train_epoch(const TrainerCallbacks& callbacks) {
  // The epoch's permutation, as DistributedSampler makes it; step s of W
  // ranks trains on positions pos .. pos + W * count (pos = s * B * W), rank
  // r on pos + r, pos + r + W, ...: exactly the sampler's interleaving, and
  // the sampler's padding (positions past the end wrap to the start) in the
  // last, shorter step. When the group changes mid-epoch, the positions
  // still to come are dealt out the same way among the new ranks.
  const std::uint64_t N = data_.train.size;
  DistributedSampler sampler(N, 1, 0, /*shuffle=*/true, options_.seed, /*drop_last=*/false);
  sampler.set_epoch(static_cast<std::uint64_t>(epoch_));
  const std::vector<std::uint64_t> permutation = sampler.permutation();
  std::vector<std::uint64_t> indices(static_cast<std::size_t>(options_.batch_size));
  const std::size_t n = model_.num_parameters();
  const bool fp16 = options_.precision == Precision::Float16;

  // The window since the last report.
  double window_loss = 0, window_wait = 0;
  std::int64_t window_steps = 0;
  std::uint64_t window_samples = 0;
  Clock::time_point window_start = Clock::now();

  while (pos_ < N) {
    {
      if (options_.elastic) {
        const Clock::time_point since = Clock::now();
        if (std::shared_ptr<Communicator> grown = comm_->grow()) {
          regroup(std::move(grown), true, since, "");
          continue;  // the newcomers start here too: at grow()
        }
      }
      const int world = comm_->size(), rank = comm_->rank();
      const std::int64_t log_every =
          options_.log_every > 0 ? options_.log_every : std::max<std::int64_t>(1, steps_per_epoch_ / 20);
      const Clock::time_point t0 = Clock::now();
      // Every rank takes the same count, so the last, shorter batch is
      // equally short everywhere.
      const std::uint64_t left = N - pos_;
      const int count = static_cast<int>(
          std::min<std::uint64_t>(options_.batch_size, (left + static_cast<std::uint64_t>(world) - 1) / world));
      for (int b = 0; b < count; ++b)
        indices[b] = permutation[(pos_ + static_cast<std::uint64_t>(b) * world + rank) % N];
      gather(indices, 0, count);

      const Targets<float> targets{batch_labels_.empty() ? nullptr : batch_labels_.data(),
                                   batch_targets_.empty() ? nullptr : batch_targets_.data()};
      const float loss = model_.forward(batch_x_.data(), targets, count);
      const float scale = fp16 ? scaler_.scale() : 1.0f;
      model_.backward(scale, [this](std::size_t index) { reducer_->mark_ready(index); });
      const Clock::time_point t_wait = Clock::now();
      reducer_->finalize();  // the mean over ranks of every gradient
      const double wait = seconds_since(t_wait);

      if (callbacks.after_reduce) callbacks.after_reduce(step_, model_.grads(), n);
      const bool take = fp16 ? scaler_.unscale_and_update(model_.grads(), n) : true;
      const float lr = learning_rate(schedule_, static_cast<std::int64_t>(schedule_step_));
      if (take) optimizer_.step(model_.params(), model_.grads(), lr);
      ++step_;
      ++epoch_step_;
      // The schedule is laid out in steps of the starting world; a step of
      // another world's moves that many more or fewer samples (exactly 1
      // while the world has not changed).
      schedule_step_ += static_cast<double>(world) / base_world_;
      pos_ += static_cast<std::uint64_t>(count) * world;

      const double dt = seconds_since(t0);
      stats_.steps += 1;
      stats_.samples += static_cast<std::uint64_t>(count);
      stats_.wall_s += dt;
      stats_.comm_wait_s += wait;
      window_loss += loss;
      window_wait += wait;
      window_steps += 1;
      window_samples += static_cast<std::uint64_t>(count);

      const bool last_step = pos_ >= N;
      if (epoch_step_ % log_every == 0 || last_step) {
        // The mean loss over every rank's batches: one tiny all-reduce, at
        // the same steps on every rank.
        double sums[2] = {window_loss, static_cast<double>(window_steps)};
        comm_->all_reduce(sums, 2, DataType::Float64, ReduceOp::Sum).wait();
        const double window_s = seconds_since(window_start);
        StepReport r;
        r.step = step_;
        r.epoch = epoch_;
        r.step_in_epoch = last_step ? steps_per_epoch_ : std::min(epoch_step_, steps_per_epoch_);
        r.steps_per_epoch = steps_per_epoch_;
        r.loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
        r.samples_per_s = window_s > 0 ? static_cast<double>(window_samples) * world / window_s : 0;
        r.comm_wait_s = window_wait;
        r.step_s = window_s / static_cast<double>(window_steps);
        r.lr = lr;
        r.loss_scale = fp16 ? scaler_.scale() : 1.0f;
        r.skipped_steps = scaler_.skipped_steps();
        if (callbacks.on_step) callbacks.on_step(r);
        window_loss = window_wait = 0;
        window_steps = 0;
        window_samples = 0;
        window_start = Clock::now();
      }
      if (options_.eval_every > 0 && step_ % options_.eval_every == 0 && !last_step) {
        EvalReport report = evaluate_once();
        if (callbacks.on_eval) callbacks.on_eval(report);
        window_start = Clock::now();  // evaluation time is not training time
      }
    }
  }
  // Every position of the permutation once, over however many regroupings
  // (a step lost to a failure does not move pos_).
  stats_.last_epoch_samples = std::min(pos_, N);
  ++epoch_;
  pos_ = 0;
  epoch_step_ = 0;
  evaluating_ = true;
}

EvalReport Trainer::evaluate() {
  for (;;) {
    try {
      return evaluate_once();
    } catch (const Error& e) {
      if (!survive(e)) throw;
    }
  }
}

EvalReport Trainer::evaluate_once() {
  const Dataset& d = data_.test;
  EvalReport report;
  report.step = step_;
  report.epoch = epoch_;
  report.epochs = epoch_ + static_cast<double>(pos_) / static_cast<double>(std::max<std::uint64_t>(data_.train.size, 1));
  const int world = comm_->size(), rank = comm_->rank();
  // This rank's contiguous share of the test set.
  const std::size_t lo = d.size * rank / world, hi = d.size * (rank + 1) / world;
  const std::size_t F = d.features, O = d.outputs;
  const std::size_t B = static_cast<std::size_t>(model_.max_batch());
  double loss_sum = 0, correct = 0;
  std::vector<std::int32_t> labels;
  std::vector<float> targets;
  for (std::size_t first = lo; first < hi; first += B) {
    const int count = static_cast<int>(std::min(B, hi - first));
    Targets<float> t;
    if (d.task == Loss::CrossEntropy) {
      t.labels = d.labels.data() + first;
    } else {
      t.values = d.targets.data() + first * O;
    }
    const float mean = model_.forward(d.inputs.data() + first * F, t, count);
    loss_sum += static_cast<double>(mean) * count;
    if (d.task == Loss::CrossEntropy) {
      const float* out = model_.outputs();  // (count, O)
      for (int b = 0; b < count; ++b) {
        const float* row = out + static_cast<std::size_t>(b) * O;
        const auto best = std::max_element(row, row + O) - row;
        if (best == d.labels[first + b]) correct += 1;
      }
    }
  }
  double sums[3] = {loss_sum, correct, static_cast<double>(hi - lo)};
  comm_->all_reduce(sums, 3, DataType::Float64, ReduceOp::Sum).wait();
  report.samples = static_cast<std::uint64_t>(sums[2]);
  report.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  report.accuracy = d.task == Loss::CrossEntropy && sums[2] > 0 ? sums[1] / sums[2] : -1;
  return report;
}

void Trainer::save_checkpoint(const std::string& path) {
  Checkpoint ck;
  const std::size_t n = model_.num_parameters();
  const std::string id = identity();
  ck.put("options", id.data(), id.size(), DataType::UInt8);
  ck.put("model.params", model_.params(), n, DataType::Float32);
  const std::vector<std::string> names = optimizer_.state_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    ck.put("optimizer." + names[i], optimizer_.state(i).data(), n, DataType::Float32);
  ck.put_int("optimizer.steps", optimizer_.steps());
  ck.put_int("step", step_);
  ck.put_int("epoch", epoch_);
  ck.put("rng", rng_.state().data(), rng_.state().size(), DataType::UInt64);
  const float scale = scaler_.scale();
  ck.put("loss_scale", &scale, 1, DataType::Float32);
  ck.put_int("loss_scale.good_steps", scaler_.good_steps());
  ck.put_int("loss_scale.skipped", scaler_.skipped_steps());
  ck.save(*comm_, path, /*root=*/0);
}

bool Trainer::resume() {
  const std::string& path = options_.checkpoint;
  if (path.empty()) return false;
  // Every rank must agree on whether there is a checkpoint, or some would
  // load (a collective) while the others train.
  std::int32_t present = std::filesystem::exists(path) ? 1 : 0;
  comm_->all_reduce(&present, 1, DataType::Int32, ReduceOp::Sum).wait();
  if (present == 0) return false;
  KIZUNA_CHECK_ARG(present == comm_->size(), "checkpoint ", path, " exists on ", present, " of ", comm_->size(),
                   " ranks; --resume needs it on every rank (a shared file system, or a copy per machine)");
  const Checkpoint ck = Checkpoint::load(*comm_, path);

  // Refuse a checkpoint from a run that would continue differently.
  const std::string mine = identity();
  std::string theirs(ck.count("options"), '\0');
  ck.get("options", theirs.data(), theirs.size(), DataType::UInt8);
  if (theirs != mine) {
    std::istringstream a(theirs), b(mine);
    std::string la, lb, diff;
    while (static_cast<bool>(std::getline(a, la)) | static_cast<bool>(std::getline(b, lb))) {
      if (la != lb) diff += "\n  checkpoint: " + la + "\n  this run:   " + lb;
      la.clear();
      lb.clear();
    }
    KIZUNA_THROW(ErrorCode::InvalidArgument, "checkpoint ", path,
                 " was written by a run with other options; resuming would not continue it:", diff);
  }

  const std::size_t n = model_.num_parameters();
  ck.get("model.params", model_.params(), n, DataType::Float32);
  const std::vector<std::string> names = optimizer_.state_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    ck.get("optimizer." + names[i], optimizer_.state(i).data(), n, DataType::Float32);
  optimizer_.set_steps(ck.get_int("optimizer.steps"));
  step_ = ck.get_int("step");
  schedule_step_ = static_cast<double>(step_);
  epoch_ = static_cast<int>(ck.get_int("epoch"));
  Rng::State state{};
  ck.get("rng", state.data(), state.size(), DataType::UInt64);
  rng_.set_state(state);
  float scale = 1;
  ck.get("loss_scale", &scale, 1, DataType::Float32);
  scaler_.set_state(scale, ck.get_int("loss_scale.good_steps"), ck.get_int("loss_scale.skipped"));
  KIZUNA_LOG(Info) << "resumed from " << path << " at epoch " << epoch_ << ", step " << step_;
  return true;
}

double Trainer::measure_communication(int iterations) {
  const std::size_t count = model_.layout().size();
  comm_->barrier().wait();
  const Clock::time_point t0 = Clock::now();
  for (int it = 0; it < iterations; ++it) {
    for (std::size_t i = count; i-- > 0;) reducer_->mark_ready(i);
    reducer_->finalize();
  }
  return iterations > 0 ? seconds_since(t0) / iterations : 0;
}

double Trainer::Overlap::hidden() const {
  if (comm_s <= 0) return 0;
  return std::clamp((compute_s + comm_s - overlapped_s) / comm_s, 0.0, 1.0);
}

Trainer::Overlap Trainer::measure_overlap(int steps) {
  // Elastic: a rank lost while measuring regroups and the survivors measure
  // again, as evaluate() does.
  for (;;) {
    try {
      return measure_overlap_once(steps);
    } catch (const Error& e) {
      if (!survive(e)) throw;
    }
  }
}

Trainer::Overlap Trainer::measure_overlap_once(int steps) {
  Overlap o;
  if (steps <= 0) return o;
  DistributedSampler sampler(data_.train.size, comm_->size(), comm_->rank(), true, options_.seed, false);
  sampler.set_epoch(static_cast<std::uint64_t>(epoch_));
  const std::vector<std::uint64_t> indices = sampler.indices();
  const Targets<float> targets{batch_labels_.empty() ? nullptr : batch_labels_.data(),
                               batch_targets_.empty() ? nullptr : batch_targets_.data()};
  auto one_step = [&](int k) {
    const std::size_t first = (static_cast<std::size_t>(k) * options_.batch_size) % indices.size();
    const int count = static_cast<int>(std::min<std::size_t>(options_.batch_size, indices.size() - first));
    gather(indices, first, count);
    model_.forward(batch_x_.data(), targets, count);
    model_.backward(1.0f, [this](std::size_t index) { reducer_->mark_ready(index); });
    reducer_->finalize();
  };
  // The slowest rank's seconds per step of `body` over `n` steps.
  auto timed = [&](int n, auto&& body) {
    comm_->barrier().wait();
    const Clock::time_point t0 = Clock::now();
    body(n);
    double s = seconds_since(t0) / n;
    comm_->all_reduce(&s, 1, DataType::Float64, ReduceOp::Max).wait();
    return s;
  };
  // The three modes take turns, in kRounds rounds, and each reports its
  // median round: on a shared machine a burst of someone else's work then
  // spoils one round of one mode, not the comparison.
  constexpr int kRounds = 5;
  const int per_round = std::max(1, steps / kRounds);
  std::vector<double> compute, overlapped, comm;
  for (int round = 0; round < kRounds; ++round) {
    compute.push_back(timed(per_round, [&](int n) {
      const Reducer::NoSync guard = reducer_->no_sync();
      for (int k = 0; k < n; ++k) one_step(k);
    }));
    overlapped.push_back(timed(per_round, [&](int n) {
      for (int k = 0; k < n; ++k) one_step(k);
    }));
    comm.push_back(timed(per_round, [&](int n) { measure_communication(n); }));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  o.compute_s = median(compute);
  o.overlapped_s = median(overlapped);
  o.comm_s = median(comm);
  return o;
}

}  // namespace kizuna::mlp
