"""The MCP gateway (issue 37): one key, one balance for tools too.

- ``settings``: ``[[mcp_servers]]`` in the config file;
- ``access``: which servers and tools a key (and its group) may use;
- ``protocol``: MCP's JSON-RPC messages, versions, session ids: sans-I/O;
- ``upstream``: the gateway as an MCP client of those servers (Streamable HTTP, stdio);
- ``tools``: listing and calling tools for a caller: access, concurrency, holds, settlement;
- ``gateway``: the ``/mcp`` and ``/mcp/{server}`` endpoints (Streamable HTTP), at the daemon's edge.

docs/mcp.md is the operator's and the client's page.
"""
