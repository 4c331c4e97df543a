"""The persistent console in real terminals (issue 15): `crownrun --serve -n 4`
keeps a mesh alive; `crown console` in tmux defines an actor class, spawns
it, calls it, detaches with Ctrl-D; a second console finds the same actors
(their state went on) and is interrupted out of an endless loop with
Ctrl-C; a shell in tmux runs `crown console --run` on a script, edits it and
reruns it (the new code runs, no relaunch, the script's meshes stopped
between runs), then one that raises (exit 1, its traceback) and one that
calls crown.shutdown (refused: the job lives on); `crown stop` ends the job,
whose crownrun exits 0 and whose sockets are gone.
Run by ctest with PYTHONPATH set; argv[1] is launch/crownrun."""
import os
import subprocess
import sys
import tempfile
import time

from terminal import BackgroundJob, Terminal

PYTHON = sys.executable
CROWNRUN = sys.argv[1]


def check(condition, what):
    if not condition:
        raise AssertionError(what)


SCRIPT = """\
import sys, crown
from crown.actor import Actor, endpoint

class Square(Actor):
    @endpoint
    def of(self, x):
        return x * x {edit}

def main():
    squares = crown.world().spawn("squares", Square)
    print("script says", sorted(squares.of.call(int(sys.argv[1])).get().values()))
crown.run(main)
"""


def main():
    debug_dir = tempfile.mkdtemp(prefix="crown-console-test-")
    os.chmod(debug_dir, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=debug_dir, CROWN_LOG_WINDOW="0")
    refused = subprocess.run([CROWNRUN, "-n", "2", "--serve", "prog.py"], env=env,
                             capture_output=True, text=True, timeout=30)
    check(refused.returncode == 2 and "runs no program of its own" in refused.stderr,
          f"crownrun --serve with a program: {refused.returncode} {refused.stderr}")

    job = BackgroundJob([CROWNRUN, "-n", "4", "--serve"], env)
    terminals = []
    try:
        job.wait_for("crown: serving 4 ranks")
        console = Terminal([PYTHON, "-m", "crown", "console"], env)
        terminals.append(console)
        console.expect("crown console: 4 ranks", ">>> ")
        console.type("from crown.actor import Actor, endpoint")
        console.type("class Counter(Actor):")
        console.type("    def __init__(self): self.n = 0")
        console.type("    @endpoint")
        console.type("    def incr(self): self.n += 1; return self.n")
        console.expect("... ")
        console.type("")
        console.type("counters = procs.spawn('counters', Counter)")
        console.type("print('counts', sorted(counters.incr.call().get().values()))")
        console.expect("counts [1, 1, 1, 1]", ">>> ")
        console.keys("C-d")
        console.expect("crown: detached")
        print("console: spawned and called an actor mesh, detached", flush=True)

        again = Terminal([PYTHON, "-m", "crown", "console"], env)
        terminals.append(again)
        again.expect(">>> ")
        again.type("print('counts', sorted(counters.incr.call().get().values()))")
        again.expect("counts [2, 2, 2, 2]", ">>> ")
        print("console: re-attached, the same actors live on", flush=True)
        again.type("while True: pass")
        time.sleep(0.5)
        again.keys("C-c")
        again.expect("KeyboardInterrupt", ">>> ")
        again.type("print('after', 6 * 7)")
        again.expect("after 42", ">>> ")
        print("console: Ctrl-C interrupted a loop, the console went on", flush=True)
        again.keys("C-d")

        script = os.path.join(debug_dir, "square.py")
        with open(script, "w") as f:
            f.write(SCRIPT.format(edit=""))
        shell = Terminal(["bash", "--norc", "--noprofile"], env)
        terminals.append(shell)
        run = f"{PYTHON} -m crown console --run {script}"
        shell.type(f"{run} 3; echo rc=$?")
        shell.expect("script says [9, 9, 9, 9]", "rc=0")
        with open(script, "w") as f:
            f.write(SCRIPT.format(edit="+ 1"))
        shell.type(f"{run} 3; echo rc=$?")
        shell.expect("script says [10, 10, 10, 10]", "rc=0")
        print("console --run: a script ran, was edited and reran in the same job", flush=True)

        with open(script, "w") as f:
            f.write(SCRIPT.format(edit="+ undefined_name"))
        shell.type(f"{run} 3; echo rc=$?")
        shell.expect("Traceback", "NameError: name 'undefined_name' is not defined", "rc=1")
        with open(script, "w") as f:
            f.write("import crown\ncrown.shutdown()\n")
        shell.type(f"{run}; echo rc=$?")
        shell.expect("this job is served (crownrun --serve)", "rc=1")
        shell.type(f"{PYTHON} -m crown console --run /nonexistent.py; echo rc=$?")
        shell.expect("cannot read the script /nonexistent.py", "rc=1")
        print("console --run: a failing script, a refused shutdown and a missing file said so",
              flush=True)

        again = Terminal([PYTHON, "-m", "crown", "console"], env)
        terminals.append(again)
        again.expect(">>> ")
        # The scripts' meshes were stopped; the console's own one lives on.
        again.type("print('still', sorted(counters.incr.call().get().values()))")
        again.expect("still [3, 3, 3, 3]", ">>> ")
        again.keys("C-d")

        stopped = subprocess.run([PYTHON, "-m", "crown", "stop"], env=env, capture_output=True,
                                 text=True, timeout=90)
        check(stopped.returncode == 0, f"crown stop: {stopped.returncode} {stopped.stderr}")
        check(job.process.wait(timeout=60) == 0, "the served job's crownrun did not exit 0")
        left = [name for name in os.listdir(debug_dir) if name.startswith("job-")]
        check(left == [], f"the job left {left} behind")
        print("console_cli: PASS", flush=True)
    finally:
        for terminal in terminals:
            terminal.close()
        job.stop()


if __name__ == "__main__":
    main()
