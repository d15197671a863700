"""`wasi_python.tools.stubs`: the tools as the guest sees them, as Python source for a prompt."""

import ast
import functools
from typing import Literal

import pytest

from wasi_python.tools import stubs, tool

from helpers import lookup_region

KEY = "sk-secret-value"


def orders_for(
    user_id: int, api_key: str, limit: int = 10, *, status: Literal["open", "shipped"] = "open"
) -> list[dict]:
    """This user's latest orders.

    Args:
        user_id: Whose orders.
        api_key: The service's key.
        limit: How many.
    """
    return []


EXPECTED = '''\
def lookup_region(code: str) -> dict:
    """Look up a sales region by its code.

    Args:
        code: The region code, such as "EMEA".
    """
    ...


def my_orders(limit: int = 10, *, status: Literal['open', 'shipped'] = 'open') -> list[dict]:
    """This user's latest orders.

    Args:
        limit: How many.
    """
    ...
'''


def test_stubs_of_a_small_example() -> None:
    my_orders = tool(functools.partial(orders_for, user_id=7, api_key=KEY), name="my_orders")
    text = stubs([lookup_region, my_orders])
    assert text == EXPECTED
    compile(text, "<stubs>", "exec")
    for hidden in ("user_id", "api_key", KEY):
        assert hidden not in text


def odd_docs(path: str = "C:\\temp", mode: int = 0o644, /, **options: float) -> None:
    '''Quotes """ and a backslash \\ and a trailing quote"'''


def no_doc(x, y=None):  # noqa: ANN001, ANN201
    pass


def test_stubs_compile_for_awkward_signatures_and_docs() -> None:
    schema_tool = tool(
        lambda **kw: None,
        name="from_schema",
        description="From a schema.",
        input_schema={
            "type": "object",
            "properties": {
                "q": {"type": "string", "description": "The query."},
                "page": {"type": "integer"},
                "raw": {
                    "type": "string",
                    "contentEncoding": "base64",
                    "default": {"$bytes": "AP8="},
                },
            },
            "required": ["q"],
        },
    )
    text = stubs([odd_docs, no_doc, schema_tool])
    tree = ast.parse(text)
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert list(funcs) == ["odd_docs", "no_doc", "from_schema"]
    assert (
        ast.get_docstring(funcs["odd_docs"])
        == 'Quotes """ and a backslash \\ and a trailing quote"'
    )
    assert ast.get_docstring(funcs["no_doc"]) is None
    assert (
        "def odd_docs(path: str = 'C:\\\\temp', mode: int = 420, /, **options: float) -> None:"
        in text
    )
    assert "def no_doc(x, y=None):" in text
    # An optional property with no default shows as `...`: the guest sends nothing for it.
    assert "def from_schema(q: str, page: int = ..., raw: bytes = b'\\x00\\xff'):" in text
    assert (
        ast.get_docstring(funcs["from_schema"])
        == "From a schema.\n\nArgs:\n    q: The query.\n    page\n    raw"
    )


def test_stubs_accept_plain_functions() -> None:
    def add(a: int, b: int = 1) -> int:
        """Add two numbers."""
        return a + b

    assert (
        stubs([add]) == 'def add(a: int, b: int = 1) -> int:\n    """Add two numbers."""\n    ...\n'
    )


def test_stubs_refuse_two_tools_with_one_name() -> None:
    with pytest.raises(ValueError):
        stubs([lookup_region, tool(orders_for, name="lookup_region")])


def test_stubs_of_no_tools() -> None:
    assert stubs([]) == ""
