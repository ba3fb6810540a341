"""Spec bytes → raw data and a line locator, for TOML and YAML, within the limits.

Whatever a file does wrong at this level is a :class:`SpecInvalid` naming the file and,
where it can, the line: bytes that are not UTF-8, control characters, syntax errors, a number
too long to convert, nesting deeper than ``MAX_DEPTH``, more than ``MAX_VALUES`` keys and
values. YAML gets more, because YAML can do more: its parse events are counted before
anything is built, with every alias counted as the copy it stands for, so an alias bomb or a
recursive alias is refused in milliseconds instead of expanding; a key given twice is refused
as TOML refuses it (YAML would silently keep the last, hiding a typo); a key that YAML reads
as a number, a boolean or a date (``on:``, ``1:``) is refused with the quoting that fixes it.
Nothing here may recurse deeper than the limits allow or build more than they allow.
"""

from __future__ import annotations

import re
import tomllib
from typing import TYPE_CHECKING, Any, NoReturn

from shipway.errors import SpecInvalid, SpecProblem
from shipway.spec.limits import (
    DEPTH_HINT,
    MAX_DEPTH,
    MAX_VALUES,
    SIZE_HINT,
    TOO_DEEP,
    TOO_MANY,
    shape_problem,
)
from shipway.spec.locate import KeyPath, Locator, render_path, toml_locator, yaml_locator

if TYPE_CHECKING:
    import yaml

# C0 controls other than tab, LF and CR, and DEL: neither TOML nor YAML allows them raw.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TOML_AT = re.compile(r"\(at line (\d+), column \d+\)$")
_LONG_NUMBER = "integer string conversion"
# TOML's strings and comments, whose "=", "," and "[" are text, not syntax. Each form ends at
# its closing quote or, unterminated, at the end of its line (or file), and nothing is taken
# back (possessive): matching stays linear whatever the text, and a broken file only makes
# the count lower.
_TOML_TEXT = re.compile(
    r'"""(?:[^\\"]|\\[\s\S]?|"(?!""))*+(?:"{3,5})?'
    r"|'''(?:[^']|'(?!''))*+(?:'{3,5})?"
    r'|"(?:[^"\\\n]|\\.?)*+"?'
    r"|'[^'\n]*+'?"
    r"|#[^\n]*+"
)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")
# A dotted key (a.b.c = 1, [a.b.c]) of MAX_DEPTH parts or more; quoted parts are stripped
# with the strings, which leaves their dots.
_DOTTED_TOO_DEEP = re.compile(rf"(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]*){{{MAX_DEPTH}}}")
_STR, _MERGE = "tag:yaml.org,2002:str", "tag:yaml.org,2002:merge"
_READ_AS = {
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
}


def _invalid(
    file: str, message: str, hint: str = "", line: int | None = None, path: KeyPath = ()
) -> NoReturn:
    raise SpecInvalid([SpecProblem(file, render_path(path), message, hint, line)])


def decode(raw: bytes, file: str) -> str:
    """UTF-8 text without control characters (a leading byte-order mark is dropped)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Never echo the bytes: a spec is not supposed to hold a secret, but it may.
        _invalid(
            file,
            f"is not UTF-8 text (byte {exc.start + 1} cannot be decoded)",
            "save the file as UTF-8",
            raw.count(b"\n", 0, exc.start) + 1,
        )
    text = text.removeprefix("\ufeff")
    found = _CONTROL.search(text)
    if found:
        start = found.start()
        column = start - text.rfind("\n", 0, start)
        _invalid(
            file,
            f"holds the control character U+{ord(found.group()):04X} at column {column}",
            "a spec is plain text: remove it (inside a quoted string, write an escape)",
            text.count("\n", 0, start) + 1,
        )
    return text


def parse_toml(text: str, file: str) -> tuple[Any, Locator]:
    syntax = _TOML_TEXT.sub("", text)
    if _toml_values_at_least(syntax) > MAX_VALUES:
        _invalid(file, TOO_MANY, SIZE_HINT)
    if _toml_nested_deeper(syntax, MAX_DEPTH) or _DOTTED_TOO_DEEP.search(syntax):
        _invalid(file, TOO_DEEP, DEPTH_HINT)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = _TOML_AT.search(str(exc))
        repeated = "Cannot overwrite" in str(exc) or "Cannot declare" in str(exc)
        _invalid(
            file,
            f"not valid TOML: {exc}",
            "a key or a table is given twice: keep one" if repeated else "",
            int(at.group(1)) if at else None,
        )
    except RecursionError:  # not expected past the check above; never a traceback
        _invalid(file, TOO_DEEP, DEPTH_HINT)
    except ValueError as exc:
        if _LONG_NUMBER not in str(exc):
            raise
        _invalid(file, "holds a number too long to read", "no setting takes a number that long")
    _check_shape(data, file)
    return data, toml_locator(text)


def _toml_values_at_least(syntax: str) -> int:
    """At most as many as tomllib would build from this text (strings and comments removed):
    each "=" is a key, each "," one more item, each "[" or "[[" a table or a list. Counted in
    C, so that 100,000 keys are refused in milliseconds, before tomllib spends seconds."""
    return syntax.count("=") + syntax.count(",") + syntax.count("[") - syntax.count("[[")


def _toml_nested_deeper(syntax: str, depth: int) -> bool:
    """Whether arrays and inline tables nest deeper than ``depth`` (tomllib recurses once per
    level): each pass removes the innermost pairs, so pairs left after ``depth`` passes are
    deeper. Unbalanced brackets are left for tomllib to report."""
    brackets = _NOT_BRACKET.sub("", syntax)
    for _ in range(depth):
        brackets, removed = _INNERMOST.subn("", brackets)
        if not removed:
            return False
    return _INNERMOST.search(brackets) is not None


def parse_yaml(text: str, file: str) -> tuple[Any, Locator]:
    import yaml

    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_events(yaml.parse(text, Loader=loader_class), file)
        loader = loader_class(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_keys(node, file)
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if "nesting depth" in str(exc.problem):  # libyaml's own limit, far above ours
            _invalid(file, TOO_DEEP, DEPTH_HINT, mark.line + 1 if mark else None)
        _invalid(
            file,
            f"not valid YAML: {exc.problem or exc.context}",
            line=mark.line + 1 if mark else None,
        )
    except yaml.reader.ReaderError as exc:
        # Its position counts bytes (libyaml) or characters: find the character instead.
        char = exc.character
        code = char if isinstance(char, int) else ord(str(char)[:1] or "\0")
        at = text.find(chr(code))
        _invalid(
            file,
            f"not valid YAML: the character U+{code:04X} is not allowed",
            "remove it (inside a double-quoted string, write an escape)",
            text.count("\n", 0, at) + 1 if at >= 0 else None,
        )
    except yaml.YAMLError as exc:
        _invalid(file, f"not valid YAML: {exc}")
    except ValueError as exc:
        if _LONG_NUMBER not in str(exc):
            raise
        _invalid(file, "holds a number too long to read", "no setting takes a number that long")
    data = {} if data is None else data
    _check_shape(data, file)
    return data, yaml_locator(node)


def _check_shape(data: Any, file: str) -> None:
    problem = shape_problem(data)
    if problem is not None:
        path, message, hint = problem
        _invalid(file, message, hint, path=path)


def _check_events(events: Any, file: str) -> None:
    """Depth and size as if every alias were expanded, before any node is built.

    Each open collection is a frame [anchor, values, height]; an anchor's finished size and
    height are kept, so an alias costs what its copy would. An alias to a collection still
    open is recursive: expanding it would never end.
    """
    import yaml

    frames: list[list[Any]] = []
    anchors: dict[str, tuple[int, int]] = {}
    total = 0
    aliased = False
    for event in events:
        line = event.start_mark.line + 1 if event.start_mark else None
        size, height = 0, -1
        if isinstance(event, yaml.CollectionStartEvent):
            frames.append([event.anchor, 1, 1])
            total += 1
            if len(frames) > MAX_DEPTH:
                _invalid(file, TOO_DEEP, DEPTH_HINT, line)
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, size, height = frames.pop()
            if anchor is not None:
                anchors[anchor] = (size, height)
        elif isinstance(event, yaml.ScalarEvent):
            size, height = 1, 0
            total += 1
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
        elif isinstance(event, yaml.DocumentStartEvent):
            total += 1  # 100,000 empty documents are no better than 100,000 values
        elif isinstance(event, yaml.AliasEvent):
            aliased = True
            if any(frame[0] == event.anchor for frame in frames):
                _invalid(
                    file,
                    f"the alias *{event.anchor} is inside the value it names (a recursive alias)",
                    f"an alias may only repeat a value defined before it: remove *{event.anchor}",
                    line,
                )
            size, height = anchors.get(event.anchor or "", (1, 0))
            total += size
            if len(frames) + height > MAX_DEPTH:
                _invalid(file, TOO_DEEP + " (with its aliases expanded)", DEPTH_HINT, line)
        if total > MAX_VALUES:
            if aliased:
                _invalid(
                    file,
                    TOO_MANY + " once its aliases are expanded",
                    "each alias is a full copy of what it names (an alias bomb?): "
                    "repeat fewer values",
                    line,
                )
            _invalid(file, TOO_MANY, SIZE_HINT, line)
        if height >= 0 and frames:
            frames[-1][1] += size
            frames[-1][2] = max(frames[-1][2], height + 1)


def _check_keys(root: yaml.Node, file: str) -> None:
    """Every key a string, none given twice in one mapping (``<<`` merges may override)."""
    import yaml

    problems: list[SpecProblem] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, KeyPath]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, i)) for i, item in enumerate(node.value))
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[str, int] = {}
        for key, value in node.value:
            line = key.start_mark.line + 1
            if isinstance(key, yaml.ScalarNode) and key.tag == _MERGE:
                stack.append((value, path))
                continue
            if not isinstance(key, yaml.ScalarNode) or key.tag != _STR:
                problems.append(_key_problem(file, key, path, line))
                continue
            name = str(key.value)
            if name in first:
                problems.append(
                    SpecProblem(
                        file,
                        render_path((*path, name)),
                        f"is given twice (first on line {first[name]})",
                        "keep one: YAML would silently use the last",
                        line,
                    )
                )
            else:
                first[name] = line
            stack.append((value, (*path, name)))
    if problems:
        raise SpecInvalid(sorted(problems, key=lambda p: p.line or 0))


def _key_problem(file: str, key: yaml.Node, path: KeyPath, line: int) -> SpecProblem:
    import yaml

    if not isinstance(key, yaml.ScalarNode):
        return SpecProblem(
            file,
            render_path(path),
            "a key must be a string, not a table or a list",
            "use a name as the key",
            line,
        )
    text = str(key.value)
    read_as = _READ_AS.get(key.tag, f"the type {key.tag}")
    return SpecProblem(
        file,
        render_path((*path, text)),
        f"the key {text!r} is read as {read_as}, not a string",
        f'quote it: "{text}"',
        line,
    )
