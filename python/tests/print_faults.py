"""For the test programs that lose processes on purpose: a lost process is
a supervision event (as in Monarch), which these programs handle where
their calls raise, so their fault hook only prints it (the default would
end the job) for the test to match."""
import crown.actor


def on_fault(failure):
    print(f"fault hook: {failure.report()}", flush=True)


def install():
    crown.actor.unhandled_fault_hook = on_fault
