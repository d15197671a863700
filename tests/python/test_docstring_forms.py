"""Parameter docs in numpydoc and reST form (read by docstring_parser), beside Google's
``Args:`` section: each parameter's description goes into the schema, the description stops
where the parameter docs begin, and a fixed parameter's entry leaves the published doc."""

from __future__ import annotations

import functools
from typing import Annotated

import pytest
from wasi_python.tools import stubs, tool

from helpers import run_python


def numpy_style(query: str, limit: int = 5, *, exact: bool = False) -> list[str]:
    """Search the catalogue.

    Matches names and descriptions.

    Parameters
    ----------
    query : str
        What to look for; words
        are ANDed together.
    limit : int, optional
        At most this many.
    exact : bool
        Match whole words only.

    Returns
    -------
    list of str
        The names found.
    """
    return []


def rest_style(query: str, limit: int = 5, *, exact: bool = False) -> list[str]:
    """Search the catalogue.

    Matches names and descriptions.

    :param query: What to look for; words
        are ANDed together.
    :type query: str
    :param int limit: At most this many.
    :param exact: Match whole words only.
    :returns: The names found.
    """
    return []


DESCRIBED = {
    "query": "What to look for; words are ANDed together.",
    "limit": "At most this many.",
    "exact": "Match whole words only.",
}


@pytest.mark.parametrize("fn", [numpy_style, rest_style], ids=["numpydoc", "rest"])
def test_each_parameter_gets_its_description(fn) -> None:
    t = tool(fn)
    props = t.input_schema["properties"]
    assert {k: p.get("description") for k, p in props.items()} == DESCRIBED
    assert props["limit"] == {"type": "integer", "description": "At most this many.", "default": 5}
    assert t.description == "Search the catalogue.\n\nMatches names and descriptions."
    # The guest's function carries the docstring as written.
    assert t.doc == fn.__doc__.strip().replace("\n    ", "\n")


def add(a: int, b: int) -> int:
    """Add.

    Parameters
    ----------
    a, b : int
        The numbers.
    """
    return a + b


def test_numpydoc_entries_naming_two_parameters() -> None:
    props = tool(add).input_schema["properties"]
    assert props["a"]["description"] == props["b"]["description"] == "The numbers."


def test_rest_description_stops_at_the_first_field_and_a_role_is_no_field() -> None:
    def f(x: int) -> None:
        """Uses :class:`int` values.

        :param x: A value.
        :raises ValueError: never.
        """

    t = tool(f)
    assert t.description == "Uses :class:`int` values."
    assert t.input_schema["properties"]["x"]["description"] == "A value."


def test_hint_and_field_descriptions_still_win() -> None:
    def f(x: Annotated[int, "From the hint."], y: int = 1) -> None:
        """Do it.

        :param x: From the docstring.
        :param y: Also from the docstring.
        """

    props = tool(f).input_schema["properties"]
    assert props["x"]["description"] == "From the hint."
    assert props["y"]["description"] == "Also from the docstring."


KEY = "sk-secret-value"


def numpy_orders(user_id: int, api_key: str, limit: int = 10) -> list[dict]:
    """This user's latest orders.

    Parameters
    ----------
    user_id : int
        Whose orders.
    api_key : str
        The key of the orders service,
        never shown.
    limit : int
        How many to return.

    Returns
    -------
    list of dict
    """
    return []


def rest_orders(user_id: int, api_key: str, limit: int = 10) -> list[dict]:
    """This user's latest orders.

    :param user_id: Whose orders.
    :param api_key: The key of the orders service,
        never shown.
    :type api_key: str
    :param limit: How many to return.
    """
    return []


@pytest.mark.parametrize(
    ("fn", "doc"),
    [
        (
            numpy_orders,
            "This user's latest orders.\n\nParameters\n----------\nlimit : int\n    How many to return."
            "\n\nReturns\n-------\nlist of dict",
        ),
        (rest_orders, "This user's latest orders.\n\n:param limit: How many to return."),
    ],
    ids=["numpydoc", "rest"],
)
def test_a_fixed_parameters_entry_leaves_the_published_doc(fn, doc) -> None:
    t = tool(functools.partial(fn, user_id=42, api_key=KEY), name="my_orders")
    assert t.doc == doc
    for hidden in ("user_id", "api_key", "never shown"):
        assert hidden not in t.doc
        assert hidden not in stubs([t])
    assert t.input_schema["properties"]["limit"]["description"] == "How many to return."


def test_a_numpydoc_section_left_empty_goes_with_its_dashes() -> None:
    def f(api_key: str, x: int) -> None:
        """Do it.

        Parameters
        ----------
        api_key : str
            The key.

        Other Parameters
        ----------------
        x : int
            A value.
        """

    t = tool(functools.partial(f, api_key=KEY))
    assert t.doc == "Do it.\n\nOther Parameters\n----------------\nx : int\n    A value."


def test_an_entry_that_also_names_a_visible_parameter_stays() -> None:
    t = tool(functools.partial(add, a=1))
    assert "a, b : int" in t.doc
    assert t.input_schema["properties"]["b"]["description"] == "The numbers."


def test_docstring_parser_is_imported_only_for_a_numpydoc_or_rest_docstring() -> None:
    program = """if True:
        import sys
        import wasi_python.tools as t
        def google(x: int) -> None:
            '''Do.

            Args:
                x: A value.
            '''
        def plain(x: int) -> None:
            '''Do.'''
        t.tool(google), t.tool(plain)
        print("docstring_parser" in sys.modules)
        def numpy(x: int) -> None:
            '''Do.

            Parameters
            ----------
            x : int
                A value.
            '''
        t.tool(numpy)
        print("docstring_parser" in sys.modules)
    """
    out = run_python("-c", program, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True"], out.stderr
