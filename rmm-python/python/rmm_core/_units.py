"""Byte sizes as users write them: 1000000, "4GiB", "512 MB", "1.5e9"."""

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(size):
    """An int of bytes from an int, a float or a string with an optional unit; None stays None.

    >>> parse_bytes("4GiB"), parse_bytes("1.5 kB"), parse_bytes(1024)
    (4294967296, 1500, 1024)
    """
    if size is None:
        return None
    if isinstance(size, bool):
        raise TypeError(f"a size in bytes is an int or a string such as '4GiB', not {size!r}")
    if isinstance(size, int):
        number = size
    elif isinstance(size, float):
        number = size
    elif isinstance(size, str):
        text = size.strip().lower().replace(" ", "")
        split = len(text)
        while split > 0 and text[split - 1].isalpha():
            split -= 1
        unit = text[split:]
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in size {size!r} (use B, kB, MB, GB, KiB, MiB, GiB, ...)")
        try:
            number = float(text[:split]) * _UNITS[unit]
        except ValueError:
            raise ValueError(f"not a size: {size!r}") from None
    else:
        raise TypeError(f"a size in bytes is an int or a string such as '4GiB', not {type(size).__name__}")
    if number < 0 or number != number:
        raise ValueError(f"a size must not be negative: {size!r}")
    return int(number)
