"""ECMP hashing that is independent from switch to switch, on every kernel, and its check.

The model (``model.alphabeta.per_hop_hash_choice``, ``experiments.ecmp``) draws each
switch's choice of next hop independently per flow, as real switches do with their own
hash seeds. Linux hashes a forwarded flow with one function per network namespace;
namespaces that hash alike make the same choice for a flow at every tier it crosses
(polarization: on a k=4 fat-tree the aggregation switches then send every flow the edge
gave them up one core link and leave the other idle). Mechanisms, best first:

``seed``    Linux >= 6.11: ``fib_multipath_hash_seed`` per namespace over the L4 5-tuple.
            Every switch its own keyed hash, as in a real fabric. The 5-tuple is
            selected as custom fields (policy 3), not with policy 1: policy 1 reuses a
            forwarded frame's flow hash when the frame already has one, and the
            receive steering that keeps links in order (``emu.rxorder``) computes that
            hash once, with one boot-wide key, on the first link, so every switch
            would choose alike.
``fields``  Linux >= 5.12: ``fib_multipath_hash_policy = 3`` (custom) with a different
            ``fib_multipath_hash_fields`` set per switch. The kernel hashes the selected
            fields (the rest zeroed) with one boot-wide SipHash key, so two different
            field sets give two unrelated functions of the same flow *when the fields
            that differ are nonzero* in the flow: they are IP protocol and destination
            port (17 and 4791 for RoCEv2), then source and destination address. Source
            port, the RoCEv2 entropy, is always hashed. Switches that can both choose a
            path for one flow (`hash_conflicts`) get different sets (a graph colouring);
            the sets keeping the full 5-tuple come first, so flows stay distinguishable.
``shared``  older kernels: policy 1 everywhere, one function: polarizes. Recorded, and
            `correlated_pairs` says how many switch pairs hash alike.

``ecmp_check`` tests measured per-port counts for the signature of correlated hashing (an
ECMP member idle while enough flows crossed its group that independent hashing would
almost surely have used it); the gate marks such a run invalid.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx

from core.errors import ParameterError
from topologies.routing import Routes

SEED_SYSCTL = "net.ipv4.fib_multipath_hash_seed"
FIELDS_SYSCTL = "net.ipv4.fib_multipath_hash_fields"
POLICY_SYSCTL = "net.ipv4.fib_multipath_hash_policy"
MECHANISMS = ("seed", "fields", "shared")
CHOICES = ("auto", *MECHANISMS)
DESCRIPTION = {
    "seed": "per-switch fib_multipath_hash_seed (policy 3, the L4 5-tuple)",
    "fields": "per-switch fib_multipath_hash_fields (policy 3, custom)",
    "shared": "one hash for all switches (policy 1, L4): correlated",
}

# include/net/ip_fib.h: FIB_MULTIPATH_HASH_FIELD_*
F_SRC_IP, F_DST_IP, F_IP_PROTO, F_FLOWLABEL, F_SRC_PORT, F_DST_PORT = 1, 2, 4, 8, 16, 32


def _palette() -> tuple[int, ...]:
    """Field sets in order of preference, all with the source port: first the full
    address pair with every protocol/destination-port variant (4 sets), then those
    dropping one address (8), then both (4). IPv4 has no flow label (always 0)."""
    out = []
    for addrs in (F_SRC_IP | F_DST_IP, F_SRC_IP, F_DST_IP, 0):
        for extra in (F_IP_PROTO | F_DST_PORT, F_DST_PORT, F_IP_PROTO, 0):
            out.append(F_SRC_PORT | addrs | extra)
    return tuple(out)


FIELD_SETS = _palette()
#: The L4 5-tuple as custom fields: what the ``seed`` mechanism hashes.
FIVE_TUPLE = F_SRC_IP | F_DST_IP | F_IP_PROTO | F_SRC_PORT | F_DST_PORT


def sysctl_path(name: str) -> str:
    return "/proc/sys/" + name.replace(".", "/")


def available_mechanisms() -> tuple[str, ...]:
    """What this kernel offers (each namespace gets its own copy of these sysctls)."""
    have = [m for m, name in (("seed", SEED_SYSCTL), ("fields", FIELDS_SYSCTL))
            if os.path.exists(sysctl_path(name))]
    return (*have, "shared")


def choose_mechanism(requested: str = "auto", available: Iterable[str] | None = None) -> str:
    """'auto' -> the best available; a named one must be available (ParameterError)."""
    if requested not in CHOICES:
        raise ParameterError("ecmp_hash", requested, f"expected one of {', '.join(CHOICES)}")
    have = tuple(available) if available is not None else available_mechanisms()
    if requested == "auto":
        return next(m for m in MECHANISMS if m in have)
    if requested not in have:
        raise ParameterError("ecmp_hash", requested,
                             f"this kernel lacks it (available: {', '.join(have)})")
    return requested


def hash_seed(node: str) -> int:
    """A switch's own hash seed: nonzero (0 is the kernel's shared default), stable."""
    return zlib.crc32(node.encode()) or 1


def hash_conflicts(routes: Routes, switches: Iterable[str]) -> set[frozenset[str]]:
    """Pairs of switches that both choose among several next hops for one flow: a switch
    with an ECMP choice toward a destination and any switch with one downstream of it
    (toward the same destination). Those must hash a flow independently."""
    switch_set = set(switches)
    out: set[frozenset[str]] = set()
    for dst in routes.hosts:
        choosers = {s for s in switch_set if len(routes.next_hops[s].get(dst, ())) >= 2}
        for s in choosers:
            seen, stack = {s}, list(routes.next_hops[s][dst])
            while stack:
                node = stack.pop()
                if node == dst or node in seen:
                    continue
                seen.add(node)
                if node in choosers:
                    out.add(frozenset((s, node)))
                stack.extend(routes.next_hops[node].get(dst, ()))
    return out


@dataclass(frozen=True)
class HashPlan:
    """Each switch's ECMP sysctls, the mechanism and how many conflicting pairs of
    switches (see `hash_conflicts`) still hash a flow alike."""

    mechanism: str
    sysctls: dict[str, dict[str, int]]
    conflicting_pairs: int
    correlated_pairs: int
    field_sets: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict:
        return {"ecmp_hash": self.mechanism, "ecmp_hash_detail": DESCRIPTION[self.mechanism],
                "ecmp_hash_independent": self.correlated_pairs == 0,
                "ecmp_conflicting_pairs": self.conflicting_pairs,
                "ecmp_correlated_pairs": self.correlated_pairs,
                "ecmp_hash_field_sets": len(set(self.field_sets.values()))}


def plan_hashing(mechanism: str, routes: Routes, switches: Iterable[str]) -> HashPlan:
    """The ECMP sysctls of every switch for ``mechanism`` (see the module docstring)."""
    switches = list(switches)
    conflicts = hash_conflicts(routes, switches)
    if mechanism == "seed":
        seeds = {s: hash_seed(s) for s in switches}
        same = sum(seeds[a] == seeds[b] for a, b in map(tuple, conflicts))
        return HashPlan("seed", {s: {POLICY_SYSCTL: 3, FIELDS_SYSCTL: FIVE_TUPLE,
                                     SEED_SYSCTL: seeds[s]} for s in switches},
                        len(conflicts), same)
    if mechanism == "shared":
        return HashPlan("shared", {s: {POLICY_SYSCTL: 1} for s in switches},
                        len(conflicts), len(conflicts))
    if mechanism != "fields":
        raise ParameterError("ecmp_hash", mechanism, f"expected one of {', '.join(MECHANISMS)}")
    graph = nx.Graph()
    graph.add_nodes_from(sorted(switches))
    graph.add_edges_from(tuple(sorted(pair)) for pair in conflicts)
    colour = nx.greedy_color(graph, strategy="DSATUR")
    # More colours than field sets would reuse a set between conflicting switches: counted.
    fields = {s: FIELD_SETS[colour[s] % len(FIELD_SETS)] for s in switches}
    same = sum(fields[a] == fields[b] for a, b in map(tuple, conflicts))
    return HashPlan("fields", {s: {POLICY_SYSCTL: 3, FIELDS_SYSCTL: fields[s]} for s in switches},
                    len(conflicts), same, fields)


# ----------------------------------------------------------------------------- check

@dataclass(frozen=True)
class EcmpCheck:
    """Outcome of `ecmp_check`: ok, and why not (one line per suspicious group)."""

    ok: bool
    reasons: tuple[str, ...]
    groups_checked: int
    groups_skipped: int


def _clean_groups(routes: Routes, switches: Iterable[str]) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
    """(switch, next-hop set) of every ECMP group whose ports carry that group's traffic
    only, so a port's count is the group's share; and how many groups are not clean."""
    clean, skipped = [], 0
    for s in switches:
        uses: dict[str, set[tuple[str, ...]]] = {}
        for hops in routes.next_hops[s].values():
            for hop in hops:
                uses.setdefault(hop, set()).add(hops)
        for group in sorted({h for h in routes.next_hops[s].values() if len(h) >= 2}):
            if all(uses[hop] == {group} for hop in group):
                clean.append((s, group))
            else:
                skipped += 1
    return clean, skipped


def ecmp_check(routes: Routes, switches: Iterable[str], port_tx_deltas: Mapping[tuple[str, str], float],
               max_flow_units: float, alpha: float = 1e-3,
               links_down: Collection[frozenset[str]] = ()) -> EcmpCheck:
    """Did the fabric hash as the model assumes (independently per switch)?

    ``port_tx_deltas``: what each switch egress ``(node, peer)`` sent during the run, in
    any unit (bytes or packets); ``max_flow_units``: the most one flow can have sent in
    that unit (its size on the wire). Each flow takes one member of a group, so a group
    that carried T units saw at least K = ceil(T / max_flow_units) flows, and under
    independent uniform hashing one of its n members stays idle with probability at most
    n (1 - 1/n)^K. A member that sent nothing where that bound is below ``alpha`` fails
    the check: the hashes upstream decided this switch's choice (polarization). Groups
    whose ports also carry other routes' traffic are skipped (counted), and so are groups
    with a member over a link in ``links_down`` (taken down during the run: the fabric
    rerouted around it, so its idleness says nothing about the hashes).
    """
    if not max_flow_units > 0:
        raise ParameterError("max_flow_units", max_flow_units, "must be positive")
    if not 0 < alpha < 1:
        raise ParameterError("alpha", alpha, "must be in (0, 1)")
    clean, skipped = _clean_groups(routes, switches)
    groups = [(s, g) for s, g in clean
              if not any(frozenset((s, hop)) in links_down for hop in g)]
    skipped += len(clean) - len(groups)
    reasons = []
    for s, group in groups:
        counts = {hop: float(port_tx_deltas.get((s, hop), 0.0)) for hop in group}
        total = sum(counts.values())
        flows_at_least = math.ceil(total / max_flow_units - 1e-9)
        n = len(group)
        p_idle = min(1.0, n * (1 - 1 / n) ** flows_at_least)
        idle = [hop for hop, c in counts.items() if c <= 0]
        if idle and p_idle < alpha:
            reasons.append(
                f"{s} -> {','.join(idle)} idle while its ECMP group ({','.join(group)}) carried "
                f">= {flows_at_least} flows (P <= {p_idle:.1e} under independent hashing): "
                "switches hash alike (polarized)")
    return EcmpCheck(not reasons, tuple(reasons), len(groups), skipped)

