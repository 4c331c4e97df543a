"""A second local user for the tests that play one (debug_squat.py,
debug_flood.py): made if missing, its processes ended and the user removed
afterwards. ctest runs these tests under RESOURCE_LOCK crown_test_other_user."""
import contextlib
import pwd
import subprocess
import time

OTHER_USER = "crown-test-other"


@contextlib.contextmanager
def other_user():
    made = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", OTHER_USER], check=True, timeout=30)
        made = True
    try:
        yield OTHER_USER
    finally:
        end_processes()
        if made:
            subprocess.run(["userdel", OTHER_USER], check=False, timeout=30)


def end_processes(timeout=10.0):
    """Kills every process of the other user and waits until none is left.
    Killing a `runuser` leaves the command it started running, orphaned:
    this is how a test ends what it ran as the other user."""
    deadline = time.monotonic() + timeout
    while True:
        subprocess.run(["pkill", "-KILL", "-u", OTHER_USER], check=False, timeout=30)
        left = subprocess.run(["pgrep", "-u", OTHER_USER], capture_output=True, timeout=30)
        if left.returncode != 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of {OTHER_USER} outlived SIGKILL: {left.stdout}")
        time.sleep(0.05)
