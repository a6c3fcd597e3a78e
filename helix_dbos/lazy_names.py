"""Names a package loads on first use (PEP 562): `helix_dbos`, `helix_dbos.memory` and
`helix_dbos.client` map each public name to the module that defines it, and import that
module only when the name is first asked for, so importing the package stays cheap.
Stdlib only."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module `__getattr__`: import the module that defines `name` on first use, and
    keep the name in the package's `namespace`."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
