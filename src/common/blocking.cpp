#include "crown/common/blocking.h"

namespace crown::detail {
namespace {
thread_local const BlockingHooks* t_hooks = nullptr;
}  // namespace

void setBlockingHooks(const BlockingHooks* hooks) { t_hooks = hooks; }
const BlockingHooks* blockingHooks() { return t_hooks; }

}  // namespace crown::detail
