import pytest

from rmm_core import parse_bytes


@pytest.mark.parametrize(
    "text, expected",
    [(None, None), (0, 0), (1024, 1024), ("4GiB", 4 << 30), ("512 MiB", 512 << 20), ("1.5kB", 1500), ("2e3", 2000), ("7b", 7)],
)
def test_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad, error", [("4 parsecs", ValueError), ("GiB", ValueError), (-1, ValueError), (True, TypeError), ([1], TypeError)])
def test_bad_sizes_are_refused_by_name(bad, error):
    with pytest.raises(error):
        parse_bytes(bad)


def test_the_version_is_the_installed_package_s():
    from importlib.metadata import version

    import rmm_core

    assert rmm_core.__version__ == version("rmm-core")
