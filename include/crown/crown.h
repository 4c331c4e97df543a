// crown: everything a program needs, in one include.
#pragma once

#include "crown/actor/actor.h"
#include "crown/actor/future.h"
#include "crown/actor/mpi_service.h"
#include "crown/actor/ref.h"
#include "crown/actor/spawn.h"
#include "crown/bootstrap/controller.h"
#include "crown/bootstrap/runtime.h"
#include "crown/common/error.h"
#include "crown/mesh/actor_mesh.h"
#include "crown/mesh/point.h"
#include "crown/mesh/proc_mesh.h"
#include "crown/mesh/value_mesh.h"
#include "crown/rdma/buffer.h"
#include "crown/config.h"
