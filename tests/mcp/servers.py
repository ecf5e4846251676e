"""Upstream MCP servers for the MCP gateway's tests: the official Python SDK's FastMCP.

``make_server(name)`` is a real FastMCP server (its Streamable HTTP app runs in-process under
``httpx.ASGITransport``, or over stdio as ``python -m tests.mcp.servers NAME``). Its tools:
``add`` (a sum), ``echo`` (text back), ``shout`` (isError when told), ``progress`` (reports
progress, then answers) and, on the server named ``files``, ``read_file`` and ``write_file``.
"""

from __future__ import annotations

import sys

from mcp.server.fastmcp import Context, FastMCP


def make_server(name: str = "calc", *, json_response: bool = False, stateless: bool = False) -> FastMCP:
    server = FastMCP(name, host="127.0.0.1", json_response=json_response, stateless_http=stateless)
    server.calls = []  # type: ignore[attr-defined]  # (tool, arguments) as the server received them

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        server.calls.append(("add", {"a": a, "b": b}))  # type: ignore[attr-defined]
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        server.calls.append(("echo", {"text": text}))  # type: ignore[attr-defined]
        return text

    @server.tool()
    def shout(text: str, fail: bool = False) -> str:
        """Upper-case the text; with fail, the tool reports an error."""
        server.calls.append(("shout", {"text": text}))  # type: ignore[attr-defined]
        if fail:
            raise ValueError("the tool was told to fail")
        return text.upper()

    @server.tool()
    async def progress(steps: int, ctx: Context) -> str:
        """Report progress ``steps`` times, then answer."""
        server.calls.append(("progress", {"steps": steps}))  # type: ignore[attr-defined]
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        return f"done after {steps} steps"

    if name == "files":
        @server.tool()
        def read_file(path: str) -> str:
            """Read a file (a fake one)."""
            server.calls.append(("read_file", {"path": path}))  # type: ignore[attr-defined]
            return f"contents of {path}"

        @server.tool()
        def write_file(path: str, text: str) -> str:
            """Write a file (a fake one)."""
            server.calls.append(("write_file", {"path": path}))  # type: ignore[attr-defined]
            return "written"

    return server


if __name__ == "__main__":  # a stdio server: python -m tests.mcp.servers NAME
    make_server(sys.argv[1] if len(sys.argv) > 1 else "calc").run("stdio")
