// Memory that stays, on request (issue 45; docs/tensors.md, "The
// allocator"). Under plain mpirun or srun every rank runs glibc's malloc,
// which maps each large block afresh and unmaps it when freed: a tensor's
// own memory is recycled whatever malloc runs (local_tensor.cpp), but MPI's
// temporaries (32 MiB for a 64 MiB allreduce on 4 ranks) and torch's large
// tensors still cost a zero-filled page fault per 4 KiB every step. With
// CROWN_MALLOC=keep, as early as it can (Python: when crown is imported;
// C++: at Runtime::init), on a process whose malloc is glibc's, crown sets
// it to keep what it frees:
//   - one arena (M_ARENA_MAX 1): a thread's own arena grows in heaps of at
//     most 64 MiB, so a larger block on another thread than main would be
//     mapped whatever the thresholds (threads that made an arena before
//     this call keep sharing theirs, which is why it comes early);
//   - blocks up to 1 GiB from the heap (M_MMAP_THRESHOLD), and no trimming
//     on free (M_TRIM_THRESHOLD at its maximum);
//   - a trimmer thread that returns the free memory (malloc_trim) once more
//     than CROWN_MALLOC_KEEP_MB (default 1024) of it has stayed free for two
//     of its periods (CROWN_MALLOC_TRIM_MS, default 2000) and changed since
//     it last trimmed: a program that frees a lot and idles gets it back
//     within two periods.
// Not the default, by measurement (4 ranks on 2 cores, bench/launchers.sh):
// it makes 64 MiB collectives and the training step faster, but 10,000 tiny
// ops 30% slower (every thread's frees of large blocks now consolidate the
// one arena under its lock). Left alone, even when asked, where the user
// chose: another malloc loaded (crownrun's tcmalloc), or glibc's malloc set
// by MALLOC_* or GLIBC_TUNABLES.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace crown {

struct MallocPlan {
  bool keep = false;   ///< set glibc's malloc to keep memory, and trim when idle (CROWN_MALLOC=keep)
  std::string reason;  ///< why not, when not (for the log)
  std::size_t keepBytes = 0;
  std::chrono::milliseconds trimPeriod{0};
};

/// What keepMallocMemory would do in this process, from its environment
/// and its malloc. Throws ConfigError for a bad CROWN_MALLOC* setting.
MallocPlan planMalloc();

/// Applies planMalloc()'s plan (once per process; later calls do nothing)
/// and returns it.
MallocPlan keepMallocMemory();

}  // namespace crown
