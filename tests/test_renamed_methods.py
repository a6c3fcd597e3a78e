"""The previous release's names of `HelixDBOS` methods that moved to sub-APIs
(`helix.schedule` -> `helix.schedules.create`, `helix.fork` -> `helix.checkpoints.fork`,
...): each still reaches its replacement and warns once, naming it. One test per family."""

from __future__ import annotations

import warnings

import pytest

from helix_dbos.facade import renamed
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.facade.renamed import Renamed

SCHEDULES = {
    "schedule": "create",
    "list_schedules": "list",
    "get_schedule": "get",
    "pause_schedule": "pause",
    "resume_schedule": "resume",
    "delete_schedule": "delete",
    "backfill_schedule": "backfill",
    "trigger_schedule": "trigger",
    "get_schedule_firings": "firings",
}
CHECKPOINTS = {"get_checkpoints": "list", "get_checkpoint": "get", "fork": "fork", "prune": "prune"}


@pytest.fixture(autouse=True)
def first_uses():
    renamed._warned.clear()  # each test sees first uses


def _check_family(helix: HelixDBOS, family: dict[str, str], sub: str) -> None:
    sub_api = getattr(helix, sub)
    for old, new in family.items():
        for suffix in ("", "_sync"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                first = getattr(helix, old + suffix)
                second = getattr(helix, old + suffix)
            assert first == getattr(sub_api, new + suffix) == second, old + suffix
            assert [str(w.message) for w in caught] == [
                f"HelixDBOS.{old}{suffix}() is deprecated: use helix.{sub}.{new}{suffix}() "
                "(the old name goes in the next release)"
            ], old + suffix
            assert all(w.category is DeprecationWarning for w in caught)
            assert caught[0].filename == __file__  # points at the caller


def test_the_old_schedule_names_reach_helix_schedules_and_warn_once(helix: HelixDBOS):
    _check_family(helix, SCHEDULES, "schedules")


def test_the_old_time_travel_names_reach_helix_checkpoints_and_warn_once(helix: HelixDBOS):
    _check_family(helix, CHECKPOINTS, "checkpoints")


def test_every_renamed_attribute_of_the_facade_is_in_a_family():
    """A name added to the class without a test here fails: each alias family has one."""
    declared = {name for name, value in vars(HelixDBOS).items() if isinstance(value, Renamed)}
    families = {*SCHEDULES, *CHECKPOINTS}
    assert declared == families | {f"{name}_sync" for name in families}
