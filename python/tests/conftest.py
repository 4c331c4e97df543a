"""Runs pytest as a crown job: every rank collects the tests (importing the
test modules, so their actor classes exist on every rank); then rank 0 goes
on to run them as the controller while the other ranks serve its actors
until the session ends."""

import crown


def pytest_collection_finish(session):
    crown.init()  # workers serve here and exit when the controller is done


_status = {"code": 0}


def pytest_sessionfinish(session, exitstatus):
    _status["code"] = 0 if exitstatus == 0 else 1


def pytest_unconfigure(config):
    # After the summary is printed: with a rank lost, shutdown exits at once.
    crown.shutdown(_status["code"])
