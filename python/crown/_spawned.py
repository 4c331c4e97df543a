"""The program of a proc that spawn_procs started (``python3 -m
crown._spawned SYS_PATH``; _client.py): it takes the controller's sys.path
(a JSON list), joins the job of the controller that started it (crown.init
finds its MPI parent) and serves until that controller stops it or ends."""

import json
import sys

if len(sys.argv) > 1:
    controllers = json.loads(sys.argv[1])
    sys.path[:] = controllers + [p for p in sys.path if p not in controllers]

import crown  # noqa: E402 - from the controller's sys.path

crown.init()  # joins and serves; a proc never comes back from it
