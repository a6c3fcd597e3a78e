"""The fixture every in-process schedule test uses (imported into its module)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from dbos import DBOS


@pytest.fixture(autouse=True)
def firings_run_here(helix):
    """DBOS enqueues a firing on its application's latest version, the one registered
    last: another test's process on this database (an example on the default version)
    may have registered a newer one than this process's, whose workers would then be the
    only ones to take firings. This process's version is made the latest again."""
    with ThreadPoolExecutor(max_workers=1) as thread:  # DBOS refuses the sync call on a loop
        version = helix.application_version
        thread.submit(DBOS.set_latest_application_version, version).result()
