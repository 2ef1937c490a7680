"""Topology specs in Mininet's ``--topo`` syntax: ``name,arg,...,key=value``."""

from __future__ import annotations

import importlib
import inspect

from mininet.util import splitArgs

from core.errors import ParameterError
from core.units import format_rate
from topologies.base import FabricTopo, TopoSize

#: The files that define topologies (a ``topos`` dict each). The package's other
#: modules (spec, routing, addressing, info) need networkx and more, which the
#: system Python that ``mn --custom`` runs may lack, so they are not scanned.
FABRIC_MODULES = ("dragonfly", "fattree", "railopt", "torus")


def registry() -> dict[str, type[FabricTopo]]:
    """Every topology name -> class, merged from the ``topos`` dicts of
    FABRIC_MODULES (what ``mn --custom topologies/mn.py`` offers)."""
    found: dict[str, type[FabricTopo]] = {}
    for name in FABRIC_MODULES:
        module = importlib.import_module(f"topologies.{name}")
        for name, cls in getattr(module, "topos", {}).items():
            if name in found and found[name] is not cls:
                raise RuntimeError(f"topology name {name!r} is defined twice "
                                   f"(second time in {module.__name__})")
            found[name] = cls
    return found


def usage(name: str, cls: type[FabricTopo]) -> str:
    """'fattree,k=4,host_rate=400G,...': the parameters of ``cls.build`` and their defaults."""
    words = [name]
    for param in list(inspect.signature(cls.build).parameters.values())[1:]:  # drop self
        if param.kind is param.VAR_POSITIONAL:
            words.append(f"{param.name}...")
        elif param.default is param.empty:
            words.append(param.name)
        elif param.name.endswith("_rate") and isinstance(param.default, (int, float)):
            words.append(f"{param.name}={format_rate(param.default)}")
        else:
            words.append(f"{param.name}={param.default}")
    return ",".join(words)


def parse_spec(spec: str) -> tuple[type[FabricTopo], list, dict]:
    """``"fattree,4"`` -> (class, args, kwargs), checked against the class's build()
    signature; ParameterError on a bad name or arguments. Builds nothing."""
    if not isinstance(spec, str) or not spec.strip():
        raise ParameterError("topology", spec, "empty; give NAME,ARG,KEY=VALUE, e.g. fattree,4")
    name, args, kwargs = splitArgs(spec.strip())
    keys = [part.split("=", 1)[0].strip() for part in spec.split(",")[1:] if "=" in part]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ParameterError("topology", spec, f"{', '.join(twice)} given twice")
    known = registry()
    if name not in known:
        raise ParameterError("topology", name, f"unknown; known: {', '.join(sorted(known))}")
    cls = known[name]
    try:
        # Bind against build() (Topo.__init__ takes *args, **kwargs) so that a
        # TypeError inside build() stays a bug instead of becoming a usage error.
        inspect.signature(cls.build).bind(None, *args, **kwargs)
    except TypeError as exc:
        raise ParameterError("topology", spec, f"{exc}; usage: {usage(name, cls)}") from None
    return cls, args, kwargs


def topo_size(spec: str) -> TopoSize:
    """Hosts, switches and links of ``spec``, computed from its parameters alone and
    checked against the caps (topologies.base.MAX_HOSTS, ...)."""
    cls, args, kwargs = parse_spec(spec)
    size = cls.checked_size(*args, **kwargs)
    if size is None:  # a topology without size(): count its graph (checked as it is built)
        topo = cls(*args, **kwargs)
        size = TopoSize(len(topo.host_nodes()), len(topo.switch_nodes()), len(topo.links()))
    return size


def build_topo(spec: str) -> FabricTopo:
    """Build the topology named by ``spec``, e.g. ``"fattree,4"`` or
    ``"leafspine,4,2,8,oversub=2"``; ParameterError on a bad name or arguments, or
    a size above the caps (checked before the graph is built)."""
    cls, args, kwargs = parse_spec(spec)
    return cls(*args, **kwargs)
