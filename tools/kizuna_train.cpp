// kizuna-train: an autograd-free MLP trained data-parallel over kizuna, the
// sample application of the whole stack (what the DDP tutorial is to
// PyTorch).
//
//   kizuna-train --epochs 5                                         one rank
//   kizuna-run --nproc-per-node 4 kizuna-train --batch-size 64      4 ranks as processes
//   mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 kizuna-train ...
//
// Alone (no launcher variables) it is one rank over an in-process store.
// Under a launcher (RANK/WORLD_SIZE, Open MPI's or Slurm's variables) every
// process is a rank and Communicator::from_env() connects them. Every rank
// loads the data set, trains on its 1/world share each epoch (mlp/trainer.hpp)
// and evaluates its share of the test set; rank 0 prints the progress, the
// test accuracy after each epoch and a summary, and writes the metrics,
// the plot and the checkpoints. docs/trainer.md has the details.
//
// Exit status: 0 trained; 1 a failure (the message is on stderr); 2 bad usage:
// a flag or a KIZUNA_* variable.
#include <kizuna/comm.hpp>
#include <kizuna/error.hpp>
#include <kizuna/hash_store.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "common/usage.hpp"
#include "core/env.hpp"
#include "core/launch_env.hpp"
#include "core/log.hpp"
#include "mlp/dataset.hpp"
#include "mlp/layers.hpp"
#include "mlp/trainer.hpp"
#include "train/options.hpp"
#include "train/report.hpp"

namespace {

using namespace kizuna;
using Clock = std::chrono::steady_clock;

std::shared_ptr<Communicator> connect(std::string& how) {
  const core::LaunchEnv launch = core::LaunchEnv::from_process();
  if (!launch.source.empty()) {
    how = launch.source;
    return Communicator::from_env();
  }
  // Alone: a one-rank communicator over an in-process store.
  how = "alone";
  CommOptions options;
  options.store = std::make_shared<HashStore>();
  options.rank = 0;
  options.world_size = 1;
  options.name = "kizuna-train";
  return Communicator::create(options);
}

// What the checkpoint calls the data; the same on every rank.
std::string data_tag(const train::CliOptions& o) {
  std::string tag = o.data == "random"
                        ? "random:" + std::to_string(o.random.features) + ":" + std::to_string(o.random.outputs) +
                              ":" + std::to_string(o.random.train_samples) + ":" + std::to_string(o.random.seed)
                        : "fashion-mnist";
  if (o.train_subset > 0) tag += "[train:" + std::to_string(o.train_subset) + "]";
  return tag;
}

// Runs on rank 0 only; mlp::broadcast_data hands the result to the others.
mlp::DataSplits load(const train::CliOptions& o) {
  mlp::DataSplits data = o.data == "random" ? mlp::make_random_regression(o.random) : mlp::load_fashion_mnist(o.data_dir);
  if (o.train_subset > 0 && o.train_subset < data.train.size) data.train = data.train.head(o.train_subset);
  if (o.test_subset > 0 && o.test_subset < data.test.size) data.test = data.test.head(o.test_subset);
  return data;
}

std::string hidden_text(const std::vector<int>& hidden) {
  std::string s;
  for (int h : hidden) s += (s.empty() ? "" : "-") + std::to_string(h);
  return s.empty() ? "none" : s;
}

int run(const train::CliOptions& o) {
  mlp::set_blas_threads(o.blas_threads);
  // A process joining a running group (kizuna-run --elastic's replacement)
  // loads the data itself, before it joins, since the group is past its
  // broadcast and waits for it from the moment it is admitted.
  const bool joining = core::Env::get().join;
  const Clock::time_point t_load = Clock::now();
  std::optional<mlp::DataSplits> own;
  if (joining) own = load(o);
  std::string how;
  const std::shared_ptr<Communicator> comm = connect(how);
  const int rank = comm->rank(), world = comm->size();
  core::set_log_rank(rank);
  const bool leader = rank == 0;

  const std::string tag = data_tag(o);
  const mlp::DataSplits data = own ? std::move(*own) : mlp::broadcast_data(*comm, [&] { return load(o); });
  mlp::TrainOptions options = o.train;
  options.data_tag = tag;
  options.joining = joining;
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  mlp::Trainer trainer(comm, data, options);
  const bool resumed = o.resume && trainer.resume();

  std::optional<train::Report> report;
  if (leader) {
    report.emplace(options.epochs, o.metrics,
                   resumed ? std::optional<std::int64_t>(trainer.step()) : std::optional<std::int64_t>());
    std::printf("kizuna-train: %s, %zu training / %zu test samples (loaded in %.1f s); model %d-%s-%d (%zu parameters)\n",
                tag.c_str(), data.train.size, data.test.size, load_s, data.train.features,
                hidden_text(options.hidden).c_str(), data.train.outputs, trainer.model().num_parameters());
    std::printf("kizuna-train: %d rank%s (%s), batch %d per rank = %d global, %lld steps/epoch, %d epochs, "
                "%s lr %g %s, precision %s\n",
                world, world == 1 ? "" : "s", how.c_str(), options.batch_size, options.batch_size * world,
                static_cast<long long>(trainer.steps_per_epoch()), options.epochs,
                std::string(mlp::name(options.optimizer.kind)).c_str(), options.lr,
                std::string(mlp::name(options.schedule)).c_str(), std::string(mlp::name(options.precision)).c_str());
    if (resumed)
      std::printf("kizuna-train: resumed from %s after epoch %d (step %lld)\n", options.checkpoint.c_str(),
                  trainer.epochs_done(), static_cast<long long>(trainer.step()));
    std::fflush(stdout);
  }

  // The reporting rank is the group's rank 0. After an elastic regroup
  // that lost rank 0 it is another process, which takes the report over,
  // keeping the metrics rows up to this step as a resumed run does.
  const auto leading = [&] {
    if (trainer.communicator().rank() != 0) return false;
    if (!report) report.emplace(options.epochs, o.metrics, trainer.step(), /*taking_over=*/true);
    return true;
  };

  const Clock::time_point t0 = Clock::now();
  double reached_at = -1;
  mlp::EvalReport last;
  mlp::TrainerCallbacks callbacks;
  callbacks.on_step = [&](const mlp::StepReport& r) {
    if (leading()) report->on_step(r);
  };
  callbacks.on_eval = [&](const mlp::EvalReport& r) {
    last = r;
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (o.target_accuracy > 0 && reached_at < 0 && r.accuracy >= o.target_accuracy) reached_at = elapsed;
    if (leading()) report->on_eval(r, elapsed);
  };
  callbacks.on_regroup = [&](const mlp::RegroupReport& r) {
    if (!leading()) return;
    if (r.grew)
      std::printf("kizuna-train: grew from %d to %d ranks at step %lld (epoch %d) in %.3f s\n", r.world_before,
                  r.world_after, static_cast<long long>(r.step), r.epoch + 1, r.seconds);
    else
      std::printf("kizuna-train: lost a rank; shrank from %d to %d ranks at step %lld (epoch %d) in %.3f s: %s\n",
                  r.world_before, r.world_after, static_cast<long long>(r.step), r.epoch + 1, r.seconds,
                  r.cause.c_str());
    std::fflush(stdout);
  };
  callbacks.on_checkpoint = [&](int epoch, const std::string& path) {
    if (leading()) std::printf("checkpoint: %s (epoch %d)\n", path.c_str(), epoch);
  };
  trainer.train(callbacks);
  const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (trainer.stats().steps == 0 && leading()) {
    std::printf("kizuna-train: nothing to do (the checkpoint has all %d epochs)\n", options.epochs);
    last = trainer.evaluate();
  } else if (trainer.stats().steps == 0) {
    trainer.evaluate();
  }

  // How much of the communication backward hides (mlp/trainer.hpp).
  const int rounds = o.measure_overlap >= 0 ? o.measure_overlap : (world > 1 ? 50 : 0);
  const mlp::Trainer::Overlap overlap = trainer.measure_overlap(rounds);

  if (leading()) {
    const mlp::TrainStats& s = trainer.stats();
    const double samples_per_s = s.wall_s > 0 ? static_cast<double>(s.samples) * world / s.wall_s : 0;
    const double wait_per_step = s.steps > 0 ? s.comm_wait_s / s.steps : 0;
    std::printf("kizuna-train: done in %.1f s: %lld steps, %.0f samples/s (all ranks), step %.2f ms, "
                "waiting for the all-reduce %.2f ms/step (%.1f%% of the step)\n",
                train_s, static_cast<long long>(s.steps), samples_per_s, s.steps > 0 ? 1e3 * s.wall_s / s.steps : 0,
                1e3 * wait_per_step, s.wall_s > 0 ? 100 * s.comm_wait_s / s.wall_s : 0);
    if (overlap.comm_s > 0)
      std::printf("kizuna-train: overlap over %d steps (slowest rank): compute alone %.2f ms, communication alone "
                  "%.2f ms (%zu-byte gradients), both overlapped %.2f ms: %.0f%% of the communication hidden\n",
                  rounds, 1e3 * overlap.compute_s, 1e3 * overlap.comm_s,
                  trainer.model().num_parameters() * sizeof(float), 1e3 * overlap.overlapped_s,
                  100 * overlap.hidden());
    if (last.accuracy >= 0)
      std::printf("kizuna-train: final test accuracy %.4f, test loss %.4f\n", last.accuracy, last.loss);
    else
      std::printf("kizuna-train: final test loss (mse) %.6f\n", last.loss);
    if (o.target_accuracy > 0) {
      if (reached_at >= 0)
        std::printf("kizuna-train: reached test accuracy %.4f after %.1f s\n", o.target_accuracy, reached_at);
      else
        std::printf("kizuna-train: did not reach test accuracy %.4f\n", o.target_accuracy);
    }
    if (!o.plot.empty()) {
      const std::string error = report->plot(
          o.plot, "kizuna-train " + tag + ", " + std::to_string(world) + " ranks x batch " +
                      std::to_string(options.batch_size) + ", " + std::string(mlp::name(options.optimizer.kind)));
      if (error.empty())
        std::printf("kizuna-train: plot in %s\n", o.plot.c_str());
      else
        std::fprintf(stderr, "kizuna-train: --plot: %s\n", error.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  train::CliOptions options;
  try {
    options = train::parse_command_line(argc, argv);
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "kizuna-train: %s\n%s\n(kizuna-train --help describes every flag)\n", e.what(),
                 train::usage_line().c_str());
    return tools::kUsageExit;
  }
  if (options.help) {
    std::printf("%s", train::help_text().c_str());
    return 0;
  }
  try {
    tools::check_environment();
    return run(options);
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "kizuna-train: %s\n", e.what());
    return tools::kUsageExit;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kizuna-train: %s\n", e.what());
    return 1;
  }
}
