// The rdma layer as a Proc::Module (actor/module.h): on every proc, the rdma
// agent (owner side: registrations, leases, the fallback's chunks) and the
// reader side of transfers. Bootstrap installs it on every rank.
#pragma once

#include <memory>

#include "crown/actor/proc.h"
#include "crown/common/executor.h"

namespace crown::rdma {

/// The factory to put in Proc::Options::modules. `pool`: where timeouts and
/// lease releases run (never on the MPI service thread).
Proc::ModuleFactory rdmaModule(std::shared_ptr<Executor> pool);

}  // namespace crown::rdma
