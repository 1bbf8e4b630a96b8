"""The host-copy cache, as GPU and TPU keep it and as the detector models it on every backend.

On an accelerator a read fills a host copy that every later read of the same
array object returns without a transfer, and without the guard: ``_value``
stores it in ``_npy_value`` (a sharded array's gathered value, and a
single-device or fully-replicated one's whenever the read copied,
``did_copy``), and jaxlib keeps the copy that ``copy_to_host_async`` or a read
started in the array's ``PyHostValue`` (``CopyToHostAsync`` returns before the
guard once one exists; ``py_array.cc``). On CPU a single-device read is
zero-copy (``did_copy`` is False), nothing is cached, and every read of the
same array would look like a new fetch: a setup that reads the array it
returns would make the step's read of it fail, where JAX on a GPU allows it
(``test_disallow_ignores_arrays_on_cpu`` in JAX's tests/transfer_guard_test.py).

So `gate.witness.detector` models the accelerator's rule on every backend: the
first successful read of an array object, by any door it watches and in any
`detect_fetches` block (the runner watches a region's import, its setups,
warm-up, runs and what happens between them), is the transfer; from then on
that object counts as host-cached for the whole process (`host_copy_cached`),
and its reads are no transfer and are not recorded. As on an accelerator the
copy belongs to the object: a slice or a shard of it is another array. A
refused read caches nothing. Reads while no block is active (the timed runs,
the result checks) are not seen, so they are not modelled: on CPU an array
read only there would be counted at its next watched read, where a GPU would
serve it from the cache.

The helpers below feed the runner's fresh-inputs warnings.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from gate.jaxhooks.internals import host_value, jax_version
from gate.witness.fetches import DetectorUnavailable


class HostCopies:
    """Array objects whose value a watched read brought to the host, for the whole process."""

    def __init__(self) -> None:
        # id(array) -> the array, weakly: arrays are unhashable, ids are
        # reused once an array dies, and a dead array leaves by itself.
        self._arrays: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def holds(self, array: Any) -> bool:
        return self._arrays.get(id(array)) is array

    def add(self, array: Any) -> bool:
        """Count ``array`` as host-cached; True if it already was (another
        thread's read got there first)."""
        with self._lock:
            if self.holds(array):
                return True
            self._arrays[id(array)] = array
            return False


host_copies = HostCopies()


def host_copy_cached(tree: Any) -> bool:
    """True if any array leaf of ``tree`` already holds a host copy of its value,
    really (``_npy_value``) or as modelled (a watched read of it succeeded, see
    the module's docstring).

    Reading such an array moves nothing, so neither the guard nor the
    detector would see the step's fetch of it: setup must make fresh
    arrays. On CPU a single-device array never caches a real copy (it is
    zero-copy): only reads the detector watched make it count as cached.
    """
    import jax

    for leaf in jax.tree_util.tree_leaves(tree):
        # A typed PRNG key (jax.random.key, an NNX model's Rngs) keeps no host
        # copy of its own; its key data is another array, read only by choice.
        if isinstance(leaf, jax.Array) and not jax.numpy.issubdtype(
            leaf.dtype, jax.dtypes.prng_key
        ):
            try:
                cached = host_value(leaf)
            except AttributeError as exc:
                raise DetectorUnavailable(
                    f"jax {jax_version()}: arrays have no _npy_value; host copies cannot be seen"
                ) from exc
            if cached is not None or host_copies.holds(leaf):
                return True
    return False


def array_leaves(tree: Any) -> list[Any]:
    """The device arrays among ``tree``'s leaves, as they are now."""
    import jax

    return [leaf for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, jax.Array)]


def reused_leaves(prev_inputs: Any, new_inputs: Any) -> tuple[str, ...]:
    """Paths (``jax.tree_util.keystr``) of array leaves of ``new_inputs`` that are
    the very same objects as leaves of ``prev_inputs``."""
    import jax

    before = {id(leaf) for leaf in jax.tree_util.tree_leaves(prev_inputs)}
    flat, _ = jax.tree_util.tree_flatten_with_path(new_inputs)
    return tuple(
        jax.tree_util.keystr(path)
        for path, leaf in flat
        if isinstance(leaf, jax.Array) and id(leaf) in before
    )


def same_objects(prev_inputs: Any, new_inputs: Any) -> bool:
    """True if setup handed back any array object it returned for the last run.

    ``prev_inputs`` must still be alive (ids are compared). An array fetched
    in the last run would not be fetched again in this one, so the gate
    would miss the transfer.
    """
    return bool(reused_leaves(prev_inputs, new_inputs))
