#include "worker/trainer.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "worker/config.h"
#include "worker/cpu_backend.h"
#include "worker/job.h"
#include "worker/teacher_data.h"

namespace zerostate::worker {
namespace {

absl::Status DumpMaster(client::JobClient* job, uint64_t version, const std::string& path) {
  std::vector<float> master(job->layout().total_elems);
  if (auto s = job->GatherMaster(version, Range{0, master.size()}, master.data()); !s.ok()) return s;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(master.data()), master.size() * sizeof(float));
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write the weights"));
  return absl::OkStatus();
}

// Feeds micro-batches of the rank's samples to the backend.
MicroBatchFn MakeMicroBatches(const v1::TrainConfig& train, const Topology& topo,
                              const TeacherData* data, Backend* backend, const uint64_t* step,
                              std::vector<float>* x, std::vector<float>* y) {
  return [=](uint32_t micro, float scale, const GradsReadyFn& ready) -> absl::StatusOr<float> {
    const uint32_t n = train.micro_batch_size();
    data->Fill(SampleIndex(*step, micro, topo.rank(), 0, train.grad_accum_steps(), topo.world(), n), n,
               x->data(), y->data());
    return backend->ForwardBackward(x->data(), y->data(), n, scale, ready);
  };
}

}  // namespace

uint64_t FlatElems(const v1::WorkerConfig& config) {
  Mlp model(config.train().model());
  auto spec = NormalizeJobSpec(BuildJobSpec(config.train(), model, 1));
  return spec.ok() ? LayoutOf(*spec).total_elems : 0;
}

absl::StatusOr<std::unique_ptr<LocalGroup>> OpenNodeGroup(client::Client* client,
                                                          const v1::WorkerConfig& config,
                                                          const Topology& topo,
                                                          absl::Duration peer_timeout) {
  const std::string ns = RendezvousScope(config);
  const std::string name = absl::StrCat("/zerostate-", ns, "-node", topo.node);
  const std::string key = absl::StrCat("shm/node", topo.node);
  std::unique_ptr<LocalGroup> group;
  if (topo.local_rank == 0) {
    auto g = OpenShmGroup(name, topo.local_size, 0, FlatElems(config), peer_timeout);
    if (!g.ok()) return g.status();
    group = *std::move(g);
  }
  auto barrier = client->Rendezvous(ns, key, topo.local_rank, topo.local_size, "");
  if (!barrier.ok()) return barrier.status();
  if (topo.local_rank == 0) return group;
  return OpenShmGroup(name, topo.local_size, topo.local_rank, FlatElems(config), peer_timeout);
}

absl::StatusOr<RankResult> TrainRank(const RankRun& run) {
  const v1::TrainConfig& train = run.config.train();
  auto model = std::make_unique<Mlp>(train.model());
  const std::string scope = RendezvousScope(run.config);
  // The peer watch's client: it also bounds the wait for rank 0 at the start.
  std::unique_ptr<client::Client> control;
  if (run.on_peer_gone && run.peer_timeout != absl::InfiniteDuration()) {
    auto made = MakeControlClient(run.client->options(), run.peer_timeout);
    if (!made.ok()) return made.status();
    control = *std::move(made);
  }
  auto opened = OpenJob(run.client, BuildJobSpec(train, *model, run.topo.num_nodes), run.topo,
                        scope, control.get());
  if (!opened.ok()) return opened.status();
  std::unique_ptr<client::JobClient> job_handle = std::move(opened->job);
  client::JobClient* job = job_handle.get();
  model->Bind(job->layout());
  std::vector<uint64_t> ready_points = model->ReadyPoints();
  std::unique_ptr<Backend> backend;
  if (run.make_backend) {
    auto made = run.make_backend(job->layout());
    if (!made.ok()) return made.status();
    backend = *std::move(made);
  } else {
    backend = std::make_unique<CpuBackend>(run.group, run.topo.local_rank, std::move(model));
  }
  Engine engine(job, backend.get(), train, run.topo, ready_points);
  if (run.shared_staging) engine.ShareStagingThrough(run.client);
  engine.SetPhaseHook(run.on_phase);
  RankResult result;
  result.start_version = opened->start_version;
  if (auto s = engine.LoadWeights(result.start_version); !s.ok()) return s;
  if (auto s = engine.ResumeScaler(result.start_version); absl::IsNotFound(s)) {
    // Every rank reads the same servers, so all go on from the same scale.
    if (run.topo.rank() == 0) {
      std::fprintf(stderr, "zerostate-worker rank 0: warning: %s; the fp16 loss scaler starts "
                   "again from train.loss_scaling.initial_scale\n", s.ToString().c_str());
    }
  } else if (!s.ok()) {
    return s;
  }

  TeacherData data(train.model());
  std::vector<float> x(size_t{train.micro_batch_size()} * data.input_dim());
  std::vector<float> y(size_t{train.micro_batch_size()} * data.output_dim());
  const uint64_t start = result.start_version;
  uint64_t step = start;
  MicroBatchFn micro = MakeMicroBatches(train, run.topo, &data, backend.get(), &step, &x, &y);
  Recovery recovery(run.client, run.topo, scope, run.recovery);
  engine.SetFailureHook([&](const absl::Status&) { recovery.Prepare(job); });
  std::unique_ptr<PeerWatch> watch;
  if (control) {
    watch = std::make_unique<PeerWatch>(control.get(), scope, run.topo, run.peer_timeout,
                                        run.on_peer_gone);
  }
  uint32_t epoch = 0;
  // A delayed update ends synchronously at checkpoints and the last step,
  // so a rolled-back run replays the same steps (worker/engine.h).
  engine.SetSyncPoints([&recovery, start, steps = train.steps()](uint64_t version) {
    return version >= steps || recovery.CheckpointDue(version, start);
  });
  // Checkpoints `step` if due; the loss scaler's state goes with it.
  auto checkpoint = [&]() -> absl::Status {
    if (!recovery.CheckpointDue(step, start)) return absl::OkStatus();
    if (run.on_phase) run.on_phase(Phase::kCheckpoint, step);
    engine.SaveScaler(step);
    return recovery.AfterStep(job, step, start);
  };
  absl::Status failed = checkpoint();
  while (step < train.steps() || !failed.ok()) {
    const bool checkpoint_failed = !failed.ok();  // the coordinator's, after a good step
    if (!checkpoint_failed) {
      if (watch) watch->Enter(step, epoch);
      auto report = engine.Step(step, micro);
      if (watch) watch->Leave();
      if (report.ok()) {
        result.losses.push_back(report->loss);
        if (run.observe) run.observe(*report);
        ++step;
        failed = checkpoint();
        continue;
      }
      failed = report.status();
    }
    if (checkpoint_failed) {
      // Only the coordinator is here; the others train on. Without a lost
      // server it is just a missed checkpoint: the previous one stays.
      auto lost = recovery.LostShard(job);
      if (lost.ok() && lost->empty()) {
        std::fprintf(stderr, "zerostate-worker rank 0: checkpoint of version %llu failed (%s); "
                     "keeping the previous one\n", static_cast<unsigned long long>(step),
                     failed.ToString().c_str());
      } else {
        std::fprintf(stderr, "zerostate-worker rank 0: checkpoint of version %llu failed (%s); "
                     "a server lost the job: the next step fails and every rank rolls back\n",
                     static_cast<unsigned long long>(step), failed.ToString().c_str());
      }
      // With a lost shard too, this rank takes the next step: the other
      // ranks are in it, its local peers inside the node's collective,
      // which would wait for this rank forever. The step fails on the lost
      // shard, and every rank rolls back from it together.
      failed = absl::OkStatus();
      continue;
    }
    auto back = recovery.RollBack(job, failed);
    if (!back.ok()) return back.status();
    job_handle = std::move(back->job);
    job = job_handle.get();
    epoch = back->epoch;
    engine.SetJob(job);
    engine.RestoreScaler(back->version);
    step = back->version;
    if (auto s = engine.LoadWeights(step); !s.ok()) return s;
    result.losses.resize(step - start);
    failed = absl::OkStatus();
  }
  if (auto s = engine.Drain(); !s.ok()) return s;  // nothing in flight unless steps were cut short
  result.end_version = step;
  if (run.topo.rank() == 0 && !run.dump_path.empty()) {
    if (auto s = DumpMaster(job, step, run.dump_path); !s.ok()) return s;
  }
  return result;
}

}  // namespace zerostate::worker
