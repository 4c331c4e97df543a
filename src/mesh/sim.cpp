#include "crown/mesh/sim.h"

#include "crown/mesh/module.h"
#include "crown/transport/io_pool.h"
#include "crown/transport/local.h"

namespace crown::mesh {

SimulatedWorld::SimulatedWorld(std::size_t procs, std::vector<Dim> dims)
    : shape_(dims.empty() ? Shape{{"procs", procs}} : Shape(dims)),
      pool_(std::make_shared<transport::IoPool>()) {
  if (shape_.size() != procs) {
    throw ConfigError("a simulated world of " + std::to_string(procs) + " procs cannot have shape " +
                      shape_.toString());
  }
  auto size = static_cast<Rank>(procs);
  hub_ = transport::makeLocalHub(pool_, size);
  auto hosts = std::make_shared<const std::vector<std::string>>(procs, "sim");
  procs_.reserve(procs);
  for (Rank rank = 0; rank < size; ++rank) {
    Proc::Options options{rank, size, hosts, pool_, /*stopsPool=*/false, {meshModule()}, nullptr};
    // The in-process transport needs no endpoints.
    procs_.push_back(std::make_unique<Proc>(options, transport::makeLocalTransport(hub_, rank),
                                            std::vector<std::string>(size)));
  }
}

SimulatedWorld::~SimulatedWorld() {
  for (auto& proc : procs_) proc->stop(std::chrono::milliseconds(0));
  pool_->stop();
  procs_.clear();
}

void SimulatedWorld::disconnect(Rank rank) { transport::disconnect(*hub_, rank); }

}  // namespace crown::mesh
