"""The admin API never answers Quart's HTML error page: gatewayctl reads JSON.

A route that raises (a gateway bug) is a JSON 500 ``internal_error`` whose traceback is
logged; an HTTP error Quart raises itself keeps its status, in the same JSON shape.
"""

from __future__ import annotations

import logging

from gatewayd.admin.api import create_admin_app


def broken_routes() -> list[dict]:
    raise ZeroDivisionError("a bug")


async def test_an_exception_in_a_route_is_a_json_500_with_the_traceback_logged(caplog):
    app = create_admin_app(None, None, lambda: 0.0, routes=broken_routes)
    response = await app.test_client().get("/admin/v1/routes")
    assert response.status_code == 500
    assert response.content_type == "application/json"
    error = (await response.get_json())["error"]
    assert error["code"] == "internal_error"
    assert "GET /admin/v1/routes" in error["message"] and "ZeroDivisionError" in error["message"]
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.exc_info is not None and "GET /admin/v1/routes" in record.getMessage()


async def test_an_http_error_keeps_its_status_in_json():
    app = create_admin_app(None, None, lambda: 0.0)
    response = await app.test_client().get("/admin/v1/nowhere")
    assert response.status_code == 404 and (await response.get_json())["error"]["code"] == "not_found"
    too_large = await app.test_client().post("/admin/v1/accounts", data=b"x" * (17 * 1024 * 1024))
    assert (too_large.status_code, too_large.content_type) == (413, "application/json")
    assert "Request Entity Too Large" in (await too_large.get_json())["error"]["message"]
