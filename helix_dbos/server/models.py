"""Moved to `helix_dbos.api.models`: this name stays one release for code that imported
its models, and warns once with the new one."""

from __future__ import annotations

import warnings
from typing import Any

from helix_dbos.api import models as _models


def __getattr__(name: str) -> Any:
    value = getattr(_models, name)
    warnings.warn(
        f"helix_dbos.server.models is deprecated: import {name} from helix_dbos.api.models",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
