"""Signatures and docstrings: from "_meta": {"python": ...}, else from the schemas."""

import inspect
import pydoc

import pytest
from guest_fakes import FakeHost, modules_loaded, tool


def params(*specs):
    """(name, kind, annotation[, default]) tuples as "_meta" params."""
    out = []
    kinds = {
        "po": "positional_only",
        "pk": "positional_or_keyword",
        "ko": "keyword_only",
    }
    for spec in specs:
        p = {"name": spec[0], "kind": kinds[spec[1]]}
        if spec[2] is not None:
            p["annotation"] = spec[2]
        if len(spec) > 3:
            p["default"] = spec[3]
        out.append(p)
    return out


RUN_DOC = """Run Python code and return its result.

    Args:
        code: The code to run.
    """
LOOKUP_DOC = "Look up a sales region by its code.\n\nArgs:\n    code: The region code."

META_TOOLS = [
    tool(
        "run_code",
        "Run Python code.",
        {"code": {"type": "string"}},
        required=["code"],
        meta={
            "params": params(("code", "pk", "str")),
            "returns": "dict",
            "doc": RUN_DOC,
        },
    ),
    tool(
        "orders",
        "This user's latest orders.",
        {"limit": {"type": "integer", "default": 10}},
        meta={
            "params": params(("limit", "pk", "int", 10)),
            "returns": "list[dict]",
            "doc": "This user's latest orders.",
        },
    ),
    tool(
        "mixed",
        "",
        {},
        meta={
            "params": params(
                ("a", "po", "int"),
                ("b", "pk", None, "x"),
                ("x", "ko", "list[dict] | None", None),
                ("y", "ko", "bytes", {"$bytes": "AP8="}),
                ("z", "ko", "dict", {"k": [1, "v"]}),
            ),
            "doc": "",
        },
    ),
    tool("bare", "", {}, meta={"params": [], "doc": "No arguments."}),
    tool(
        "nodoc",
        "From the description.",
        {"q": {"type": "string", "description": "The query."}},
        required=["q"],
        meta={"params": params(("q", "pk", "str"))},
    ),
]

META_SIGNATURES = [
    ("run_code", "(code: str) -> dict"),
    ("orders", "(limit: int = 10) -> list[dict]"),
    (
        "mixed",
        "(a: int, /, b='x', *, x: list[dict] | None = None, "
        "y: bytes = b'\\x00\\xff', z: dict = {'k': [1, 'v']})",
    ),
    ("bare", "()"),
    ("nodoc", "(q: str)"),
]


@pytest.fixture
def meta_tools(guest):
    guest(FakeHost(tools=META_TOOLS))
    from host import tools

    return tools


@pytest.mark.parametrize("name, text", META_SIGNATURES)
def test_signature_from_meta(meta_tools, name, text):
    assert str(inspect.signature(getattr(meta_tools, name))) == text


def test_docstring_from_meta_is_verbatim(meta_tools):
    assert meta_tools.run_code.__doc__ == RUN_DOC
    assert meta_tools.bare.__doc__ == "No arguments."
    assert meta_tools.mixed.__doc__ == ""
    # No "doc" in "_meta": protocol 1's docstring from the description.
    assert (
        meta_tools.nodoc.__doc__ == "From the description.\n\nArgs:\n    q: The query."
    )


def test_annotations_are_text_objects_not_strings(meta_tools):
    sig = inspect.signature(meta_tools.run_code)
    annotation = sig.parameters["code"].annotation
    assert not isinstance(annotation, str) and repr(annotation) == "str"
    assert repr(sig.return_annotation) == "dict"
    assert sig.parameters["code"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


def test_signature_is_built_once(meta_tools):
    assert inspect.signature(meta_tools.orders) is inspect.signature(meta_tools.orders)


def test_help_on_one_tool(meta_tools, capsys):
    help(meta_tools.run_code)
    out = capsys.readouterr().out
    assert "run_code(code: str) -> dict" in out
    assert "Run Python code and return its result." in out
    assert "code: The code to run." in out


def test_help_on_the_module(meta_tools):
    text = pydoc.render_doc(meta_tools, renderer=pydoc.plaintext)
    assert "The embedder's tools, one function each." in text
    assert "FUNCTIONS" in text and "__getattr__(name)" in text
    assert "run_code(code: str) -> dict" in text
    assert "orders(limit: int = 10) -> list[dict]" in text
    assert "Look up" not in text
    assert "This user's latest orders." in text
    assert "__all__ = ['run_code', 'orders', 'mixed', 'bare', 'nodoc']" in text
    for private in ("_Tool", "_call", "_door", "_json"):
        assert private not in text


BAD_META = [
    {"params": "code"},
    {"params": [{"name": "code"}]},
    {"params": [{"name": "code", "kind": "var_positional"}]},
    {"params": [{"name": "code", "kind": ["positional_only"]}]},
    {"params": [{"name": "class", "kind": "positional_or_keyword"}]},
    {"params": [{"name": "two words", "kind": "positional_or_keyword"}]},
    {"params": [{"name": 1, "kind": "positional_or_keyword"}]},
    {"params": params(("a", "pk", "int"), ("a", "ko", "int"))},
    {"params": params(("a", "ko", "int"), ("b", "pk", "int"))},
    {"params": params(("a", "pk", "int", 1), ("b", "pk", "int"))},
    {"params": params(("a", "pk", "int")), "returns": 3},
    {"params": params(("a", "pk", "int")), "doc": ["x"]},
    {"params": [{"name": "a", "kind": "positional_or_keyword", "annotation": 5}]},
    {"params": ["a"]},
]


@pytest.mark.parametrize("meta", BAD_META)
def test_malformed_meta_falls_back_to_the_schema(guest, meta):
    d = tool("f", "Do f.", {"n": {"type": "integer"}}, required=["n"])
    d["_meta"] = {"python": meta}
    guest(FakeHost(tools=[d]))
    from host import tools

    assert str(inspect.signature(tools.f)) == "(n: int)"
    assert tools.f.__doc__ == "Do f.\n\nArgs:\n    n"


@pytest.mark.parametrize(
    "meta", [None, "python", {"python": None}, {"python": "x"}, {"other": {}}]
)
def test_absent_meta_falls_back_to_the_schema(guest, meta):
    d = tool("f", "Do f.", {"n": {"type": "integer"}}, required=["n"])
    if meta is not None:
        d["_meta"] = meta
    guest(FakeHost(tools=[d]))
    from host import tools

    assert str(inspect.signature(tools.f)) == "(n: int)"


# --------------------------------------------------------------- protocol 1's own

CAPTURED = tool(
    "f",
    "Do f.",
    {
        "a": {"type": "integer", "description": "an int"},
        "b": {"type": "string", "enum": ["x", "y"]},
        "c": {"type": "number", "default": 2.5},
        "d": {
            "anyOf": [{"type": "string", "contentEncoding": "base64"}, {"type": "null"}]
        },
    },
    required=["a"],
)


def test_captured_fallback_example(guest, capsys):
    guest(FakeHost(tools=[CAPTURED]))
    from host import tools

    assert (
        str(inspect.signature(tools.f))
        == "(a: int, b: Literal['x', 'y'] = ..., c: float = 2.5, d: bytes | None = ...)"
    )
    assert tools.f.__doc__ == "Do f.\n\nArgs:\n    a: an int\n    b\n    c\n    d"
    help(tools)
    out = capsys.readouterr().out
    assert (
        "f(a: int, b: Literal['x', 'y'] = ..., c: float = 2.5, d: bytes | None = ...)"
        in out
    )
    assert "__all__ = ['f']" in out


def test_price_example(guest):
    price = tool(
        "price",
        "Look up the unit price of an item.",
        {
            "item": {
                "type": "string",
                "description": 'The item\'s name, such as "apple".',
            },
            "qty": {"type": "integer", "description": "How many.", "default": 1},
        },
        required=["item"],
        output={"type": "number"},
    )
    guest(FakeHost(tools=[price]))
    from host import tools

    assert str(inspect.signature(tools.price)) == "(item: str, qty: int = 1) -> float"
    assert tools.price.__doc__ == (
        "Look up the unit price of an item.\n\nArgs:\n"
        '    item: The item\'s name, such as "apple".\n    qty: How many.'
    )


FALLBACK_SHAPES = [
    # descriptor fields besides the name, signature, doc
    ({}, "(**kwargs)", ""),
    ({"description": "  Only words.  "}, "(**kwargs)", "Only words."),
    ({"inputSchema": "object"}, "(**kwargs)", ""),
    ({"inputSchema": {"type": "object", "properties": []}}, "(**kwargs)", ""),
    (
        {"inputSchema": {"type": "object", "properties": {}, "required": "a"}},
        "(**kwargs)",
        "",
    ),
    ({"inputSchema": {"type": "object"}}, "()", ""),
    ({"inputSchema": {"properties": {}}}, "()", ""),
    ({"description": 7, "inputSchema": {"type": "object"}}, "()", ""),
    # Required ones first, in property order; unknown "required" names are ignored.
    (
        {"inputSchema": {"properties": {"o": {}, "r": {}}, "required": ["r", "ghost"]}},
        "(r: Any, o: Any = ...)",
        "Args:\n    o\n    r",
    ),
    # Property names Python cannot spell: keywords only, as **kwargs.
    (
        {"inputSchema": {"properties": {"x-y": {"type": "string"}}}},
        "(**kwargs)",
        "Args:\n    x-y",
    ),
    ({"inputSchema": {"properties": {"from": {}}}}, "(**kwargs)", "Args:\n    from"),
    # A bytes default shows as bytes.
    (
        {"inputSchema": {"properties": {"b": {"default": {"$bytes": "AA=="}}}}},
        "(b: Any = b'\\x00')",
        "Args:\n    b",
    ),
    (
        {
            "outputSchema": {"type": "array", "items": {"type": "string"}},
            "inputSchema": {"type": "object"},
        },
        "() -> list[str]",
        "",
    ),
    ({"outputSchema": None, "inputSchema": {"type": "object"}}, "()", ""),
]


@pytest.mark.parametrize("fields, signature, doc", FALLBACK_SHAPES)
def test_fallback_shapes(guest, fields, signature, doc):
    guest(FakeHost(tools=[{"name": "g", **fields}]))
    from host import tools

    assert str(inspect.signature(tools.g)) == signature
    assert tools.g.__doc__ == doc


def test_empty_properties_refuse_any_argument_locally(guest):
    fake = FakeHost(tools=[{"name": "g", "inputSchema": {"type": "object"}}])
    host = guest(fake)
    from host import tools

    with pytest.raises(host.ToolArgumentError) as info:
        tools.g(x=1)
    assert str(info.value) == "g(): got an unexpected keyword argument 'x'"


def test_kwargs_signature_sends_any_keyword(guest):
    fake = FakeHost(
        tools=[{"name": "g", "inputSchema": {"properties": {"x-y": {}}}}],
        handlers={"g": lambda **a: a},
    )
    guest(fake)
    from host import tools

    assert tools.g(**{"x-y": 1}) == {"x-y": 1}


ANNOTATIONS = [
    ({"type": "string"}, "str"),
    ({"type": "integer"}, "int"),
    ({"type": "number"}, "float"),
    ({"type": "boolean"}, "bool"),
    ({"type": "null"}, "None"),
    ({"type": "string", "contentEncoding": "base64"}, "bytes"),
    ({"type": "array", "items": {"type": "integer"}}, "list[int]"),
    ({"type": "array"}, "Any"),
    (
        {"type": "object", "additionalProperties": {"type": "number"}},
        "dict[str, float]",
    ),
    (
        {
            "type": "object",
            "additionalProperties": {"type": "number"},
            "properties": {},
        },
        "Any",
    ),
    ({"type": "object"}, "Any"),
    ({"enum": ["a", 1, None, True, 2.5]}, "Literal['a', 1, None, True, 2.5]"),
    ({"enum": [[1]]}, "Any"),
    ({"type": "string", "enum": []}, "str"),
    ({"const": "only"}, "Literal['only']"),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "int | None"),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "int | str"),
    ({"type": ["string", "null"]}, "str | None"),
    ({"type": ["integer", "integer"]}, "int"),
    (
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "list[str | None]",
    ),
    ({"type": "weird"}, "Any"),
    ({}, "Any"),
    ({"$ref": "#/x"}, "Any"),
    ("string", "Any"),
]


@pytest.mark.parametrize("schema, text", ANNOTATIONS)
def test_annotation_text_from_schema(guest, schema, text):
    guest(FakeHost(tools=[tool("g", "", {"p": schema}, required=["p"])]))
    from host import tools

    assert str(inspect.signature(tools.g)) == f"(p: {text})"


def test_annotations_deeper_than_8_are_any(guest):
    schema = {"type": "integer"}
    for _ in range(12):
        schema = {"type": "array", "items": schema}
    guest(FakeHost(tools=[tool("g", "", {"p": schema}, required=["p"])]))
    from host import tools

    assert (
        str(inspect.signature(tools.g)) == "(p: " + "list[" * 9 + "Any" + "]" * 9 + ")"
    )




def test_importing_and_calling_tools_loads_no_introspection():
    """The fast path imports neither inspect, numbers, typing nor host._lazy."""
    descriptor = tool(
        "f",
        "F.",
        {"x": {}},
        meta={"params": params(("x", "pk", None)), "doc": "F."},
    )
    loaded = modules_loaded(
        descriptor, 'tools.f([1, 2.5, "s", None, {"k": b"x"}])\ntools.f(x=(1, 2))', value='{"$bytes":"AA=="}'
    )
    assert "host.tools" in loaded
    for heavy in ("inspect", "numbers", "typing", "ast", "base64", "host._lazy"):
        assert heavy not in loaded
    for other in ("keyword", "copy"):
        assert other not in loaded
