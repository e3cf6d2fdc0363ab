"""Byte formatting: the only place bytes become human units.

memdoc keeps every quantity in integer bytes. GiB is 1024³ bytes, GB is 10⁹ bytes; a figure is
always printed with its unit, and one report never mixes the two systems.
"""

GiB = 1024**3
MiB = 1024**2
KiB = 1024
GB = 10**9
MB = 10**6

_BINARY = (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB))
_DECIMAL = (("TB", 10**12), ("GB", GB), ("MB", MB), ("kB", 10**3))


def format_bytes(n: int | float, *, decimal: bool = False, unit: str | None = None, digits: int = 2) -> str:
    """Format `n` bytes as e.g. '13.48 GiB' (binary, default) or '14.47 GB' (decimal).

    `unit` forces one unit ('GiB', 'MiB', 'GB', …) so that a column of figures lines up.
    """
    table = _DECIMAL if decimal else _BINARY
    if unit is not None:
        scale = dict(_BINARY + _DECIMAL)[unit]
        return f"{n / scale:.{digits}f} {unit}"
    for name, scale in table:
        if abs(n) >= scale:
            return f"{n / scale:.{digits}f} {name}"
    return f"{int(n)} B"


def gib(n: int | float) -> float:
    """Bytes → GiB as a float (for ratios and plots, never for printing without the unit)."""
    return n / GiB
