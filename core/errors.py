"""Errors that the CLI turns into a clear one-line message instead of a traceback."""


class FabricEmuError(Exception):
    """Base class for every error a user can cause (bad input, missing feature)."""


#: The longest quote of a user's input in a message: a 100 KB input is not echoed back.
MAX_QUOTE_CHARS = 80
#: The longest reason kept in a message (one line on a terminal, give or take).
MAX_WHY_CHARS = 300


def quote(value: object, limit: int = MAX_QUOTE_CHARS) -> str:
    """``repr(value)``, cut to its head and tail with the length in between if long."""
    text = repr(value)
    if len(text) <= limit:
        return text
    keep = (limit - 20) // 2
    return f"{text[:keep]}...<{len(text):,} chars>...{text[-keep:]}"


def shorten(text: str, limit: int = MAX_WHY_CHARS) -> str:
    """``text`` as one line of at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 25] + f"... (+{len(text) - limit + 25:,} chars)"


class ParameterError(FabricEmuError, ValueError):
    """An invalid parameter; the message names the parameter and the legal range,
    quoting the value (its head and tail if long) and never more than a line."""

    def __init__(self, name: str, value: object, why: str):
        self.name = name
        self.value = value
        self.why = why
        super().__init__(f"invalid {shorten(str(name), 60)}={quote(value)}: {shorten(why)}")

    def __reduce__(self) -> tuple[type, tuple[str, object, str]]:
        # Rebuilt from its fields: a forked worker's error reaches the parent whole.
        return type(self), (self.name, self.value, self.why)


class CapabilityError(FabricEmuError):
    """A kernel or system feature the requested operation needs is missing."""


class NotRootError(FabricEmuError):
    """The operation creates namespaces or qdiscs and needs root."""
