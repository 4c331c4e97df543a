"""A second local user for the tests that play one (debug_squat.py,
debug_flood.py): made if missing, its processes ended and the user removed
afterwards. ctest runs these tests under RESOURCE_LOCK crown_test_other_user."""
import contextlib
import pwd
import subprocess

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
        subprocess.run(["pkill", "-KILL", "-u", OTHER_USER], check=False, timeout=30)
        if made:
            subprocess.run(["userdel", OTHER_USER], check=False, timeout=30)
