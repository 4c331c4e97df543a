// cast: one 64-byte message to every actor of a mesh, and every actor's int
// reply back (ActorMesh::call, "cast plus collect"), in two parts:
//
//   --sim   V virtual procs in this one process (SimulatedWorld, SIM-1), V from
//           16 to 16384: how a cast's time grows with V beside the shape of its
//           tree (depth, root sends, busiest hop), fitted against log2 V and
//           against V; plus the same cast reduced up the tree (mesh::Sum). No
//           MPI here: every virtual proc shares this machine's cores, so the
//           total work of a cast, O(V), is what the clock sees.
//   mpirun  N real ranks: cast plus collect from the controller with the
//           default fan-out (16: flat for N <= 16), a binary tree (k=2) and a
//           flat cast (k=N), beside the anchor MPI_Bcast(64 B) +
//           MPI_Gather(int), the same exchange in MPI's hands, measured in the
//           same run between the same processes. The goal: crown's default
//           cast within 3x of it. Below them, where a cast's time goes: a
//           cast to the controller's own rank alone, to one remote rank
//           alone, and a direct call to that rank.
//
// Each part read-modify-writes its key of cast.json ("simulated", or
// "real"/"<N>"), so runs for several N accumulate.
// Run:  ./cast --sim [results dir or file.json]
//       mpirun -n N ./cast [results dir or file.json]    for N = 2, 4, 8
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include "bench_util.h"
#include "crown/crown.h"
#include "crown/mesh/cast_tree.h"
#include "crown/mesh/reducer.h"
#include "crown/mesh/sim.h"
#include "payload.h"

namespace {

using namespace crown::bench;

constexpr double kGoalVsMpi = 3;  // the target for the default cast

// Simulated part: sizes, and a time budget per size that picks the number of
// repetitions (a cast to 16384 procs on 2 cores takes far longer than one to
// 16), so the whole part stays near a minute.
const std::vector<std::size_t> kSimProcs = {16, 64, 256, 1024, 4096, 16384};
constexpr double kSimCollectBudgetSeconds = 3;
constexpr double kSimReduceBudgetSeconds = 1.5;
constexpr int kSimMinReps = 3;
constexpr int kSimMaxReps = 200;

// Real part: every variant, and MPI, run in blocks that alternate, so that
// all see the same load on a shared machine; each one's samples are pooled.
constexpr int kWarmup = 200;
constexpr int kIterations = 2000;
constexpr int kBlocks = 5;
constexpr int kMpiBlockWarmup = 10;  // absorbs the skew of the barrier that opens each MPI block
constexpr double kMpiDeadlineSeconds = 30;
constexpr auto kReplyTimeout = std::chrono::seconds(60);

/// The cast: 64 payload bytes.
struct Echo64 : Payload64 {
  using Payload64::Payload64;
};

/// Makes every rank but 0 take part in `rounds` MPI anchor rounds on its MPI
/// service thread; rank 0's MPI thread is the controller's.
struct JoinMpiAnchor {
  int rounds = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rounds;
  }
};

Clock::time_point mpiDeadline() {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(kMpiDeadlineSeconds));
}

// One block of the MPI anchor, on every rank's MPI service thread (THR-1):
// MPI_Bcast of 64 bytes from rank 0, then MPI_Gather of one int to rank 0,
// the exchange a cast plus collect makes. The blocking collectives are the
// anchor because they are what an MPI program would call; an MPI_Ibarrier
// polled to a deadline opens the block, so a rank that never joins fails the
// bench instead of hanging it, and after it every rank runs the same rounds.
// On rank 0, `samples` gets each round's time after the block's warm-up.
void mpiAnchorRounds(int rounds, std::vector<double>* samples) {
  MPI_Request barrier;
  MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
  auto deadline = mpiDeadline();
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if ((spins & 1023) == 0 && Clock::now() > deadline)
      throw std::runtime_error("mpi anchor: a rank did not join within the deadline");
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::array<char, kPayloadBytes> payload{};
  std::vector<int> gathered(rank == 0 ? size : 0);
  for (int i = 0; i < rounds; ++i) {
    auto start = Clock::now();
    MPI_Bcast(payload.data(), kPayloadBytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Gather(&rank, 1, MPI_INT, gathered.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    double micros = microsSince(start);
    if (samples && i >= kMpiBlockWarmup) samples->push_back(micros);
  }
  if (rank == 0 && gathered[size - 1] != size - 1)
    throw std::runtime_error("mpi anchor: gather out of place");
}

class Member : public crown::Actor {
 public:
  Member() {
    handle<Echo64>([this](const Echo64&) { return int(rank()); });
    handle<JoinMpiAnchor>([this](const JoinMpiAnchor& join) {
      if (rank() == 0) return 0;
      // Blocks this pool thread meanwhile (the pool lets another take the links).
      crown::Runtime::current().onMpiThread([&] { mpiAnchorRounds(join.rounds, nullptr); });
      return join.rounds;
    });
  }
};

using MemberMesh = crown::ActorMesh<Member>;

/// Cast plus collect once; checks that every member answered.
double castAndCollect(const MemberMesh& mesh) {
  auto start = Clock::now();
  auto replies = mesh.call<int>(Echo64{}).get(kReplyTimeout);
  double micros = microsSince(start);
  if (replies.size() != mesh.size() || !replies.failures().empty())
    throw std::runtime_error("cast: " + std::to_string(replies.failures().size()) + " of " +
                             std::to_string(mesh.size()) + " members failed");
  return micros;
}

/// Cast reduced up the tree once; checks the sum of the ranks.
double castAndReduce(const MemberMesh& mesh) {
  auto start = Clock::now();
  int sum = mesh.reduce<int>(Echo64{}, crown::mesh::Sum{}).get(kReplyTimeout);
  double micros = microsSince(start);
  auto n = static_cast<long long>(mesh.size());
  if (sum != static_cast<int>(n * (n - 1) / 2))
    throw std::runtime_error("reduce: wrong sum " + std::to_string(sum));
  return micros;
}

/// Sets the k of the casts this proc sends for a scope (only the sender's
/// counts: the cast carries it), then puts back the one it had.
class ScopedFanout {
 public:
  explicit ScopedFanout(std::optional<std::size_t> fanout)
      : proc_(crown::Proc::current()), old_(crown::mesh::castFanout(proc_)) {
    if (fanout) crown::mesh::setCastFanout(proc_, *fanout);
  }
  ~ScopedFanout() { crown::mesh::setCastFanout(proc_, old_); }
  ScopedFanout(const ScopedFanout&) = delete;
  ScopedFanout& operator=(const ScopedFanout&) = delete;

 private:
  crown::Proc& proc_;
  std::size_t old_;
};

struct TreeFacts {
  std::size_t fanout = 0;
  std::size_t depth = 0;       ///< hops from the sender to the deepest member
  std::size_t rootSends = 0;   ///< messages the sender sends
  std::size_t busiestHop = 0;  ///< most messages any member forwards
};

TreeFacts treeFacts(const crown::mesh::Shape& shape, std::size_t fanout) {
  crown::mesh::CastTree tree(shape.slice(), fanout);
  TreeFacts facts{fanout, tree.height(), tree.rootChildren().size(), 0};
  for (std::size_t rank : shape.slice().ranks())
    facts.busiestHop = std::max(facts.busiestHop, tree.children(rank).size());
  return facts;
}

nlohmann::json toJson(const TreeFacts& facts) {
  return {{"fanout", facts.fanout},
          {"depth", facts.depth},
          {"root_sends", facts.rootSends},
          {"busiest_hop", facts.busiestHop}};
}

// The file's other keys are other runs' (the other part, other N): keep them.
nlohmann::json readResults(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return json.is_object() ? json : nlohmann::json::object();
}

/// Puts `part` under json[keys[0]][keys[1]]... of the results file, keeping the rest.
void mergeResults(const std::filesystem::path& file, const std::vector<std::string>& keys,
                  nlohmann::json part) {
  auto json = readResults(file);
  json["bench"] = "cast";
  nlohmann::json* at = &json;
  for (const auto& key : keys) at = &(*at)[key];  // object keys, even "2": no json_pointer arrays
  *at = std::move(part);
  writeResults(file, json);
}

// ---- simulated part ----

/// Least squares y = a + b x, and its R^2.
struct Fit {
  double a = 0, b = 0, r2 = 0;
};

Fit fitLine(const std::vector<double>& x, const std::vector<double>& y) {
  double n = static_cast<double>(x.size()), mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  Fit fit;
  fit.b = sxx > 0 ? sxy / sxx : 0;
  fit.a = my - fit.b * mx;
  double residual = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double e = y[i] - (fit.a + fit.b * x[i]);
    residual += e * e;
  }
  fit.r2 = syy > 0 ? 1 - residual / syy : 1;
  return fit;
}

nlohmann::json toJson(const Fit& fit) { return {{"a_us", fit.a}, {"b_us", fit.b}, {"r2", fit.r2}}; }

struct SimPoint {
  std::size_t procs = 0;
  TreeFacts tree;
  double worldSeconds = 0;  ///< constructing the SimulatedWorld
  double spawnSeconds = 0;  ///< spawning the mesh on it
  LatencySummary collect;
  LatencySummary reduce;
};

// Times `once` a number of times that fits the budget, judged by a first
// (unrecorded) run that also warms the procs up.
LatencySummary timeWithin(double budgetSeconds, const std::function<double()>& once) {
  double first = once();
  int reps = std::clamp(static_cast<int>(budgetSeconds * 1e6 / std::max(first, 1.0)), kSimMinReps,
                        kSimMaxReps);
  std::vector<double> samples;
  samples.reserve(reps);
  for (int i = 0; i < reps; ++i) samples.push_back(once());
  return summarize(std::move(samples));
}

SimPoint measureSimulated(std::size_t procs) {
  SimPoint point;
  point.procs = procs;
  auto start = Clock::now();
  // One world at a time: the main thread acts from proc 0 of the only one alive.
  crown::mesh::SimulatedWorld sim(procs);
  point.worldSeconds = secondsSince(start);
  start = Clock::now();
  auto mesh = sim.world().spawn<Member>("member");
  point.spawnSeconds = secondsSince(start);
  point.tree = treeFacts(mesh.shape(), crown::mesh::castFanout());
  point.collect = timeWithin(kSimCollectBudgetSeconds, [&] { return castAndCollect(mesh); });
  point.reduce = timeWithin(kSimReduceBudgetSeconds, [&] { return castAndReduce(mesh); });
  return point;
}

int runSimulated(const std::filesystem::path& results) {
  std::vector<SimPoint> points;
  for (std::size_t procs : kSimProcs) {
    points.push_back(measureSimulated(procs));
    std::cout << "  " << procs << " procs: world " << fixed(points.back().worldSeconds, 2)
              << " s, spawn " << fixed(points.back().spawnSeconds, 2) << " s" << std::endl;
  }

  std::vector<double> log2V, V, collectUs, reduceUs;
  for (const auto& p : points) {
    log2V.push_back(std::log2(static_cast<double>(p.procs)));
    V.push_back(static_cast<double>(p.procs));
    collectUs.push_back(p.collect.p50);
    reduceUs.push_back(p.reduce.p50);
  }
  Fit collectLog = fitLine(log2V, collectUs), collectLinear = fitLine(V, collectUs);
  Fit reduceLog = fitLine(log2V, reduceUs), reduceLinear = fitLine(V, reduceUs);

  unsigned cores = std::thread::hardware_concurrency();
  std::cout << "cast --sim: V virtual procs in one process on " << cores
            << " cores, 64 B to every member + int back; medians over reps\n";
  printRow("procs",
           {"depth", "root sends", "busiest hop", "reps", "collect ms", "us/member", "reduce ms"});
  for (const auto& p : points) {
    printRow(std::to_string(p.procs),
             {std::to_string(p.tree.depth), std::to_string(p.tree.rootSends),
              std::to_string(p.tree.busiestHop), std::to_string(p.collect.samples),
              fixed(p.collect.p50 / 1e3, 3), fixed(p.collect.p50 / double(p.procs)),
              fixed(p.reduce.p50 / 1e3, 3)});
  }
  auto printFit = [](const std::string& name, const Fit& fit) {
    printRow(name, {"a " + fixed(fit.a / 1e3, 3) + " ms", "b " + fixed(fit.b / 1e3, 5) + " ms",
                    "R^2 " + fixed(fit.r2, 4)});
  };
  printFit("collect: t = a + b log2 V", collectLog);
  printFit("collect: t = a + b V", collectLinear);
  printFit("reduce:  t = a + b log2 V", reduceLog);
  printFit("reduce:  t = a + b V", reduceLinear);
  std::cout << std::flush;

  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : points) {
    rows.push_back({{"procs", p.procs},
                    {"tree", toJson(p.tree)},
                    {"world_s", p.worldSeconds},
                    {"spawn_s", p.spawnSeconds},
                    {"collect", toJson(p.collect)},
                    {"collect_p50_us_per_member", p.collect.p50 / double(p.procs)},
                    {"reduce", toJson(p.reduce)}});
  }
  nlohmann::json part = {
      {"config",
       {{"payload_bytes", kPayloadBytes},
        {"fanout", points.front().tree.fanout},
        {"cores", cores},
        {"collect_budget_s", kSimCollectBudgetSeconds},
        {"reduce_budget_s", kSimReduceBudgetSeconds},
        {"note", "all virtual procs share this process's cores: a cast's total work is O(V)"}}},
      {"points", rows},
      {"fits",
       {{"collect", {{"log2", toJson(collectLog)}, {"linear", toJson(collectLinear)}}},
        {"reduce", {{"log2", toJson(reduceLog)}, {"linear", toJson(reduceLinear)}}}}}};
  mergeResults(results, {"simulated"}, std::move(part));
  return 0;
}

// ---- real part ----

/// One measured row: a cast to `target` under a fan-out of its own, or
/// (no target) a direct call to `member`.
struct Variant {
  std::string name;
  std::string key;                    ///< its key in cast.json
  std::optional<std::size_t> fanout;  ///< nullopt: castFanout() as the launch set it
  const MemberMesh* target = nullptr;
  crown::ActorRef<Member> member;
  TreeFacts tree{};
  std::vector<double> samples{};
};

double callOnce(const crown::ActorRef<Member>& member) {
  auto start = Clock::now();
  int reply = member.call<int>(Echo64{}).get(kReplyTimeout);
  double micros = microsSince(start);
  if (reply != static_cast<int>(member.id().rank)) throw std::runtime_error("call: wrong reply");
  return micros;
}

void runBlock(Variant& variant, int times, bool record) {
  ScopedFanout fanout(variant.fanout);
  for (int i = 0; i < times; ++i) {
    double micros = variant.target ? castAndCollect(*variant.target) : callOnce(variant.member);
    if (record) variant.samples.push_back(micros);
  }
}

void mpiBlock(crown::Controller& ctl, const MemberMesh& mesh, int rounds,
              std::vector<double>* samples) {
  // Not waited on until rank 0's rounds are done: it completes when the others' do.
  auto joined = mesh.call<int>(JoinMpiAnchor{rounds});
  ctl.runtime().onMpiThread([&] { mpiAnchorRounds(rounds, samples); });
  auto replies = joined.get(kReplyTimeout);
  for (std::size_t i = 1; i < replies.size(); ++i)
    if (replies.at(i) != rounds) throw std::runtime_error("mpi anchor: round count mismatch");
}

void runReal(crown::Controller& ctl, const std::filesystem::path& results) {
  const std::size_t n = ctl.size();
  if (n < 2) {
    throw crown::ConfigError(
        "cast needs at least two ranks (mpirun -n N ./cast), or --sim for the simulated part");
  }
  auto mesh = ctl.worldFlat().spawn<Member>("member");
  const auto last = static_cast<std::int64_t>(n - 1);
  const std::string lastName = std::to_string(last);
  auto own = mesh.at("ranks", 0);     // the controller's own rank: no network
  auto far = mesh.at("ranks", last);  // one remote member

  // The headline rows (every rank), then a breakdown of where a cast's time
  // goes: the controller's own member alone, one remote member alone, and a
  // direct call to that member that skips the cast agents (actor_latency's path).
  std::vector<Variant> variants = {
      {"cast+collect, default k", "default", std::nullopt, &mesh, {}},
      {"cast+collect, binary tree", "binary", 2, &mesh, {}},
      {"cast+collect, flat", "flat", n, &mesh, {}},
      {"  cast+collect, rank 0 only", "rank0_only", std::nullopt, &own, {}},
      {"  cast+collect, rank " + lastName + " only", "last_only", std::nullopt, &far, {}},
      {"  call rank " + lastName + " (ActorRef)", "direct_call", std::nullopt, nullptr,
       mesh.ref({{"ranks", n - 1}})}};
  for (auto& v : variants) {
    ScopedFanout fanout(v.fanout);
    if (v.target) v.tree = treeFacts(v.target->shape(), crown::mesh::castFanout());
    v.samples.reserve(kIterations);
  }

  for (auto& v : variants) runBlock(v, kWarmup, false);
  mpiBlock(ctl, mesh, kWarmup, nullptr);
  std::vector<double> mpiSamples;
  mpiSamples.reserve(kIterations);
  for (int block = 0; block < kBlocks; ++block) {
    for (auto& v : variants) runBlock(v, kIterations / kBlocks, true);
    mpiBlock(ctl, mesh, kIterations / kBlocks + kMpiBlockWarmup, &mpiSamples);
  }
  LatencySummary mpi = summarize(std::move(mpiSamples));

  const auto& topology = ctl.topology();
  std::cout << "cast: " << n << " ranks on " << topology.hostCount << " host(s), 64 B to every"
            << " rank + int back; " << kIterations << " per row after " << kWarmup << " warm-up, "
            << kBlocks << " interleaved blocks\n";
  printRow("name", {"fanout", "depth", "p50 us", "p99 us", "mean us", "p50/mpi", "p99/mpi"});
  nlohmann::json metrics, ratios;
  for (auto& v : variants) {
    auto s = summarize(std::move(v.samples));
    bool cast = v.target != nullptr;
    printRow(v.name, {cast ? std::to_string(v.tree.fanout) : "-",
                      cast ? std::to_string(v.tree.depth) : "-", fixed(s.p50), fixed(s.p99),
                      fixed(s.mean), fixed(ratio(s.p50, mpi.p50)), fixed(ratio(s.p99, mpi.p99))});
    auto entry = toJson(s);
    if (cast) entry["tree"] = toJson(v.tree);
    metrics[v.key] = entry;
    ratios[v.key + "_p50_vs_mpi"] = ratio(s.p50, mpi.p50);
    ratios[v.key + "_p99_vs_mpi"] = ratio(s.p99, mpi.p99);
  }
  printRow("mpi bcast(64 B)+gather(int)",
           {"-", "-", fixed(mpi.p50), fixed(mpi.p99), fixed(mpi.mean), fixed(1), fixed(1)});
  double goal = ratios["default_p50_vs_mpi"].get<double>();
  std::cout << "goal: default cast+collect p50 <= " << fixed(kGoalVsMpi, 0)
            << "x MPI: " << fixed(goal) << "x (" << (goal <= kGoalVsMpi ? "met" : "not met") << ")"
            << std::endl;

  nlohmann::json part = {{"config",
                          {{"ranks", n},
                           {"hosts", topology.hostCount},
                           {"cores", std::thread::hardware_concurrency()},
                           {"payload_bytes", kPayloadBytes},
                           {"warmup", kWarmup},
                           {"iterations", kIterations},
                           {"interleaved_blocks", kBlocks}}},
                         {"metrics", metrics},
                         {"anchors", {{"mpi_bcast_gather", toJson(mpi)}}},
                         {"ratios", ratios},
                         {"goal", {{"max_p50_vs_mpi", kGoalVsMpi}, {"met", goal <= kGoalVsMpi}}}};
  mergeResults(results, {"real", std::to_string(n)}, std::move(part));
}

}  // namespace

int main(int argc, char** argv) {
  // --sim anywhere on the line picks the simulated part; the rest is as
  // resultsFile() reads it.
  std::vector<char*> args;
  bool simulated = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sim") == 0) {
      simulated = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  auto results = resultsFile(static_cast<int>(args.size()), args.data(), "cast");
  if (simulated) {
    try {
      return runSimulated(results);
    } catch (const std::exception& e) {
      std::cerr << "cast --sim: " << e.what() << std::endl;
      return 1;
    }
  }
  return crown::run(argc, argv, [&](crown::Controller& ctl) { runReal(ctl, results); });
}
