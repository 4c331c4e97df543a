"""python_start: processes on demand (issue 46), timed from outside. Each
run records the wall clock (time.time()) just before it starts a process
and reads the marks that bench/python_start_prog.py prints; the variants
alternate, round after round:
  plain N    ``python3 python_start_prog.py`` started by no launcher (no
             OMPI_*/PMIX_* in its environment): it becomes the controller
             (an MPI singleton), this_host().spawn_procs starts N procs (one
             MPI_Comm_spawn), one actor on each, call().get() from all
  mpirun N   ``mpirun --oversubscribe -n N python3 python_start_prog.py``:
             crown.run(main), the same actor and call over crown.world()
             (rank 0 is a member too: N members either way)
  mpi4py N   the anchor for plain N: a plain python3 that imports mpi4py
             (a singleton's MPI_Init), MPI_Comm_spawns N Pythons that import
             mpi4py and send their pid back, then disconnects; MPI and the
             interpreters, nothing of crown's
  imports N  N ``python3 -c "import crown"`` at once, no MPI: the part of
             plain N's join that is the procs' interpreters and imports
  respawn    bench/python_respawn.py under ``mpirun -n 4`` with recovery:
             respawn_lost() of one SIGKILLed rank, timed inside (3 kills a
             run), beside its own anchor, a bare MPI_Comm_spawn of one Python
After every run no process of it may be left (each carries the driver's
tag in its environment: the program, its procs, Open MPI's daemons); a run
past 90 s counts as a hang: it is killed and recorded, and the rounds go on.
The mpi4py anchor's "imports" includes its MPI_Init (importing mpi4py.MPI
initialises MPI); crown's plain program makes its singleton in "init".

Run (from the repository root, after launch/build; not under mpirun):
  PYTHONPATH=build/python /usr/bin/python3 bench/python_start.py [OUT]
Environment: PYTHON_START_ROUNDS (default 3), PYTHON_START_SIZES (default
"4 8"). As root it sets OMPI_ALLOW_RUN_AS_ROOT for mpirun.
Results: bench/results/python_start.json (bench_env.write_results), a
table on stdout.
"""

import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

from bench_env import write_results

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "python_start_prog.py")
RESPAWN = os.path.join(HERE, "python_respawn.py")
PYTHON = "/usr/bin/python3"
ROUNDS = int(os.environ.get("PYTHON_START_ROUNDS", "3"))
LIMIT = 90  # seconds a run may take before it counts as a hang
SIZES = [int(n) for n in os.environ.get("PYTHON_START_SIZES", "4 8").split()]
TAG_NAME, TAG = "PYTHON_START_TAG", f"{os.getpid()}-{time.time()}"  # marks our processes

ANCHOR = """\
import time
begin = time.time()
import os, json
os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")  # as crown's singleton sets
os.environ.setdefault("OMPI_MCA_orte_enable_recovery", "1")
from mpi4py import MPI
imported = time.time()
count = int(os.environ["PYTHON_START_PROCS"])
child = ("import os, time; from mpi4py import MPI; p = MPI.Comm.Get_parent(); "
         "t = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]); "
         "s = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) "
         "+ t / os.sysconf('SC_CLK_TCK'); "
         "p.send((os.getpid(), s), dest=0); p.Disconnect()")
inter = MPI.COMM_SELF.Spawn(os.environ["PYTHON_START_PYTHON"], ["-c", child], maxprocs=count)
joined = time.time()
replies = [inter.recv(source=i) for i in range(count)]
replied = time.time()
inter.Disconnect()
starts = [started for _, started in replies]
print("python_start: " + json.dumps({"begin": begin, "imported": imported, "init": imported,
      "joined": joined, "replied": replied, "members": len({pid for pid, _ in replies}),
      "first_started": min(starts), "last_started": max(starts)}), flush=True)
"""


def unlaunched_env() -> dict:
    """This environment without any launcher's variables (as
    python/tests/test_spawn_procs.py): a child started with it is started by
    no launcher."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "ORTE_"))}
    env[TAG_NAME] = TAG
    return env


def mpirun_env() -> dict:
    env = unlaunched_env()
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def leftovers() -> list:
    """Processes of these runs still alive (none may be): every process that
    carries this driver's TAG in its environment (the programs, their procs,
    Open MPI's daemons), found in /proc, so other users' runs do not count."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{TAG_NAME}={TAG}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie: gone, its parent not yet told
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid} {command[:120]}")
        except OSError:
            continue  # ended meanwhile, or not ours to read
    return found


class Hang(Exception):
    """A run that did not end within its time (the driver killed it)."""


def execute(command, env, limit: float) -> str:
    """Runs command to its end and returns its stdout; raises Hang (after
    killing it: its session, and every process carrying TAG) when it takes
    longer than limit seconds, SystemExit when it fails."""
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        for line in leftovers():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)  # ours: they carry TAG
            except ProcessLookupError:
                pass
        out, err = child.communicate()
        raise Hang(f"{' '.join(command)[:100]}: no end after {limit:.0f} s; its last output:\n"
                   + "\n".join((out + err).splitlines()[-15:]))
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({child.returncode}):\n{out}{err}")
    return out


def timed(command, env) -> dict:
    """Runs command once; its marks, as seconds since the start of the run,
    and "exited" (the whole process gone, shutdown included)."""
    start = time.time()
    out = execute(command, env, LIMIT)
    exited = time.time()
    line = next(line for line in out.splitlines() if line.startswith("python_start: "))
    marks = json.loads(line.split(" ", 1)[1])
    members = marks.pop("members")
    run = {name: value - start for name, value in marks.items()}
    run.update(exited=exited - start, members=members)
    return run


def plain(count: int) -> dict:
    env = dict(unlaunched_env(), PYTHON_START_PROCS=str(count))
    return timed([PYTHON, PROG], env)


def anchor(count: int) -> dict:
    env = dict(unlaunched_env(), PYTHON_START_PROCS=str(count), PYTHON_START_PYTHON=PYTHON)
    return timed([PYTHON, "-c", ANCHOR], env)


def imports(count: int) -> dict:
    """count Pythons that import crown at once and exit (what the procs of
    plain N do before they join, apart from MPI): from start to the last exit."""
    start = time.time()
    children = [subprocess.Popen([PYTHON, "-c", "import crown"], env=unlaunched_env())
                for _ in range(count)]
    if any(child.wait(timeout=LIMIT) for child in children):
        raise SystemExit("python3 -c 'import crown' failed")
    return {"exited": time.time() - start}


def launched(count: int) -> dict:
    return timed(["mpirun", "--oversubscribe", "-n", str(count), "-x", "PYTHONPATH",
                  PYTHON, PROG], mpirun_env())


def respawn() -> dict:
    env = dict(mpirun_env(), OMPI_MCA_orte_enable_recovery="1", RESPAWN_ROUNDS="3",
               CROWN_SHUTDOWN_TIMEOUT_MS="3000")  # mpi4py's finalise waits for the lost rank
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "respawn.json")
        execute(["mpirun", "--oversubscribe", "-n", "4", "-x", "PYTHONPATH",
                 "-x", "OMPI_MCA_orte_enable_recovery", "-x", "RESPAWN_ROUNDS",
                 "-x", "CROWN_SHUTDOWN_TIMEOUT_MS", PYTHON, RESPAWN, out], env, LIMIT)
        with open(out) as f:
            result = json.load(f)
    return {"respawn": [ms / 1e3 for ms in result["respawn_ms"]],
            "raw_spawn": [ms / 1e3 for ms in result["raw_spawn_ms"]],
            "first_call": [ms / 1e3 for ms in result["first_call_ms"]]}


def spread(values) -> str:
    return f"{min(values) * 1e3:.0f}-{max(values) * 1e3:.0f}" if values else "-"


def stats(values) -> dict:
    return {"min": min(values), "max": max(values), "median": statistics.median(values)}


def main() -> None:
    if any(k.startswith(("OMPI_", "PMIX_")) for k in os.environ):
        print("note: this driver runs under a launcher; its children get a clean environment")
    variants = []
    for count in SIZES:
        variants += [(f"plain {count}", lambda c=count: plain(c)),
                     (f"mpi4py {count}", lambda c=count: anchor(c)),
                     (f"imports {count}", lambda c=count: imports(c)),
                     (f"mpirun {count}", lambda c=count: launched(c))]
    variants.append(("respawn", respawn))
    runs = {name: [] for name, _ in variants}
    loads, hangs = [], []
    for round_ in range(ROUNDS):
        for name, run in variants:
            loads.append(os.getloadavg()[0])
            try:
                runs[name].append(run())
                if "replied" in runs[name][-1]:
                    print(f"  {name}: reply at {runs[name][-1]['replied']:.2f} s", flush=True)
            except Hang as hang:
                hangs.append({"variant": name, "round": round_ + 1, "what": str(hang)})
                print(f"HANG ({name}, round {round_ + 1}): {hang}", flush=True)
            deadline = time.monotonic() + 10  # as the tests allow: gone within seconds
            while (left := leftovers()) and time.monotonic() < deadline:
                time.sleep(0.05)
            if left:
                raise SystemExit(f"{name}: processes left behind:\n" + "\n".join(left))
        print(f"round {round_ + 1} of {ROUNDS} done, load {loads[-1]:.2f}", flush=True)

    summary = {}
    print(f"\n{ROUNDS} rounds, ms, min-max; each step from the previous mark, 'to reply' and "
          f"'exited' from the process start; "
          f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    columns = {  # name: (heading, how a run gives it)
        "python_up": ("python up", lambda r: r["begin"]),
        "imports": ("imports", lambda r: r["imported"] - r["begin"]),
        "init": ("init", lambda r: r["init"] - r["imported"]),
        "spawn_join": ("spawn+join", lambda r: r["joined"] - r["init"]),
        "launch": ("of it: launch", lambda r: r["last_started"] - r["init"]),
        "up_to_joined": ("up->joined", lambda r: r["joined"] - r["last_started"]),
        "actor_call": ("actor+call", lambda r: r["replied"] - r.get("joined", r["init"])),
        "last_up": ("last proc up", lambda r: r["last_started"]),
        "to_reply": ("to reply", lambda r: r["replied"]),
        "exited": ("exited", lambda r: r["exited"]),
    }
    after_spawn = ("spawn_join", "launch", "up_to_joined")
    print(f"{'variant':<9}" + "".join(f" {heading:>13}" for heading, _ in columns.values()))
    for name, _ in variants:
        if name == "respawn" or name.startswith("imports"):
            continue
        spawned = [r for r in runs[name] if "joined" in r]  # not under mpirun
        steps = {key: [get(r) for r in (spawned if key in after_spawn else runs[name])]
                 for key, (_, get) in columns.items()}
        summary[name] = {key: stats(values) for key, values in steps.items() if values}
        print(f"{name:<9}" + "".join(f" {spread(steps[key]):>13}" for key in columns))
    respawns = {key: [x for r in runs["respawn"] for x in r[key]]
                for key in ("respawn", "raw_spawn", "first_call")}
    summary["respawn"] = {key: stats(v) for key, v in respawns.items() if v}
    print(f"respawn_lost of one rank of 4 ({len(respawns['respawn'])} kills): "
          f"{spread(respawns['respawn'])} ms, then spawn + first call "
          f"{spread(respawns['first_call'])} ms; bare MPI_Comm_spawn of one Python "
          f"{spread(respawns['raw_spawn'])} ms (min-max)")
    for count in SIZES:
        alone = [r["exited"] for r in runs[f"imports {count}"]]
        summary[f"imports {count}"] = {"exited": stats(alone)} if alone else {}
        print(f"{count} Pythons importing crown at once, no MPI, until the last exits: "
              f"{spread(alone)} ms")
    for hang in hangs:
        print(f"hang: {hang['variant']}, round {hang['round']}")
    write_results("python_start", {
        "rounds": ROUNDS, "sizes": SIZES, "cores": os.cpu_count(),
        "load_average": {"min": min(loads), "max": max(loads)},
        "seconds_from_start": "every figure: seconds, the marks measured from the "
                              "driver's time.time() just before the process started",
        "summary": summary, "runs": runs, "hangs": hangs})


if __name__ == "__main__":
    main()
