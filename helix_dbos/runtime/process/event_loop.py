"""One event loop for all helix database work and agent workflows.

SQLAlchemy's async pool must not be shared between event loops (waiters on a
contended pool hang). DBOS runs recovered async workflows on its target loop
(the loop it was launched in, or its background loop), so helix does all its
database work there too; callers on another loop hop over, keeping their
context variables (the DBOS workflow context among them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from helix_dbos.runtime.dbos import dbos_internals

T = TypeVar("T")


def target_loop() -> asyncio.AbstractEventLoop:
    loop = dbos_internals.target_loop()
    if loop is None:
        raise RuntimeError("DBOS is not launched: call helix.launch() (or DBOS.launch()) first")
    return loop


def _submit(
    loop: asyncio.AbstractEventLoop, factory: Callable[[], Coroutine[Any, Any, T]]
) -> concurrent.futures.Future[T]:
    ctx = contextvars.copy_context()
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def start() -> None:
        # Python 3.10's create_task has no `context=`; a task copies the context it is created in.
        task = ctx.run(loop.create_task, factory())

        def done(t: asyncio.Task[T]) -> None:
            if t.cancelled():
                future.cancel()
            elif (error := t.exception()) is not None:
                future.set_exception(error)
            else:
                future.set_result(t.result())

        task.add_done_callback(done)

    loop.call_soon_threadsafe(start)
    return future


async def on_target_loop(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Await `factory()` on the target loop, from whichever loop we are on."""
    loop = target_loop()
    if asyncio.get_running_loop() is loop:
        return await factory()
    return await asyncio.wrap_future(_submit(loop, factory))


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running the caller, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run on the target loop from synchronous code and wait for the result."""
    loop = target_loop()
    if running_loop() is loop:
        raise RuntimeError(
            "Synchronous helix calls cannot run on the event loop; use the async API"
        )
    return _submit(loop, factory).result()


S = TypeVar("S")
P = ParamSpec("P")


def sync_twin(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], T]:
    """The `_sync` twin of an async method: the same call, run on the target loop from
    synchronous code (`run_sync`), with the same parameters."""

    def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(lambda: method(self, *args, **kwargs))

    twin.__name__ = f"{method.__name__}_sync"
    twin.__qualname__ = f"{method.__qualname__}_sync"
    twin.__doc__ = f"`{method.__name__}()` for synchronous code (not on helix's event loop)."
    twin.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature follows it
    return twin
