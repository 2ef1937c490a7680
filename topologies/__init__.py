"""Pure-data fabric topologies (Mininet ``Topo`` subclasses with real rates)."""
