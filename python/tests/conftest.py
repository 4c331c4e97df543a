"""Runs pytest as a crown job: every rank collects the tests (importing the
test modules, so their actor classes exist on every rank); then rank 0 goes
on to run them as the controller while the other ranks serve its actors
until the session ends.

Test modules that need no runtime (pure Python, one process: the tensor
recording tests) say so with `CROWN_RUNTIME = False`; a session of only such
modules never bootstraps. When the crown package on the path has no compiled
extension (a source tree, a worktree without a build), a copy of a built one
is put next to it first: $CROWN_EXTENSION, else a build*/python/crown/ of
this checkout or of the main worktree it belongs to. The copy is git-ignored.
"""

import glob
import importlib.util
import os
import queue
import shutil
import subprocess
import sys
import time

import pytest


def _provide_extension() -> None:
    spec = importlib.util.find_spec("crown")
    if spec is None or not spec.submodule_search_locations:
        return
    package = list(spec.submodule_search_locations)[0]
    if glob.glob(os.path.join(package, "_crown*.so")):
        return
    found = [os.environ["CROWN_EXTENSION"]] if os.environ.get("CROWN_EXTENSION") else []
    repo = os.path.dirname(os.path.dirname(os.path.abspath(package)))
    roots = [repo]
    try:
        common = subprocess.run(["git", "-C", repo, "rev-parse", "--path-format=absolute",
                                 "--git-common-dir"], capture_output=True, text=True,
                                check=True).stdout.strip()
        roots.append(os.path.dirname(common))
    except (OSError, subprocess.CalledProcessError):
        pass
    for root in roots:
        found += sorted(glob.glob(os.path.join(root, "build*", "python", "crown", "_crown*.so")))
    if found:
        shutil.copy2(found[0], package)


_provide_extension()

import crown  # noqa: E402


class Faults(queue.Queue):
    """What reached the controller's crown.actor.unhandled_fault_hook."""

    def next(self, timeout: float = 20):
        """The next fault; AssertionError when none comes within timeout."""
        try:
            return self.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no failure reached the controller within {timeout} s") from None

    def of(self, mesh_name: str, timeout: float = 20):
        """The next fault of the mesh called mesh_name, passing over others
        (a lost process fails its member of every mesh)."""
        deadline = time.monotonic() + timeout
        while True:
            failure = self.next(max(deadline - time.monotonic(), 0.01))
            if failure.mesh_name == mesh_name:
                return failure

    def none_within(self, timeout: float) -> bool:
        try:
            self.get(timeout=timeout)
        except queue.Empty:
            return True
        return False


@pytest.fixture
def faults(monkeypatch):
    """The controller's fault hook recording into a Faults queue, instead of
    ending the job (its default), for the test's length."""
    recorded = Faults()
    monkeypatch.setattr(crown.actor, "unhandled_fault_hook", recorded.put)
    return recorded


def _stray_fault(failure) -> None:
    print(f"crown-test: a fault after its test ended: {failure.report()}", file=sys.stderr,
          flush=True)


@pytest.fixture(autouse=True, scope="session")
def _faults_between_tests():
    """A lost process fails its member of every mesh still up, and those
    reports may come after the test that killed it has ended: between tests
    they are printed, not the end of the job (the default hook's; tested by
    unhandled_failure.py). Tests that look at faults use `faults`. Kept
    until shutdown: the reports of a process lost by the session's last test
    may come after the session's fixtures are gone."""
    crown.actor.unhandled_fault_hook = _stray_fault
    yield


def _needs_runtime(session) -> bool:
    return any(getattr(item.module, "CROWN_RUNTIME", True) for item in session.items)


def pytest_collection_finish(session):
    if _needs_runtime(session):
        crown.init()  # workers serve here and exit when the controller is done


_status = {"code": 0}


def pytest_sessionfinish(session, exitstatus):
    _status["code"] = 0 if exitstatus == 0 else 1


def pytest_unconfigure(config):
    # After the summary is printed: with a rank lost, shutdown exits at once.
    if crown._crown.initialised():
        crown.shutdown(_status["code"])
