#include "crown/mesh/sim.h"

#include "crown/mesh/module.h"
#include "crown/transport/io_pool.h"
#include "crown/transport/local.h"

namespace crown::mesh {

namespace {

// The local transport, with silence(): frames to or from a silenced rank
// vanish (SimulatedWorld::silence).
class SilenceableTransport final : public transport::Transport {
 public:
  SilenceableTransport(std::unique_ptr<Transport> inner, Rank rank,
                       std::shared_ptr<std::vector<std::atomic<bool>>> silenced)
      : inner_(std::move(inner)), rank_(rank), silenced_(std::move(silenced)) {}

  std::string address() const override { return inner_->address(); }
  void start(std::vector<std::string> peers, transport::TransportCallbacks callbacks) override {
    auto onMessage = std::move(callbacks.onMessage);
    callbacks.onMessage = [this, onMessage = std::move(onMessage)](
                              Rank from, wire::Envelope&& envelope, wire::Bytes&& bytes) {
      if (!silent(rank_)) onMessage(from, std::move(envelope), std::move(bytes));
    };
    inner_->start(std::move(peers), std::move(callbacks));
  }
  void send(Rank to, transport::OutMessage message) override {
    if (!silent(rank_) && !silent(to)) inner_->send(to, std::move(message));
  }
  void stop(std::chrono::milliseconds flushTimeout) override { inner_->stop(flushTimeout); }

 private:
  bool silent(Rank rank) const { return rank < silenced_->size() && (*silenced_)[rank].load(); }

  std::unique_ptr<Transport> inner_;
  Rank rank_;
  std::shared_ptr<std::vector<std::atomic<bool>>> silenced_;
};

}  // namespace

SimulatedWorld::SimulatedWorld(std::size_t procs, std::vector<Dim> dims,
                               std::vector<Proc::ModuleFactory> layersAbove)
    : shape_(dims.empty() ? Shape{{"procs", procs}} : Shape(dims)),
      pool_(std::make_shared<transport::IoPool>()) {
  if (shape_.size() != procs) {
    throw ConfigError("a simulated world of " + std::to_string(procs) + " procs cannot have shape " +
                      shape_.toString());
  }
  auto size = static_cast<Rank>(procs);
  hub_ = transport::makeLocalHub(pool_, size);
  silenced_ = std::make_shared<std::vector<std::atomic<bool>>>(procs);
  auto hosts = std::make_shared<const std::vector<std::string>>(procs, "sim");
  procs_.reserve(procs);
  for (Rank rank = 0; rank < size; ++rank) {
    std::vector<Proc::ModuleFactory> modules{meshModule()};
    modules.insert(modules.end(), layersAbove.begin(), layersAbove.end());
    Proc::Options options{rank, size, hosts, pool_, /*stopsPool=*/false, modules, nullptr, 0, {}};
    // The in-process transport needs no endpoints.
    auto transport = std::make_unique<SilenceableTransport>(
        transport::makeLocalTransport(hub_, rank), rank, silenced_);
    procs_.push_back(
        std::make_unique<Proc>(options, std::move(transport), std::vector<std::string>(size)));
  }
}

SimulatedWorld::~SimulatedWorld() {
  for (auto& proc : procs_) proc->stop(std::chrono::milliseconds(0));
  pool_->stop();
  procs_.clear();
}

void SimulatedWorld::disconnect(Rank rank) { transport::disconnect(*hub_, rank); }

void SimulatedWorld::silence(Rank rank) { silenced_->at(rank) = true; }

}  // namespace crown::mesh
