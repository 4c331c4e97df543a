// CROWN_FUZZ_CHECK: a property a fuzzer checks beyond "no crash". Unlike
// assert() it holds in release builds; a failure aborts, which libFuzzer
// reports as a crash and keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CROWN_FUZZ_CHECK(condition)                                                    \
  do {                                                                                 \
    if (!(condition)) {                                                                \
      std::fprintf(stderr, "%s:%d: CROWN_FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, \
                   #condition);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (false)
