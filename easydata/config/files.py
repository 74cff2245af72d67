"""Config files and command-line overrides: YAML / JSON read with their limits (size, alias expansion,
duplicate keys refused: `load_mapping`, `parse_mapping_text`) and `key.path=value` overrides
(`apply_overrides`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from easydata.errors import ConfigError

__all__ = ["parse_mapping_text", "load_mapping", "apply_overrides", "MAX_CONFIG_NODES", "MAX_CONFIG_BYTES"]


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise json.JSONDecodeError(f"duplicate key {repeated[0]!r} (a key may appear once per mapping)", "", 0)
    return dict(pairs)


def parse_mapping_text(text: str, *, json_text: bool = False) -> Any:
    """YAML (or JSON) text -> data; a key repeated in one mapping is an error, not "last one wins".

    Raises:
      yaml.YAMLError / json.JSONDecodeError: with the repeated key and its line.
    """
    import yaml

    if json_text:
        return json.loads(text, object_pairs_hook=_unique_json_object)

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    # YAML 1.1 (PyYAML) reads `1e-3` and `5e5` as strings: a float needs a dot there. YAML 1.2, JSON and
    # every user read them as numbers ("mix.weights.a: expected float, got '1e-3'").
    UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded = _expanded_nodes(node)
        if expanded > MAX_CONFIG_NODES:
            raise yaml.YAMLError(f"its aliases expand to more than the {MAX_CONFIG_NODES:,} values a config may"
                                 " hold (a YAML alias bomb?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()


_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")

#: The most values (scalars, lists, mappings) a config may expand to once YAML aliases are followed, and
#: the largest config file read: a few anchors can otherwise expand to billions of values (4 GB and growing).
MAX_CONFIG_NODES = 1_000_000
MAX_CONFIG_BYTES = 16 * 2**20


def _expanded_nodes(root: Any) -> int:
    """How many values a composed YAML node stands for with every alias expanded, computed per distinct
    node (an alias is the same node object again), so a bomb is measured without being expanded."""
    import yaml

    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [item for pair in node.value for item in pair]
        else:
            sizes[id(node)] = 1
            continue
        if not children_done:
            if id(node) in visiting:
                return 10 * MAX_CONFIG_NODES  # an alias inside its own anchor: endless
            visiting.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        visiting.discard(id(node))
        sizes[id(node)] = min(1 + sum(sizes.get(id(child), 1) for child in children), 10 * MAX_CONFIG_NODES)
    return sizes[id(root)]


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Reads a YAML or JSON config file into a dict, with one-line errors."""
    import yaml

    import stat

    path = Path(path)
    too_big = f"more than the {MAX_CONFIG_BYTES // 2**20} MiB a config may be"
    try:
        mode = path.stat().st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):  # would block until a writer comes
            raise ConfigError(f"config file '{path}' is not a regular file")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file '{path}' is {path.stat().st_size:,} bytes, {too_big}")
        with open(path, "rb") as f:  # read bounded: a device (/dev/zero) or /proc file reports size 0
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file '{path}' holds {too_big}")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file '{path}' does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file '{path}' is a directory") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte {e.start:,}: {e.reason})") from None
    text = text.removeprefix("\ufeff")  # a BOM an editor wrote
    try:
        data = parse_mapping_text(text, json_text=path.suffix == ".json")
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        detail = str(e).replace("\n", " ")
        raise ConfigError(f"config file '{path}' is not valid {'JSON' if path.suffix == '.json' else 'YAML'}:"
                          f" {detail}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping at the top level, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies `key.path=value` overrides (values parsed as YAML); list items by index: `datasets.0.name`, or
    `datasets[0].name` as `validate()`'s messages name them."""
    import copy

    import yaml

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key.path=value, got '{item}'")
        key, raw = item.split("=", 1)
        parts = [p for p in re.sub(r"\[(\d+)\]", r".\1", key.strip()).split(".") if p]
        if not parts:
            raise ConfigError(f"--set expects key.path=value, got '{item}'")
        try:
            value = parse_mapping_text(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            if "alias bomb" in str(e):
                raise ConfigError(f"--set {item[:60]}: {e}") from None
            value = raw
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            nxt = parts[depth + 1]
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"--set {key}: no list item '{part}'")
                node = node[int(part)]
            elif not isinstance(node, dict):
                raise ConfigError(f"--set {key}: '{'.'.join(parts[:depth])}' is not a mapping")
            else:
                if node.get(part) is None:
                    node[part] = [] if nxt.isdigit() else {}
                node = node[part]
        last = parts[-1]
        if isinstance(node, list):
            if not last.isdigit() or int(last) > len(node):
                raise ConfigError(f"--set {key}: no list item '{last}'")
            if int(last) == len(node):
                node.append(value)
            else:
                node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"--set {key}: '{'.'.join(parts[:-1])}' is not a mapping")
    return data
