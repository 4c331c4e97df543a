"""What a SystemExit means as a process's exit code, as Python itself reads
it: None is 0, an int is itself, anything else is printed to stderr and
gives 1. Both ways a script ends under crown follow it: crown.run(main) and
a script run in a served job (crown console --run)."""

import sys


def exit_code(error: SystemExit) -> int:
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1
