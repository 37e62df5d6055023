"""A restricted unpickler for the legacy Python 2 pickles: only the globals these files need can load, and
every value they build is checked before NumPy or the converters see it.

Nothing outside the allow-list is ever imported or called, so a pickle whose REDUCE would run code is
refused before it runs. Allowed names are not enough on their own: a forged ``numpy.dtype`` state can claim an
object field over raw bytes, and NumPy then dereferences pointers taken from the file (issue 10). So:

* ``numpy.dtype(spec)`` gives a fresh plain dtype; its BUILD state must equal the state NumPy itself gives
  the dtype it describes (flags included), and NumPy's own state is what gets applied. Structured dtypes may
  not hold objects and never change size; subarray dtypes are refused.
* ``_reconstruct`` gives an empty array; its BUILD state must name a dtype built earlier and carry exactly
  the bytes its shape needs. Object arrays exist only where the caller allows them (the skip-thoughts word
  tables), and then hold only finished plain arrays.
* BUILD of anything else is refused; dict keys and the result are bounded in nesting depth and may not
  refer to themselves, so nothing later recurses without bound (a deep tuple key crashes CPython's hash).
* The object graph is bounded (issue 30): objects built, containers built, references to an already built
  container (memo gets, DUP), and the size of the result *as a tree*. The memo lets a 1 KB file describe
  a chain of 60 dicts each holding the previous one twice, 2**60 paths: anything that walks it (``repr``,
  ``str``, ``==``, a hash, JSON) never ends. A tuple dict key is bounded far tighter (hashing it walks
  every path). Values from a pickle are only ever described through ``brief`` (``reprlib``, bounded).

This is the pure-Python unpickler: its dispatch table is the only place BUILD and SETITEM can be checked.
Python 2 ``str`` values come back through ``encoding='latin1'``; ``py2_text`` recovers the UTF-8 text.
"""

from __future__ import annotations

import collections
import functools
import gc
import io
import math
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, ClassVar, cast

import numpy as np

from lnserve.errors import brief, clip, shown

from .errors import ConversionError, CorruptFileError, UnsafePickleError

_NP_RECONSTRUCT = np._core.multiarray._reconstruct  # type: ignore[attr-defined]
_RECONSTRUCT_NAMES = (("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"))
_ALLOWED = frozenset(
    {("collections", "OrderedDict"), ("numpy", "ndarray"), ("numpy", "dtype"), *_RECONSTRUCT_NAMES}
)

MAX_DEPTH = 64  # legacy pickles nest 3 deep; CPython's C recursion (hash, repr, free) is safe far beyond this
# A vocab.py worddict pickles one [word, index] list per word (3 objects): these admit 2 million words per
# pickle (BookCorpus has about 1.3 million distinct tokens) and refuse a flood before it costs a gigabyte.
MAX_CONTAINERS = 1 << 21  # lists, tuples, dicts, arrays and dtypes built
MAX_OBJECTS = 1 << 24  # every value pushed (strings, numbers, containers)
MAX_SHARED = 1 << 16  # references to a container built earlier (memo gets, DUP); legacy files have none
MAX_TREE = MAX_OBJECTS  # the result's size walked as a tree (shared parts counted at every reference)
MAX_KEY_TREE = 1 << 10  # the same for one tuple dict key (legacy keys are strings)
_MAX_STRUCT_NESTING = 8  # structured dtypes inside structured dtypes
_MAX_NDIM = 32
_ALIGNED_STRUCT = 0x80  # NPY_ALIGNED_STRUCT in a dtype's flags
_PLAIN_KINDS = "biufcSUV"  # bool, integers, floats, complex, bytes, str, void: no pointers inside
_SCALARS = (str, bytes, int, float, bool, type(None))
_CONTAINERS = (list, tuple, dict, collections.OrderedDict)
_GRAPH_NODES = frozenset(_CONTAINERS)  # what a shared reference can multiply (arrays are leaves)
_DTYPE, _ARRAY = "dtype", "array"
_BUILDS_CONTAINER = frozenset(
    op[0]
    for op in (pickle.EMPTY_LIST, pickle.LIST, pickle.EMPTY_DICT, pickle.DICT, pickle.EMPTY_TUPLE,
               pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3, pickle.REDUCE, pickle.NEWOBJ,
               pickle.NEWOBJ_EX, pickle.OBJ, pickle.INST)
)  # fmt: skip
_REFERS = frozenset(op[0] for op in (pickle.GET, pickle.BINGET, pickle.LONG_BINGET, pickle.DUP))
_PUSHES_NOTHING_NEW = _REFERS | frozenset(
    op[0]
    for op in (pickle.MARK, pickle.STOP, pickle.POP, pickle.POP_MARK, pickle.PUT, pickle.BINPUT,
               pickle.LONG_BINPUT, pickle.MEMOIZE, pickle.APPEND, pickle.APPENDS, pickle.SETITEM,
               pickle.SETITEMS, pickle.BUILD, pickle.PROTO, pickle.FRAME, pickle.ADDITEMS)
)  # fmt: skip


class _Refused(Exception):
    """Raised inside the unpickler; ``safe_load`` re-raises it as ``error`` with the file's name."""

    def __init__(self, error: type[ConversionError], message: str) -> None:
        super().__init__(message)
        self.error = error


def _unsafe(message: str) -> _Refused:
    return _Refused(UnsafePickleError, message)


def _corrupt(message: str) -> _Refused:
    return _Refused(CorruptFileError, message)


class _NdarrayToken:
    """What the global ``numpy.ndarray`` unpickles to: an argument for ``_reconstruct``, never callable."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "numpy.ndarray"


NDARRAY = _NdarrayToken()


def _short(value: Any, limit: int = 120) -> str:
    return brief(value, limit)


class RestrictedUnpickler(pickle._Unpickler):
    """Unpickler that answers ``find_class`` only from the allow-list and checks what those globals build.

    ``overrides`` may swap the object behind a ``_reconstruct`` name (the streaming table reader returns
    placeholders); it is still called only with NumPy's own arguments, and BUILD still checks the state it
    receives. ``object_arrays`` admits object dtypes (the skip-thoughts word tables only).
    """

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

    def __init__(
        self,
        stream: IO[bytes],
        *,
        overrides: Mapping[tuple[str, str], Any] | None = None,
        object_arrays: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(stream, **kw)
        self._stream = stream
        unknown = set(overrides or ()) - _ALLOWED
        if unknown:
            raise ValueError(f"overrides must name allowed globals, got {sorted(unknown)}")
        if set(overrides or ()) - set(_RECONSTRUCT_NAMES):
            raise ValueError("only the _reconstruct globals can be overridden")
        self._object_arrays = object_arrays
        self._globals: dict[tuple[str, str], Any] = {
            ("collections", "OrderedDict"): self._ordered_dict,
            ("numpy", "ndarray"): NDARRAY,
            ("numpy", "dtype"): self._new_dtype,
        }
        for name in _RECONSTRUCT_NAMES:
            make = (overrides or {}).get(name, _NP_RECONSTRUCT)
            self._globals[name] = functools.partial(self._reconstruct, make)
        self._pending: dict[int, tuple[str, Any]] = {}  # objects awaiting their one BUILD (kept alive)
        self._dtypes: dict[int, tuple[np.dtype, int]] = {}  # built dtypes -> structured nesting depth
        self._key_heights: dict[int, tuple[Any, int, int]] = {}  # tuple dict keys already checked

    def load(self) -> Any:
        """pickle's own loop, reading the stream directly (frames only batch reads; see ``load_frame``)."""
        self.read, self.readline = self._stream.read, self._stream.readline
        self.readinto = getattr(self._stream, "readinto", None)  # only BYTEARRAY8 (protocol 5) uses it
        self.metastack: list[list[Any]] = []
        self.stack: list[Any] = []
        self.proto = 0
        self.append = self.stack.append
        read, dispatch = self.read, self.dispatch
        objects = containers = shared = 0
        try:
            while True:
                key = read(1)
                if not key:
                    raise EOFError
                code = key[0]
                dispatch[code](self)
                if code in _PUSHES_NOTHING_NEW:
                    if code in _REFERS and type(self.stack[-1]) in _GRAPH_NODES:
                        shared += 1
                        if shared > MAX_SHARED:
                            raise _corrupt(
                                f"more than {MAX_SHARED:,} references to shared containers (legacy pickles "
                                "share none; a shared chain can stand for an object graph too large to walk)"
                            )
                    continue
                objects += 1
                if code in _BUILDS_CONTAINER:
                    containers += 1
                if objects > MAX_OBJECTS or containers > MAX_CONTAINERS:
                    raise _corrupt(
                        f"builds more than {MAX_OBJECTS:,} objects or {MAX_CONTAINERS:,} containers "
                        "(more than any legacy checkpoint holds)"
                    )
        except pickle._Stop as stop:  # type: ignore[attr-defined]
            return stop.value

    def load_frame(self) -> None:
        self.read(8)  # a protocol-4 frame's length: the opcodes it holds simply follow in the stream

    dispatch[pickle.FRAME[0]] = load_frame

    # -- globals ------------------------------------------------------------------------------------
    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._globals[(module, name)]
        except KeyError:
            raise _unsafe(
                f"refusing to unpickle global '{shown(module)}.{shown(name)}': "
                "not on the allow-list of legacy checkpoint types"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise _unsafe("refusing to unpickle a persistent id")

    def _ordered_dict(self, items: Any = ()) -> collections.OrderedDict[Any, Any]:
        if type(items) not in (list, tuple):
            raise _corrupt(f"OrderedDict built from {type(items).__name__}, not a list of pairs")
        for item in items:
            if type(item) not in (list, tuple) or len(item) != 2:
                raise _corrupt("OrderedDict built from something other than (key, value) pairs")
            self._check_key(item[0])
        return collections.OrderedDict(items)

    def _new_dtype(self, spec: Any, align: Any = False, copy: Any = True) -> np.dtype:
        """``numpy.dtype(spec)`` as a fresh object: a BUILD may change it, never NumPy's shared ones."""
        if type(spec) is not str or len(spec) > 32:
            raise _unsafe(f"refusing numpy.dtype({_short(spec, 60)}): expected a short type string")
        if type(align) not in (bool, int) or type(copy) not in (bool, int):
            raise _corrupt(f"unexpected numpy.dtype arguments {_short((align, copy))}")
        try:
            dt = np.dtype(spec, copy=True)
        except (TypeError, ValueError):
            raise _corrupt(f"unknown dtype {shown(spec)!r}") from None
        plain = dt.kind in _PLAIN_KINDS and dt.names is None and dt.subdtype is None and not dt.metadata
        if not (plain or (dt.kind == "O" and self._object_arrays)) or dt.itemsize == 0:
            raise _unsafe(
                f"refusing dtype {shown(spec)!r}: only plain numeric, bool and string dtypes"
                + (" and the word tables' object arrays" if self._object_arrays else "")
                + " are admitted"
            )
        self._pending[id(dt)] = (_DTYPE, dt)
        return dt

    def _reconstruct(self, make: Callable[..., Any], cls: Any, shape: Any, typecode: Any) -> Any:
        """``_reconstruct(ndarray, (0,), 'b')``, the only call NumPy pickles make: an empty array to BUILD."""
        if cls is not NDARRAY or type(shape) is not tuple or shape != (0,) or typecode not in ("b", b"b"):
            raise _unsafe(
                f"refusing _reconstruct{_short((cls, shape, typecode))}: not how NumPy pickles arrays"
            )
        obj = make(np.ndarray, (0,), b"b")
        self._pending[id(obj)] = (_ARRAY, obj)
        return obj

    # -- BUILD --------------------------------------------------------------------------------------
    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        pending = self._pending.pop(id(inst), None)
        if pending is None or pending[1] is not inst:
            raise _unsafe(f"refusing to set the state of a {shown(type(inst).__name__)} object")
        if pending[0] == _DTYPE:
            self._build_dtype(inst, state)
        else:
            inst.__setstate__(self._array_state(state, check_items=type(inst) is np.ndarray))

    dispatch[pickle.BUILD[0]] = load_build

    def _build_dtype(self, dt: np.dtype, state: Any) -> None:
        if type(state) is not tuple or len(state) != 8 or state[0] != 3:
            raise _unsafe(f"refusing dtype state {_short(state)}: not a NumPy dtype state")
        _, order, subarray, names, fields, elsize, _, flags = state
        if subarray is not None:
            raise _unsafe(f"refusing a subarray dtype (state {_short(state)})")
        nesting = 0
        if names is None and fields is None and order in ("<", ">", "|", "="):
            want = dt if order in "|=" else dt.newbyteorder(order)
        elif dt.kind == "V" and type(names) is tuple and type(fields) is dict and type(flags) is int:
            want, nesting = self._structured(names, fields, elsize, flags)
            if want.hasobject or want.itemsize != dt.itemsize:
                raise _unsafe(f"refusing structured dtype {_short(want)}: object fields or a size change")
        else:
            raise _unsafe(f"refusing dtype state {_short(state)}")
        expected = want.__reduce__()[2]
        if expected != state:
            raise _unsafe(
                f"refusing a forged dtype state {_short(state)}: "
                f"NumPy gives {want.str} the state {_short(expected)}"
            )
        dt.__setstate__(expected)  # type: ignore[attr-defined]  # NumPy's own state for this dtype, nothing taken from the file
        self._dtypes[id(dt)] = (dt, nesting)

    def _structured(
        self, names: tuple[Any, ...], fields: dict[Any, Any], elsize: Any, flags: int
    ) -> tuple[np.dtype, int]:
        formats, offsets, titles, nesting = [], [], [], 0
        for name in names:
            entry = fields.get(name) if type(name) is str else None
            if type(entry) is not tuple or len(entry) not in (2, 3) or type(entry[1]) is not int:
                raise _unsafe(f"refusing structured dtype field {_short(name)}: {_short(entry)}")
            built = self._dtypes.get(id(entry[0]))
            if built is None or built[0] is not entry[0]:
                raise _unsafe(
                    f"refusing structured dtype field {_short(name)}: its dtype was not built first"
                )
            nesting = max(nesting, built[1] + 1)
            formats.append(entry[0])
            offsets.append(entry[1])
            titles.append(entry[2] if len(entry) == 3 else None)
        if nesting > _MAX_STRUCT_NESTING:
            raise _unsafe(f"refusing structured dtypes nested {nesting} deep")
        spec = {
            "names": list(names),
            "formats": formats,
            "offsets": offsets,
            "titles": titles,
            "itemsize": elsize,
        }
        try:
            return np.dtype(cast(Any, spec), align=bool(flags & _ALIGNED_STRUCT)), nesting
        except (TypeError, ValueError) as exc:
            raise _unsafe(f"refusing structured dtype state ({shown(str(exc))})") from None

    def _array_state(
        self, state: Any, *, check_items: bool
    ) -> tuple[int, tuple[int, ...], np.dtype, bool, Any]:
        """A checked ``ndarray.__setstate__`` state: shape, a dtype built earlier, data of the exact size."""
        if type(state) is not tuple or len(state) not in (4, 5) or (len(state) == 5 and state[0] != 1):
            raise _corrupt(f"unexpected ndarray state {_short(state)}")
        shape, dt, fortran, data = state[-4:]
        if type(shape) is not tuple or len(shape) > _MAX_NDIM or fortran not in (0, 1):
            raise _corrupt(f"unexpected ndarray shape {_short(shape)} / order {_short(fortran)}")
        for size in shape:
            if type(size) is not int or size < 0:
                raise _corrupt(f"unexpected ndarray shape {_short(shape)}")
        built = self._dtypes.get(id(dt))
        if built is None or built[0] is not dt:
            raise _unsafe(f"refusing an array whose dtype {_short(dt, 60)} was not built first")
        count = math.prod(shape)
        if dt.hasobject:
            if not self._object_arrays:
                raise _unsafe("refusing an object array outside the word tables")
            if type(data) is not list or len(data) != count:
                n = len(data) if type(data) is list else type(data).__name__
                raise _corrupt(f"object array of shape {shape} holds {n} items")
            if check_items and not all(self._finished_plain(x) for x in data):
                raise _unsafe("refusing an object array whose items are not finished plain arrays")
        else:
            if type(data) is str:
                try:
                    data = data.encode("latin1")  # a Python 2 str
                except UnicodeEncodeError:
                    raise _corrupt("array data is text, not bytes") from None
            if type(data) is not bytes:
                raise _corrupt(f"array data is {type(data).__name__}, not bytes")
            if len(data) != count * dt.itemsize:
                raise _corrupt(
                    f"array data is {len(data)} bytes; shape {shape} of {dt.str} needs {count * dt.itemsize}"
                )
        return (1, shape, dt, bool(fortran), data)

    def _finished_plain(self, item: Any) -> bool:
        return type(item) is np.ndarray and not item.dtype.hasobject and id(item) not in self._pending

    # -- hashing: keys are checked before a dict or OrderedDict hashes them ---------------------------
    def _check_key(self, key: Any) -> None:
        if type(key) in _SCALARS:
            return
        if type(key) is not tuple:
            raise _corrupt(f"unexpected dict key of type {shown(type(key).__name__)}")
        _height(key, _tuple_items, self._key_heights, what="a dict key", max_tree=MAX_KEY_TREE)

    def _set_items(self, target: Any, items: list[Any]) -> None:
        if type(target) not in (dict, collections.OrderedDict) or len(items) % 2:
            raise _corrupt(f"SETITEM on a {shown(type(target).__name__)} with {len(items)} keys and values")
        for i in range(0, len(items), 2):
            self._check_key(items[i])
            target[items[i]] = items[i + 1]

    def pop_mark(self) -> list[Any]:
        """The items above the last MARK (pickle's own, which typeshed does not declare)."""
        items = self.stack
        self.stack = self.metastack.pop()
        self.append = self.stack.append
        return items

    def load_setitem(self) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self._set_items(self.stack[-1], [key, value])

    def load_setitems(self) -> None:
        items = self.pop_mark()
        self._set_items(self.stack[-1], items)

    def load_dict(self) -> None:
        items = self.pop_mark()
        target: dict[Any, Any] = {}
        self._set_items(target, items)
        self.append(target)

    def load_set(self) -> None:
        raise _corrupt("sets are not part of the legacy formats")

    dispatch[pickle.SETITEM[0]] = load_setitem
    dispatch[pickle.SETITEMS[0]] = load_setitems
    dispatch[pickle.DICT[0]] = load_dict
    dispatch.update(dict.fromkeys((pickle.EMPTY_SET[0], pickle.ADDITEMS[0], pickle.FROZENSET[0]), load_set))

    # -- the result ---------------------------------------------------------------------------------
    def check_result(self, obj: Any, leaves: tuple[type, ...] = ()) -> None:
        """Only plain containers, scalars and finished arrays, at most ``MAX_DEPTH`` deep, no cycles."""

        def children(node: Any) -> Iterator[Any] | None:
            kind = type(node)
            if kind in _SCALARS or kind in leaves:
                return None
            if kind is np.ndarray:
                if id(node) in self._pending:
                    raise _corrupt("an array was never given its data")
                return None
            if kind in (dict, collections.OrderedDict):
                return iter(node.values())
            if kind in (list, tuple):
                return iter(node)
            raise _corrupt(f"unexpected value of type {shown(kind.__name__)}")

        _height(obj, children, {}, what="the pickle", max_tree=MAX_TREE)


def _tuple_items(node: Any) -> Iterator[Any] | None:
    if type(node) is tuple:
        return iter(node)
    if type(node) in _SCALARS:
        return None
    raise _corrupt(f"unexpected dict key part of type {shown(type(node).__name__)}")


def _height(
    root: Any,
    children: Callable[[Any], Iterator[Any] | None],
    done: dict[int, tuple[Any, int, int]],
    *,
    what: str,
    max_tree: int,
) -> int:
    """Nesting height of ``root`` without recursion, refusing paths over ``MAX_DEPTH``, cycles, and a size
    as a tree (every node counted at each path that reaches it) over ``max_tree``.

    ``done`` memoises finished containers as (node, height, tree size), kept alive so that their ids stay
    theirs: the check itself stays linear in the distinct objects, however many paths share them.
    """
    top = children(root)
    if top is None:
        return 0
    path: list[tuple[Any, Iterator[Any]]] = [(root, top)]
    on_path = {id(root)}
    best, sizes = [0], [1]  # per open node: the tallest child's height, the tree size so far

    def grow(size: int) -> None:
        sizes[-1] += size
        if sizes[-1] > max_tree:
            raise _corrupt(
                f"{what} is an object graph of more than {max_tree:,} nodes when walked "
                "(shared references multiply it); refusing it"
            )

    while path:
        node, items = path[-1]
        for child in items:
            seen = done.get(id(child))
            if seen is not None and seen[0] is child:
                best[-1] = max(best[-1], seen[1])
                grow(seen[2])
                continue
            sub = children(child)
            if sub is None:
                grow(1)
                continue
            if id(child) in on_path:
                raise _corrupt(f"{what} refers to itself")
            if len(path) >= MAX_DEPTH:
                raise _corrupt(f"{what} nests deeper than {MAX_DEPTH} levels")
            path.append((child, sub))
            on_path.add(id(child))
            best.append(0)
            sizes.append(1)
            break
        else:
            path.pop()
            on_path.discard(id(node))
            height, size = best.pop() + 1, sizes.pop()
            done[id(node)] = (node, height, size)
            if best:
                best[-1] = max(best[-1], height)
                grow(size)
            else:
                return height
    raise AssertionError("unreachable")


def safe_load(
    stream: IO[bytes],
    *,
    source: str,
    overrides: Mapping[tuple[str, str], Any] | None = None,
    object_arrays: bool = False,
    leaves: tuple[type, ...] = (),
) -> Any:
    """Unpickle one object from ``stream`` with the allow-list and latin1 strings, then check the result.

    Every failure inside unpickling (a refused value, a truncated stream, MemoryError, RecursionError...)
    becomes an ``UnsafePickleError`` or ``CorruptFileError`` naming ``source``; errors an override raises
    itself and OSErrors (the disk, not the file's content) pass through. ``leaves`` are extra types the
    result may hold (the streaming table's placeholders).
    """
    collecting = gc.isenabled()
    gc.disable()  # nothing built here can be garbage until the end; the collector's passes cost 40%
    try:
        unpickler = RestrictedUnpickler(
            stream, overrides=overrides, object_arrays=object_arrays, encoding="latin1"
        )
        obj = unpickler.load()
        unpickler.check_result(obj, leaves)
        return obj
    except _Refused as exc:
        raise exc.error(f"{source}: {exc}") from None
    except (ConversionError, OSError):
        raise
    except RecursionError:
        raise CorruptFileError(f"{source}: not a readable legacy pickle (nested too deeply)") from None
    except MemoryError:
        raise CorruptFileError(
            f"{source}: not a readable legacy pickle (asks for more memory than there is)"
        ) from None
    except Exception as exc:  # anything else the bytes provoke is the file's fault, not ours
        raise CorruptFileError(
            f"{source}: not a readable legacy pickle ({type(exc).__name__}: {clip(str(exc), 200)})"
        ) from None
    finally:
        if collecting:
            gc.enable()


def safe_loads(data: bytes, *, source: str, object_arrays: bool = False) -> Any:
    return safe_load(io.BytesIO(data), source=source, object_arrays=object_arrays)


def py2_text(value: str) -> str:
    """Recover the UTF-8 text of a Python 2 byte string that was decoded as latin1."""
    try:
        return value.encode("latin1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def py2_strings(obj: Any, _memo: dict[int, Any] | None = None) -> Any:
    """Apply ``py2_text`` to every string key and value of nested dicts / lists (order kept).

    Shared sub-structures are converted once (``safe_load`` bounds the depth and refuses cycles).
    """
    if isinstance(obj, str):
        return py2_text(obj)
    if not isinstance(obj, dict | list):
        return obj
    memo = {} if _memo is None else _memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, dict):
        out: Any = type(obj)((py2_strings(k, memo), py2_strings(v, memo)) for k, v in obj.items())
    else:
        out = [py2_strings(v, memo) for v in obj]
    memo[id(obj)] = out
    return out
