"""Errors that the CLI turns into a clear one-line message instead of a traceback."""


class FabricEmuError(Exception):
    """Base class for every error a user can cause (bad input, missing feature)."""


class ParameterError(FabricEmuError, ValueError):
    """An invalid parameter; the message names the parameter and the legal range."""

    def __init__(self, name: str, value: object, why: str):
        self.name = name
        self.value = value
        self.why = why
        super().__init__(f"invalid {name}={value!r}: {why}")


class CapabilityError(FabricEmuError):
    """A kernel or system feature the requested operation needs is missing."""


class NotRootError(FabricEmuError):
    """The operation creates namespaces or qdiscs and needs root."""
