"""Processes on demand (issue 46): this pytest is a plain `python3 -m
pytest`, started by no launcher, so crown makes it the controller on its
first use (an MPI singleton) and this_host().spawn_procs starts new worker
processes for it, as Monarch's client does. Checked by pid: the processes
are new, disjoint per call, and gone after stop(), after the controller's
exit, and after the controller is SIGKILLed."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import crown
from crown.actor import Actor, SupervisionError, endpoint, this_host, this_proc
from crown.rdma import RDMABuffer
from polling import gone_within, running

HERE = os.path.dirname(os.path.abspath(__file__))


def unlaunched_env() -> dict:
    """This process's environment without what its own MPI_Init (a singleton's)
    added, so that a child python3 is started by no launcher too."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "ORTE_"))}


class Worker(Actor):
    def __init__(self, base: int):
        self.base = base
        self.data = torch.arange(4, dtype=torch.float32) + 10 * crown.actor.current_rank().rank

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def add(self, x: int) -> int:
        return self.base + x

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data.view(torch.uint8))

    @endpoint
    def read_from(self, buffer: RDMABuffer) -> list:
        out = torch.zeros(16, dtype=torch.uint8)
        buffer.read_into(out).get()
        return out.view(torch.float32).tolist()

    @endpoint
    def die(self) -> None:
        os._exit(3)


@pytest.fixture
def faults():
    """Failures that reach the controller, kept rather than ending the program."""
    seen = []
    previous = crown.actor.unhandled_fault_hook
    crown.actor.unhandled_fault_hook = seen.append
    yield seen
    crown.actor.unhandled_fault_hook = previous


def test_the_first_use_makes_this_process_the_controller():
    assert this_proc().spawn("here", Worker, 0).pid.call_one().get() == os.getpid()


def test_spawn_procs_starts_new_processes_each_call_and_stop_ends_them():
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    assert procs._shape.labels == ["gpus"] and len(procs._shape) == 4
    pids = sorted(procs.spawn("w", Worker, 1).pid.call().get().values())
    assert len(set(pids)) == 4 and os.getpid() not in pids
    more = this_host().spawn_procs(per_host={"gpus": 2})
    other = sorted(more.spawn("w", Worker, 1).pid.call().get().values())
    assert len(set(other)) == 2 and not set(other) & set(pids)  # disjoint from the first
    procs.stop()
    assert gone_within(pids, 10) == []
    procs.stop()  # a second stop does nothing, as in Monarch
    assert all(running(pid) for pid in other)  # the other call's procs are untouched
    assert list(more.spawn("again", Worker, 5).add.call(2).get().values()) == [7, 7]
    more.stop()
    assert gone_within(other, 10) == []


def test_a_stopped_meshs_actors_and_spawns_are_refused():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    workers = procs.spawn("w", Worker, 0)
    procs.stop()
    with pytest.raises(Exception):
        workers.add.call(1).get(timeout=20)
    with pytest.raises(RuntimeError, match="stopped"):
        procs.spawn("late", Worker, 0)


def test_only_the_mesh_spawn_procs_returned_ends_its_procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    with pytest.raises(RuntimeError, match="only the ProcMesh that spawn_procs returned"):
        procs.slice(gpus=0).stop()
    assert list(procs.spawn("w", Worker, 1).add.call(1).get().values()) == [2, 2]
    procs.stop()


def test_actors_cast_and_reply_across_the_spawned_procs():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    assert procs._shape.labels == ["hosts", "gpus"]
    workers = procs.spawn("w", Worker, 100)
    assert sorted(workers.add.call(1).get().values()) == [101] * 4
    assert workers.slice(hosts=1, gpus=0).add.call_one(5).get() == 105
    procs.stop()


def test_tensor_collectives_run_among_the_spawned_procs():
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    with procs.activate():
        x = torch.ones(8)
        total = x.reduce("gpus")
    assert crown.inspect(total).tolist() == [4.0] * 8
    procs.stop()


def test_rdma_between_spawned_procs_and_the_controller():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    workers = procs.spawn("w", Worker, 0)
    buffer = workers.slice(gpus=1).buffer.call_one().get()
    out = torch.zeros(16, dtype=torch.uint8)
    buffer.read_into(out).get()
    ranks = procs._shape.ranks()
    expected = [10.0 * ranks[1] + i for i in range(4)]
    assert out.view(torch.float32).tolist() == expected
    assert workers.slice(gpus=0).read_from.call_one(buffer).get() == expected
    procs.stop()


def test_a_killed_proc_raises_supervision_error_and_the_others_serve_on(faults):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    workers = procs.spawn("w", Worker, 0)
    pids = list(workers.pid.call().get().values())
    with pytest.raises(SupervisionError, match="Endpoint call w.die"):
        workers.slice(gpus=1).die.call_one().get(timeout=30)
    assert workers.slice(gpus=0).add.call_one(1).get(timeout=30) == 1
    assert workers.slice(gpus=2).add.call_one(2).get(timeout=30) == 2
    procs.stop()
    assert gone_within(pids, 10) == []


def run_plain(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(HERE, script)], env=unlaunched_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_a_script_whose_actor_lives_in_main_and_exits_leaves_nothing(tmp_path):
    pids = tmp_path / "pids"
    env_script = os.path.join(HERE, "spawn_procs_script.py")
    done = subprocess.run([sys.executable, env_script, str(pids), "exit"], env=unlaunched_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "replies [1, 2, 3, 4]" in done.stdout
    spawned = [int(p) for p in pids.read_text().split()]
    assert len(spawned) == 4
    assert gone_within(spawned, 5) == []


def test_a_sigkilled_controller_takes_its_procs_within_five_seconds(tmp_path):
    pids = tmp_path / "pids"
    env_script = os.path.join(HERE, "spawn_procs_script.py")
    done = subprocess.run([sys.executable, env_script, str(pids), "sigkill"], env=unlaunched_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    spawned = [int(p) for p in pids.read_text().split()]
    assert len(spawned) == 4
    assert gone_within(spawned, 5) == []


class Probe(Actor):
    @endpoint
    def env(self, name: str):
        return os.environ.get(name)

    @endpoint
    def cpus(self) -> list:
        return sorted(os.sched_getaffinity(0))

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def test_bootstrap_command_sets_each_procs_environment_for_that_call_only():
    from crown.actor import default_bootstrap_cmd

    command = default_bootstrap_cmd().with_env({"CROWN_TEST_MARK": "3"})
    marked = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap_command=command)
    assert marked.spawn("p", Probe).env.call_one("CROWN_TEST_MARK").get() == "3"
    plain = this_host().spawn_procs(per_host={"gpus": 1})
    assert plain.spawn("p", Probe).env.call_one("CROWN_TEST_MARK").get() is None
    by_point = this_host().spawn_procs(
        per_host={"gpus": 2},
        bootstrap_command=lambda point: command.with_env({"CROWN_TEST_MARK": str(point["gpus"])}))
    assert sorted(by_point.spawn("p", Probe).env.call("CROWN_TEST_MARK").get().values()) == ["0", "1"]
    for procs in (marked, plain, by_point):
        procs.stop()


def test_with_python_executable_starts_procs_through_it(tmp_path):
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\nexport CROWN_TEST_WRAPPED=yes\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    host = this_host().with_python_executable(str(wrapper))
    procs = host.spawn_procs(per_host={"gpus": 1})
    assert procs.spawn("p", Probe).env.call_one("CROWN_TEST_WRAPPED").get() == "yes"
    procs.stop()
    with pytest.raises(ValueError, match="is not a program this process can run"):
        this_host().with_python_executable(str(tmp_path / "no-such-python")).spawn_procs()


def test_spawn_procs_returns_at_once_and_initialized_says_when_they_are_up():
    started = time.monotonic()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    returned = time.monotonic() - started
    assert procs.initialized.get(timeout=60) is True
    up = time.monotonic() - started
    assert returned < up / 2, (returned, up)  # the processes came up after it returned
    assert len(set(procs.spawn("p", Probe).pid.call().get().values())) == 2
    procs.stop()


def test_proc_bind_pins_each_proc_and_is_checked_before_anything_starts():
    cpus = sorted(os.sched_getaffinity(0))
    procs = this_host().spawn_procs(per_host={"gpus": 2},
                                    proc_bind=[{"cpus": str(cpus[0])}, {"cpus": str(cpus[-1])}])
    assert list(procs.spawn("p", Probe).cpus.call().get().values()) == [[cpus[0]], [cpus[-1]]]
    procs.stop()
    with pytest.raises(ValueError, match=r"proc_bind length \(1\) must equal"):
        this_host().spawn_procs(per_host={"gpus": 2}, proc_bind=[{"cpus": "0"}])
    with pytest.raises(ValueError, match="membind is not supported"):
        this_host().spawn_procs(per_host={"gpus": 1}, proc_bind=[{"membind": "0"}])
    with pytest.raises(ValueError, match="not a non-empty subset"):
        this_host().spawn_procs(per_host={"gpus": 1}, proc_bind=[{"cpus": "4096"}])


def fails_to_bootstrap():
    raise RuntimeError("no scratch space here")


def test_a_bootstrap_that_raises_fails_initialized_with_its_message():
    from crown.actor import ActorError

    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=fails_to_bootstrap)
    with pytest.raises(ActorError, match="no scratch space here"):
        procs.initialized.get(timeout=30)
    good = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=lambda: None, name="good")
    assert good.initialized.get(timeout=30) is True
    procs.stop()
    good.stop()


def test_get_or_spawn_controller_gives_one_actor_per_name_on_this_process():
    from crown.actor import get_or_spawn_controller

    first = get_or_spawn_controller("pids", Probe).get()
    assert first.pid.call_one().get() == os.getpid()
    assert get_or_spawn_controller("pids", Probe).get() is first


def test_a_host_mesh_shut_down_ends_its_procs_and_spawns_no_more():
    import asyncio
    import pickle

    async def scoped():
        async with this_host() as host:
            procs = host.spawn_procs(per_host={"gpus": 2})
            return host, list(procs.spawn("p", Probe).pid.call().get().values())

    host, pids = asyncio.run(scoped())
    assert gone_within(pids, 10) == []
    with pytest.raises(RuntimeError, match="HostMesh has already been shut down"):
        host.spawn_procs()
    copy = pickle.loads(pickle.dumps(this_host()))
    with pytest.raises(RuntimeError, match="only the HostMesh's owner"):
        copy.shutdown()


def test_shutdown_context_ends_every_started_proc_and_can_be_called_twice():
    from crown.actor import shutdown_context

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    pids = list(procs.spawn("p", Probe).pid.call().get().values())
    shutdown_context().get()
    assert gone_within(pids, 10) == []
    shutdown_context().get()
    again = this_host().spawn_procs(per_host={"gpus": 1})  # the client goes on
    assert again.spawn("p", Probe).pid.call_one().get() not in pids
    again.stop()


class Napper(Actor):
    @endpoint
    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def test_ctrl_c_ends_a_wait_for_replies_at_once():
    # A notebook's Kernel > Interrupt and a terminal's Ctrl-C are SIGINT.
    import threading

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    nappers = procs.spawn("nappers", Napper)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        nappers.nap.call(20).get(timeout=60)
    assert time.monotonic() - started < 5  # not after the 20 s nap
    procs.stop()


def test_a_process_job_gives_host_meshes_by_name_and_reuses_its_cached_description(tmp_path):
    from crown.job import LocalJob, ProcessJob, job_load

    cache = str(tmp_path / "job_state.pkl")
    state = ProcessJob({"trainers": 2, "server": 1}).state(cached_path=cache)
    procs = state.trainers.spawn_procs(per_host={"gpus": 2})
    assert procs.sizes == {"hosts": 2, "gpus": 2}  # the hosts' dimension, then per_host's
    pids = list(procs.spawn("p", Probe).pid.call().get().values())
    assert len(set(pids)) == 4
    assert state.server.slice(hosts=0).spawn_procs().sizes == {"hosts": 1}
    with pytest.raises(AttributeError, match="has no host mesh 'workers'"):
        state.workers
    with pytest.raises(ValueError, match="overlap with host labels"):
        state.trainers.spawn_procs(per_host={"hosts": 2})
    first = job_load(cache).apply_id
    ProcessJob({"trainers": 2, "server": 1}).state(cached_path=cache)
    assert job_load(cache).apply_id == first  # the cached job can run it: reused
    ProcessJob({"trainers": 3}).state(cached_path=cache)
    assert job_load(cache).apply_id != first  # it cannot: killed, a new one cached
    assert gone_within(pids, 10) == []  # the killed job's procs ended
    job_load(cache).kill()
    assert LocalJob().state(cached_path=None).hosts.spawn_procs(
        per_host={"gpus": 1}).sizes == {"hosts": 1, "gpus": 1}


class Spawner(Actor):
    """Spawns procs of its own from an endpoint, as Monarch's controllers do."""

    @endpoint
    def spawn_probes(self):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        self.procs = procs
        return procs.spawn("inner", Probe)

    @endpoint
    def stop_them(self) -> None:
        self.procs.stop()


def test_an_actor_spawns_procs_on_the_controller_and_on_a_started_proc():
    from crown.actor import get_or_spawn_controller

    here = get_or_spawn_controller("spawner", Spawner).get()  # on this process
    inner = here.spawn_probes.call_one().get()
    pids = list(inner.pid.call().get().values())
    assert len(set(pids)) == 2 and os.getpid() not in pids
    here.stop_them.call_one().get()
    assert gone_within(pids, 10) == []
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    remote = procs.spawn("spawner", Spawner)  # on a started proc: the controller starts them
    inner = remote.spawn_probes.call_one().get()
    nested = list(inner.pid.call().get().values())
    assert len(set(nested)) == 2 and not set(nested) & set(pids)
    remote.stop_them.call_one().get()
    assert gone_within(nested, 10) == []
    procs.stop()


BATCH_CLIENT = '''
import os, sys
from crown.actor import Actor, endpoint
from crown.job import ProcessJob


class Pid(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()


state = ProcessJob({"trainers": 2}).state()  # the job this client runs in, from the cache
procs = state.trainers.spawn_procs(per_host={"gpus": 1})
pids = sorted(set(procs.spawn("pid", Pid).pid.call().get().values()))
print("batch", os.environ.get("CROWN_BATCH_JOB"), "procs", *pids, flush=True)
sys.exit(7)
'''


def test_a_process_job_runs_its_own_client_in_batch_mode(tmp_path, monkeypatch):
    from crown.job import BatchJob, ProcessJob, job_load

    monkeypatch.chdir(tmp_path)
    (tmp_path / "client.py").write_text(BATCH_CLIENT)
    job = ProcessJob({"trainers": 2})
    job.apply(client_script="client.py")
    assert isinstance(job_load(".crown/job_state.pkl"), BatchJob)
    assert job.process.wait(timeout=120) == 7  # the client's own exit code
    with open(os.path.join(job.log_dir, "stdout.log")) as f:
        words = f.read().split()
    with open(os.path.join(job.log_dir, "stderr.log")) as f:
        assert words[:3] == ["batch", "1", "procs"] and len(words) == 5, (words, f.read())
    assert gone_within([int(pid) for pid in words[3:]], 10) == []  # ended with their client
    # Here, outside that client, the cached BatchJob can run nothing: replaced.
    ProcessJob({"trainers": 1}).state().trainers.spawn_procs().stop()
    assert isinstance(job_load(".crown/job_state.pkl"), ProcessJob)
    job_load(".crown/job_state.pkl").kill()
    with pytest.raises(ValueError, match="client_script is empty"):
        ProcessJob({"trainers": 1}).apply(client_script="  ")
