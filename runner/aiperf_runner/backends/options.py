"""Backend options, declared and typed: each backend names the options it takes in a frozen
dataclass (`BackendOptions` holds those every backend shares), and the bag of keyword arguments a
backend is built with is read into it once.

The bag comes from Python callers (numbers, booleans, lists) and from the command line
(`--backend-opt KEY=VALUE`, JSON where it parses, else text), and from run.json on `--resume`: each
value is converted to its field's type here, an option no field declares is refused with the names
of those that exist, and None (or empty text for a number) means "not given": the field's default.
"""

from __future__ import annotations

import difflib
import shlex
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from aiperf_runner.spec.errors import AiperfError

OptionsT = TypeVar("OptionsT", bound="BackendOptions")
Parser = Callable[[str, Any], Any]
_FALSE = ("0", "false", "no", "off", "")
_TRUE = ("1", "true", "yes", "on")


class BackendOptionError(AiperfError, ValueError):
    """A backend option that is unknown to the backend, or whose value it cannot take."""


def option(default: Any = None, *, minimum: float | None = None, choices: tuple[str, ...] = (),
           parse: Parser | None = None) -> Any:
    """A declared option's field: its default, the least value a number may have, the values a text
    may have, or a function `parse(name, value)` that reads the value instead of its type."""
    return field(default=default, metadata={"minimum": minimum, "choices": choices, "parse": parse})


def whole_number(name: str, value: Any) -> int:
    """An int, also from text or a float without a fraction; never a bool."""
    bad = BackendOptionError(f"backend option {name} must be a whole number, not {value!r}")
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise bad
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad from None


def number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise BackendOptionError(f"backend option {name} must be a number, not {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise BackendOptionError(f"backend option {name} must be a number, not {value!r}") from None


def flag(name: str, value: Any) -> bool:
    """A boolean, also as the command line gives it (`warm_start=0`, `probe=false`, `exclusive=no`)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _FALSE + _TRUE:
        return value.strip().lower() in _TRUE
    raise BackendOptionError(f"backend option {name} must be true or false, not {value!r}")


def shell_words(name: str, value: Any) -> tuple[str, ...]:
    """A command prefix: text split as a shell splits it, or a list of words as they are."""
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise BackendOptionError(f"backend option {name}: {exc}") from None
    return words(name, value)


def words(name: str, value: Any) -> tuple[str, ...]:
    """A list of arguments; one text is one argument."""
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, (list, tuple)):
        return tuple(str(w) for w in value)
    raise BackendOptionError(f"backend option {name} must be a list of words, not {value!r}")


def text(name: str, value: Any) -> str | None:
    """Text (a number given for it, `time_limit=90`, is its text); empty text: not given."""
    if isinstance(value, (dict, list, tuple, bool)):
        raise BackendOptionError(f"backend option {name} must be text, not {value!r}")
    return str(value) or None


def positive_int_option(options: Mapping[str, Any], name: str) -> int | None:
    """A backend option that is a whole number of at least 1 (it may come from the command line as
    a string); None when it is not given. BackendOptionError naming the option otherwise."""
    value = options.get(name)
    if value is None or value == "":
        return None
    return _at_least(name, whole_number(name, value), 1)


def _at_least(name: str, value: float, minimum: float) -> Any:
    if value < minimum:
        least = int(minimum) if float(minimum).is_integer() else minimum
        raise BackendOptionError(f"backend option {name} must be at least {least}, not {value}")
    return value


_BY_TYPE: dict[Any, Parser] = {int: whole_number, float: number, bool: flag, str: text}


def _parser_for(kind: Any) -> Parser | None:
    """How a value of the declared type `kind` is read (None: taken as it is)."""
    if get_origin(kind) in (Union, types.UnionType):
        members = [k for k in get_args(kind) if k is not type(None)]
        return _parser_for(members[0]) if len(members) == 1 else None
    if get_origin(kind) is tuple:
        return words
    return _BY_TYPE.get(kind)


@dataclass(frozen=True)
class BackendOptions:
    """The options every backend takes: `slots` (None: the backend's own default) and
    `devices_per_slot` (None: the backend's default, 1 unless it says otherwise), both at least 1.

    A backend with options of its own declares a subclass with a field for each and names it in
    its `options_class`.
    """

    slots: int | None = option(None, minimum=1)
    devices_per_slot: int | None = option(None, minimum=1)

    @classmethod
    def known(cls) -> list[str]:
        return sorted(f.name for f in fields(cls))

    @classmethod
    def parse(cls: type[OptionsT], options: Mapping[str, Any], backend: str = "") -> OptionsT:
        """The declared options from a bag of them; BackendOptionError naming an unknown option
        (and the known ones) or a value its field cannot take."""
        cls.check_names(options, backend)
        hints = get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in options:
                value = _read(f.name, options[f.name], hints[f.name], f.metadata)
                if value is not None:
                    values[f.name] = value
        return cls(**values)

    @classmethod
    def check_names(cls, options: Mapping[str, Any], backend: str = "") -> None:
        known = cls.known()
        unknown = sorted(set(options) - set(known))
        if not unknown:
            return
        name = unknown[0]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        whose = f"the {backend} backend" if backend else "this backend"
        raise BackendOptionError(f"{whose} has no option {name!r}{hint}; its options: {', '.join(known)}")


def _read(name: str, value: Any, kind: Any, meta: Mapping[str, Any]) -> Any:
    """One option's value as its field holds it; None: not given (the default)."""
    parse: Parser | None = meta.get("parse") or _parser_for(kind)
    if value is None or (value == "" and parse in (whole_number, number)):
        return None
    if parse is not None:
        value = parse(name, value)
    if value is None:
        return None
    minimum = meta.get("minimum")
    if minimum is not None:
        _at_least(name, value, minimum)
    choices = meta.get("choices") or ()
    if choices and value not in choices:
        raise BackendOptionError(f"backend option {name} must be one of {', '.join(choices)}, not {value!r}")
    return value
