import pytest

from mirror_worker.config.properties import load_properties, parse_properties
from mirror_worker.exceptions import ConfigError


@pytest.mark.parametrize("text, expected", [
    ("bootstrap.servers=a:1\n", {"bootstrap.servers": "a:1"}),
    ("a = 1\nb: 2\nc 3\n", {"a": "1", "b": "2", "c": "3"}),
    ("# comment\n! also\n\n  x=y  \n", {"x": "y  "}),
    ("sasl.jaas.config=one \\\n    two\n", {"sasl.jaas.config": "one two"}),
    ("path=C:\\\\dir\n", {"path": "C:\\dir"}),
    ("key\\=with\\:seps=v\n", {"key=with:seps": "v"}),
    ("empty=\n", {"empty": ""}),
    ("u=\\u0041\\t\n", {"u": "A\t"}),
    ("dup=1\ndup=2\n", {"dup": "2"}),
])
def test_parse_properties(text, expected):
    assert parse_properties(text) == expected


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.properties"):
        load_properties(tmp_path / "nope.properties")


def test_directory_is_unreadable(tmp_path):
    with pytest.raises(ConfigError, match="config file unreadable"):
        load_properties(tmp_path)
