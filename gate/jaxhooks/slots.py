"""Switching off a type's buffer export by swapping its ``tp_as_buffer`` slot, with ctypes.

jaxlib exports a zero-copy buffer for a single-device CPU array
(``PyArray_bf_getbuffer`` in jaxlib's ``py_array.cc``), and NumPy tries that
before ``__array__``, so ``np.asarray(x)`` on CPU never reads ``_value``. While
the slot points at a copy of the procs without ``bf_getbuffer``, NumPy falls
back to ``__array__``, with the same zero-copy result; ``memoryview(x)`` and
``bytes(x)`` raise ``TypeError`` meanwhile.

Where the slot cannot be reached safely (not CPython, a free-threaded or
``Py_TRACE_REFS`` build, an unexpected type layout) `buffer_slot` says why
instead, and nothing is written.
"""

from __future__ import annotations

import ctypes
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class _BufferProcs(ctypes.Structure):
    # CPython's PyBufferProcs: two function pointers.
    _fields_ = (("bf_getbuffer", ctypes.c_void_p), ("bf_releasebuffer", ctypes.c_void_p))


_WORD = ctypes.sizeof(ctypes.c_void_p)
# Word offsets in CPython's PyTypeObject (Include/cpython/object.h, 3.10 to
# 3.14, default builds): three words of PyObject_VAR_HEAD, then tp_name,
# tp_basicsize, tp_itemsize, tp_dealloc, tp_vectorcall_offset, tp_getattr,
# tp_setattr, tp_as_async, tp_repr, tp_as_number, tp_as_sequence,
# tp_as_mapping, tp_hash, tp_call, tp_str, tp_getattro, tp_setattro,
# tp_as_buffer. Checked against known types before anything is written.
_TP_NAME, _TP_BASICSIZE, _TP_ITEMSIZE, _TP_AS_BUFFER = 3, 4, 5, 20


@dataclass(frozen=True)
class BufferSlot:
    """The ``tp_as_buffer`` word of one type, found and checked by `buffer_slot`."""

    type_name: str
    word: ctypes.c_void_p


def _type_word(tp: type, index: int) -> ctypes.c_void_p:
    return ctypes.c_void_p.from_address(id(tp) + index * _WORD)


def _layout_matches(tp: type) -> bool:
    name = ctypes.c_char_p.from_address(id(tp) + _TP_NAME * _WORD).value or b""
    basicsize = ctypes.c_ssize_t.from_address(id(tp) + _TP_BASICSIZE * _WORD).value
    itemsize = ctypes.c_ssize_t.from_address(id(tp) + _TP_ITEMSIZE * _WORD).value
    return (
        name.decode(errors="replace").rpartition(".")[2] == tp.__name__
        and basicsize == tp.__basicsize__
        and itemsize == tp.__itemsize__
    )


def buffer_slot(tp: type) -> BufferSlot | str:
    """``tp``'s ``tp_as_buffer`` slot, or why it cannot be reached safely."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "free-threaded CPython has another type layout"
    if hasattr(sys, "getobjects"):
        return "a Py_TRACE_REFS build of CPython has another type layout"
    for known in (int, bytearray, tp):
        if not _layout_matches(known):
            return f"{known.__name__} does not have the expected PyTypeObject layout"
    # int exports no buffer, bytearray does: the offset points at tp_as_buffer.
    if _type_word(int, _TP_AS_BUFFER).value or not _type_word(bytearray, _TP_AS_BUFFER).value:
        return "tp_as_buffer is not where expected"
    slot = _type_word(tp, _TP_AS_BUFFER)
    if not slot.value or not _BufferProcs.from_address(slot.value).bf_getbuffer:
        return f"{tp.__name__} exports no buffer"
    return BufferSlot(tp.__name__, slot)


# The replacement procs must outlive any reader; they are a few bytes.
_kept_procs: list[_BufferProcs] = []


@contextmanager
def buffer_export_off(slot: BufferSlot) -> Iterator[None]:
    """Point ``slot`` at procs without ``bf_getbuffer`` for the block.

    ``bf_releasebuffer`` stays, so a view exported before the block is still
    released properly during it. The GIL makes the pointer swap atomic for
    other threads. On exit the slot must still hold the gate's procs: if
    something else swapped it meanwhile, theirs is left in place and
    AssertionError says so.
    """
    saved = slot.word.value
    assert saved is not None
    procs = _BufferProcs(None, _BufferProcs.from_address(saved).bf_releasebuffer)
    _kept_procs.append(procs)
    ours = ctypes.addressof(procs)
    slot.word.value = ours
    try:
        yield
    finally:
        if slot.word.value != ours:
            raise AssertionError(
                f"{slot.type_name}'s tp_as_buffer slot was swapped by someone else while the "
                "gate had switched its buffer export off; left as it is"
            )
        slot.word.value = saved
