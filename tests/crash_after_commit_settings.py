"""Settings of a kill test's server (tests/runs/test_live_crash_after_commit.py): the host's own,
plus the test-only seam that makes the process exit the moment a run's transaction commits, before
it answers (apps.runs.services._crash_after_commit_seam). Never used outside that test."""

from openwop_host.settings import *  # noqa: F403

OPENWOP_TEST_CRASH_AFTER_COMMIT = True
