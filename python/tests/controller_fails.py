"""An exception escaping main: printed once, and the job exits non-zero."""
import crown


def main():
    raise RuntimeError("the training loop diverged")


crown.run(main)
