"""The program of a proc that spawn_procs started (``python3 -m
crown._spawned SYS_PATH SETTINGS``; _client.py). It takes the controller's
sys.path (a JSON list) and its own settings (SETTINGS is a JSON list, one
entry per proc started together, picked by this proc's rank among them:
the environment to add and the CPUs to run on; _spawn_options.py), applied
before anything else is imported; then it joins the job of the controller
that started it (crown.init finds its MPI parent) and serves until that
controller stops it or ends."""

import json
import os
import sys

if len(sys.argv) > 1:
    controllers = json.loads(sys.argv[1])
    sys.path[:] = controllers + [p for p in sys.path if p not in controllers]
if len(sys.argv) > 2:
    # Open MPI numbers the processes of one MPI_Comm_spawn from 0.
    mine = json.loads(sys.argv[2])[int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))]
    os.environ.update(mine["env"])
    if mine["cpus"]:
        os.sched_setaffinity(0, mine["cpus"])

import crown  # noqa: E402 - from the controller's sys.path, in the proc's own environment
from crown import _pickle  # noqa: E402

_pickle.main_by_value(True)  # this __main__ is not the controller's: what names one goes by value
crown.init()  # joins and serves; a proc never comes back from it
